// libtpu runtime metrics: per-chip HBM usage, HBM total and TensorCore duty cycle, read from libtpu's
// RuntimeMetricService (gRPC on localhost:<port>, one port per process that holds TPU chips; the service answers
// UNAVAILABLE while no framework holds the TPU, which is normal).
//
// The parsing functions are pure and tolerate any response: entries they cannot use are skipped with a reason.
// LibtpuClient is thread-compatible: one caller at a time (the agent's metrics sampler).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "tpu/monitoring/runtime/tpu_metric_service.grpc.pb.h"

namespace torus::metrics {

inline constexpr char kLibtpuHbmUsageMetric[] = "tpu.runtime.hbm.memory.usage.bytes";
inline constexpr char kLibtpuHbmTotalMetric[] = "tpu.runtime.hbm.memory.total.bytes";
inline constexpr char kLibtpuDutyCycleMetric[] = "tpu.runtime.tensorcore.dutycycle.percent";
inline constexpr int kDefaultLibtpuMetricsPort = 8431;

// One metric's values by device (or chip) id, and what was skipped, as sentences.
struct PerDeviceValues {
  std::map<int64_t, double> values;
  std::vector<std::string> skipped;
};

// Which gauge field a metric is expected in. kInt accepts as_double too (an integral reading either way);
// kDouble accepts as_int. Strings, bools, counters and distributions are skipped.
enum class GaugeKind { kInt, kDouble };

// The gauges of `response` keyed by attribute.value.int_attr. Skips (with a reason) entries with no attribute,
// a non-integer or negative id, no gauge, a value of the wrong type, a non-finite value, or an id seen before (the
// first wins). A response naming another metric yields nothing but a reason.
PerDeviceValues ParsePerDeviceGauge(const tpu::monitoring::runtime::MetricResponse& response,
                                    std::string_view expected_name, GaugeKind kind);

// What libtpu reports for one chip; a field is unset when libtpu did not report it.
struct LibtpuChipStats {
  std::optional<double> duty_cycle_percent;
  std::optional<int64_t> hbm_used_bytes;
  std::optional<int64_t> hbm_total_bytes;
};

// Joins the three metrics into per-chip stats. HBM is reported per device and duty cycle per chip; when the HBM
// metrics list exactly twice as many devices as there are chips with a duty cycle (two TensorCores per chip),
// devices 2c and 2c+1 are summed into chip c; otherwise device d is chip d.
std::map<int, LibtpuChipStats> JoinLibtpuMetrics(const PerDeviceValues& hbm_used, const PerDeviceValues& hbm_total,
                                                 const PerDeviceValues& duty_cycle);

// The ports in TPU_RUNTIME_METRICS_PORTS: comma-separated, each 1..65535, spaces around entries ignored, duplicates
// dropped. Unset or empty: {8431}. InvalidArgument naming the variable and the bad entry otherwise.
absl::StatusOr<std::vector<int>> ParseMetricsPorts(const char* env_value);

// One port's answer: its chips, or why it could not be read; `skipped` lists entries left out of an answer.
struct LibtpuPortReading {
  int port = 0;
  absl::StatusOr<std::map<int, LibtpuChipStats>> chips = std::map<int, LibtpuChipStats>{};
  std::vector<std::string> skipped;
};

class LibtpuClient {
 public:
  // Reads `ports` on `host` (normally "localhost": libtpu accepts local connections only), each query bounded by
  // `deadline_ms`.
  explicit LibtpuClient(std::vector<int> ports, std::string host = "localhost", int64_t deadline_ms = 1000);

  const std::vector<int>& ports() const { return ports_; }
  // Queries the three metrics on one of ports(). The port's status is the first failed query's (UNAVAILABLE when
  // no framework holds the TPU); a metric libtpu does not know (NOT_FOUND, INVALID_ARGUMENT) is left out.
  LibtpuPortReading Read(int port);

 private:
  absl::StatusOr<tpu::monitoring::runtime::MetricResponse> Query(
      tpu::monitoring::runtime::RuntimeMetricService::Stub& stub, const char* metric);

  const std::vector<int> ports_;
  const std::string host_;
  const int64_t deadline_ms_;
  std::map<int, std::unique_ptr<tpu::monitoring::runtime::RuntimeMetricService::Stub>> stubs_;
};

// Chips of several ports in one map; a chip reported by two ports keeps the first port's values and adds a line
// to `skipped`. Ports that failed contribute nothing.
std::map<int, LibtpuChipStats> MergePortReadings(const std::vector<LibtpuPortReading>& readings,
                                                 std::vector<std::string>* skipped);

}  // namespace torus::metrics
