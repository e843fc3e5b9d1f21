#include "torus/sim/metric_service.h"

#include <regex>

#include "absl/strings/str_cat.h"

namespace torus::sim {
namespace {

using tpu::monitoring::runtime::Metric;
using tpu::monitoring::runtime::TPUMetric;

Metric* AddDeviceMetric(TPUMetric& metric, int64_t device_id, int64_t unix_nanos) {
  Metric* m = metric.add_metrics();
  m->mutable_attribute()->set_key("device-id");
  m->mutable_attribute()->mutable_value()->set_int_attr(device_id);
  m->mutable_timestamp()->set_seconds(unix_nanos / 1'000'000'000);
  m->mutable_timestamp()->set_nanos(static_cast<int32_t>(unix_nanos % 1'000'000'000));
  return m;
}

}  // namespace

const std::vector<std::string>& SupportedMetricNames() {
  static const auto* names = new std::vector<std::string>{kDutyCycleMetric, kHbmTotalMetric, kHbmUsageMetric};
  return *names;
}

bool FillMetric(const std::string& name, const TpuSnapshot& snapshot, TPUMetric& metric) {
  metric.set_name(name);
  if (name == kHbmUsageMetric || name == kHbmTotalMetric) {
    const bool usage = name == kHbmUsageMetric;
    metric.set_description(usage ? "Current HBM memory usage in bytes, per device."
                                 : "Total HBM memory in bytes, per device.");
    const auto& values = usage ? snapshot.hbm_used_bytes : snapshot.hbm_total_bytes;
    for (size_t d = 0; d < values.size(); ++d) {
      AddDeviceMetric(metric, static_cast<int64_t>(d), snapshot.unix_nanos)->mutable_gauge()->set_as_int(values[d]);
    }
    return true;
  }
  if (name == kDutyCycleMetric) {
    metric.set_description("Percentage of time over the sample period during which the TensorCore was actively "
                           "processing, per chip.");
    for (size_t c = 0; c < snapshot.duty_cycle_percent.size(); ++c) {
      AddDeviceMetric(metric, static_cast<int64_t>(c), snapshot.unix_nanos)
          ->mutable_gauge()
          ->set_as_double(snapshot.duty_cycle_percent[c]);
    }
    return true;
  }
  return false;
}

SimulatedMetricService::SimulatedMetricService(TpuSnapshot initial) : snapshot_(std::move(initial)) {}

void SimulatedMetricService::Publish(TpuSnapshot snapshot) {
  absl::MutexLock lock(&mu_);
  snapshot_ = std::move(snapshot);
}

grpc::Status SimulatedMetricService::GetRuntimeMetric(grpc::ServerContext*,
                                                      const tpu::monitoring::runtime::MetricRequest* request,
                                                      tpu::monitoring::runtime::MetricResponse* response) {
  TpuSnapshot snapshot;
  {
    absl::MutexLock lock(&mu_);
    snapshot = snapshot_;
  }
  if (!FillMetric(request->metric_name(), snapshot, *response->mutable_metric())) {
    response->Clear();
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("metric \"", request->metric_name(), "\" is not supported"));
  }
  return grpc::Status::OK;
}

grpc::Status SimulatedMetricService::ListSupportedMetrics(
    grpc::ServerContext*, const tpu::monitoring::runtime::ListSupportedMetricsRequest* request,
    tpu::monitoring::runtime::ListSupportedMetricsResponse* response) {
  std::regex filter;
  try {
    filter = std::regex(request->filter().empty() ? std::string(".*") : request->filter());
  } catch (const std::regex_error& e) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("filter \"", request->filter(), "\" is not a regular expression: ", e.what()));
  }
  for (const std::string& name : SupportedMetricNames()) {
    if (std::regex_search(name, filter)) response->add_supported_metric()->set_metric_name(name);
  }
  return grpc::Status::OK;
}

}  // namespace torus::sim
