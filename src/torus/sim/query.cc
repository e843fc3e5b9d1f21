#include "torus/sim/query.h"

#include "absl/strings/str_cat.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "torus/sim/metric_service.h"
#include "tpu/monitoring/runtime/tpu_metric_service.grpc.pb.h"

namespace torus::sim {

namespace runtime = tpu::monitoring::runtime;

std::shared_ptr<grpc::ChannelCredentials> LocalTcpChannelCredentials() {
  return grpc::experimental::LocalCredentials(LOCAL_TCP);
}

std::shared_ptr<grpc::ServerCredentials> LocalTcpServerCredentials() {
  return grpc::experimental::LocalServerCredentials(LOCAL_TCP);
}

nlohmann::json MetricValuesJson(const runtime::TPUMetric& metric) {
  nlohmann::json values = nlohmann::json::array();
  for (const runtime::Metric& m : metric.metrics()) {
    nlohmann::json entry;
    if (m.attribute().value().attr_case() == runtime::AttrValue::kIntAttr) {
      entry["device_id"] = m.attribute().value().int_attr();
    } else {
      entry[m.attribute().key()] = m.attribute().value().string_attr();
    }
    const runtime::Gauge& g = m.gauge();
    switch (g.value_case()) {
      case runtime::Gauge::kAsInt:
        entry["value"] = g.as_int();
        break;
      case runtime::Gauge::kAsDouble:
        entry["value"] = g.as_double();
        break;
      case runtime::Gauge::kAsString:
        entry["value"] = g.as_string();
        break;
      case runtime::Gauge::kAsBool:
        entry["value"] = g.as_bool();
        break;
      default:
        entry["value"] = nullptr;
    }
    values.push_back(std::move(entry));
  }
  return values;
}

absl::StatusOr<nlohmann::json> QueryMetrics(const std::string& address, std::chrono::milliseconds timeout) {
  auto channel = grpc::CreateChannel(address, LocalTcpChannelCredentials());
  auto stub = runtime::RuntimeMetricService::NewStub(channel);
  auto deadline = [&] { return std::chrono::system_clock::now() + timeout; };

  nlohmann::json out = {{"address", address}, {"supported", nlohmann::json::array()}, {"metrics", nlohmann::json::object()}};
  {
    grpc::ClientContext context;
    context.set_deadline(deadline());
    runtime::ListSupportedMetricsRequest request;
    runtime::ListSupportedMetricsResponse response;
    grpc::Status s = stub->ListSupportedMetrics(&context, request, &response);
    if (!s.ok()) {
      return absl::UnavailableError(
          absl::StrCat(address, ": ListSupportedMetrics failed: ", s.error_message(), " (code ", static_cast<int>(s.error_code()), ")"));
    }
    for (const auto& m : response.supported_metric()) out["supported"].push_back(m.metric_name());
  }
  for (const std::string& name : SupportedMetricNames()) {
    grpc::ClientContext context;
    context.set_deadline(deadline());
    runtime::MetricRequest request;
    request.set_metric_name(name);
    runtime::MetricResponse response;
    grpc::Status s = stub->GetRuntimeMetric(&context, request, &response);
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) continue;
    if (!s.ok()) {
      return absl::UnavailableError(absl::StrCat(address, ": GetRuntimeMetric(", name, ") failed: ", s.error_message(),
                                                 " (code ", static_cast<int>(s.error_code()), ")"));
    }
    out["metrics"][name] = MetricValuesJson(response.metric());
  }
  return out;
}

}  // namespace torus::sim
