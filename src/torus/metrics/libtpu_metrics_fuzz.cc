// libFuzzer target for libtpu's runtime metrics replies (docs/fuzzing.md): a MetricResponse as it comes off the wire
// (the input's bytes, in protobuf's binary form), and the TPU_RUNTIME_METRICS_PORTS variable (the input as text).
// A reply that decodes is read as each of the three metrics the agent asks for, both as sent and with its name
// set to the one asked for; the readings are joined into chips as the agent joins them. Nothing may crash, and
// what is kept is in range: device ids 0..65536, finite values, byte counts 0..1e18, entries either kept or
// skipped with a reason, chips never negative. Ports that parse are 1..65535 without repeats.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>

#include "google/protobuf/stubs/logging.h"
#include "torus/metrics/libtpu_metrics.h"

namespace {

namespace metrics = torus::metrics;
namespace tpu_rt = tpu::monitoring::runtime;

// Aborts, so that libFuzzer records the input, when a property that parsing promises does not hold.
void Require(bool condition) {
  if (!condition) std::abort();
}

metrics::PerDeviceValues Read(const tpu_rt::MetricResponse& response, const char* name, metrics::GaugeKind kind) {
  metrics::PerDeviceValues values = metrics::ParsePerDeviceGauge(response, name, kind);
  if (response.metric().name() == name) {
    Require(values.values.size() + values.skipped.size() == static_cast<size_t>(response.metric().metrics_size()));
  } else {
    Require(values.values.empty() && values.skipped.size() == 1);
  }
  for (const auto& [id, value] : values.values) {
    Require(id >= 0 && id <= (1 << 16));
    Require(std::isfinite(value));
    if (kind == metrics::GaugeKind::kInt) Require(value >= 0 && value <= 1e18);
  }
  return values;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Replies with invalid UTF-8 in string fields are refused, as they should be; protobuf need not log each one.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (text.find('\0') == std::string::npos) {
    absl::StatusOr<std::vector<int>> ports = metrics::ParseMetricsPorts(text.c_str());
    if (ports.ok()) {
      Require(!ports->empty());
      std::set<int> seen;
      for (int port : *ports) Require(port >= 1 && port <= 65535 && seen.insert(port).second);
    } else {
      Require(ports.status().code() == absl::StatusCode::kInvalidArgument);
    }
  }

  tpu_rt::MetricResponse response;
  if (!response.ParseFromArray(data, static_cast<int>(size))) return 0;
  const struct {
    const char* name;
    metrics::GaugeKind kind;
  } wanted[] = {{metrics::kLibtpuHbmUsageMetric, metrics::GaugeKind::kInt},
                {metrics::kLibtpuHbmTotalMetric, metrics::GaugeKind::kInt},
                {metrics::kLibtpuDutyCycleMetric, metrics::GaugeKind::kDouble}};
  for (const auto& w : wanted) Read(response, w.name, w.kind);

  std::vector<metrics::PerDeviceValues> named;
  for (const auto& w : wanted) {
    tpu_rt::MetricResponse as_asked = response;
    as_asked.mutable_metric()->set_name(w.name);
    named.push_back(Read(as_asked, w.name, w.kind));
  }
  const std::map<int, metrics::LibtpuChipStats> chips = metrics::JoinLibtpuMetrics(named[0], named[1], named[2]);
  for (const auto& [chip, stats] : chips) {
    Require(chip >= 0);
    Require(!stats.hbm_used_bytes || *stats.hbm_used_bytes >= 0);
    Require(!stats.hbm_total_bytes || *stats.hbm_total_bytes >= 0);
  }
  metrics::LibtpuPortReading first{.port = 8431, .chips = chips, .skipped = {}};
  metrics::LibtpuPortReading second{.port = 8432, .chips = chips, .skipped = {}};
  std::vector<std::string> skipped;
  Require(metrics::MergePortReadings({first, second}, &skipped).size() == chips.size());
  Require(skipped.size() == chips.size());
  return 0;
}
