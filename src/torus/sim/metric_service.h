// SimulatedMetricService: libtpu's tpu.monitoring.runtime.RuntimeMetricService as torus-tpu-sim serves it for a
// simulated TPU host, answering from the latest TpuSnapshot published by the sampling thread. A simulator: its
// values come from ChipModel, not from hardware.
//
// Metrics (names and shapes as libtpu's, tpu.md §7):
//   tpu.runtime.hbm.memory.usage.bytes        gauge.as_int per device, attribute "device-id" = int_attr
//   tpu.runtime.hbm.memory.total.bytes        gauge.as_int per device, same attribute
//   tpu.runtime.tensorcore.dutycycle.percent  gauge.as_double per chip, attribute "device-id" = chip index
// Any other name: NOT_FOUND, as libtpu answers. ListSupportedMetrics filters names with the request's regular
// expression (searched anywhere in the name; empty = all; a bad expression is INVALID_ARGUMENT).
//
// Thread-safety: thread-safe; Publish from any thread while gRPC threads serve.
#pragma once

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "torus/sim/chip_model.h"
#include "tpu/monitoring/runtime/tpu_metric_service.grpc.pb.h"

namespace torus::sim {

inline constexpr char kHbmUsageMetric[] = "tpu.runtime.hbm.memory.usage.bytes";
inline constexpr char kHbmTotalMetric[] = "tpu.runtime.hbm.memory.total.bytes";
inline constexpr char kDutyCycleMetric[] = "tpu.runtime.tensorcore.dutycycle.percent";

// The names served, in the order ListSupportedMetrics lists them.
const std::vector<std::string>& SupportedMetricNames();

class SimulatedMetricService final : public tpu::monitoring::runtime::RuntimeMetricService::Service {
 public:
  explicit SimulatedMetricService(TpuSnapshot initial);

  // Replaces the values served.
  void Publish(TpuSnapshot snapshot);

  grpc::Status GetRuntimeMetric(grpc::ServerContext* context, const tpu::monitoring::runtime::MetricRequest* request,
                                tpu::monitoring::runtime::MetricResponse* response) override;
  grpc::Status ListSupportedMetrics(grpc::ServerContext* context,
                                    const tpu::monitoring::runtime::ListSupportedMetricsRequest* request,
                                    tpu::monitoring::runtime::ListSupportedMetricsResponse* response) override;

 private:
  absl::Mutex mu_;
  TpuSnapshot snapshot_ ABSL_GUARDED_BY(mu_);
};

// Fills `metric` with one metric's values from `snapshot`; false when `name` is not a supported metric.
bool FillMetric(const std::string& name, const TpuSnapshot& snapshot, tpu::monitoring::runtime::TPUMetric& metric);

}  // namespace torus::sim
