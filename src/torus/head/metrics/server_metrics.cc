#include "torus/head/metrics/server_metrics.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/support/status.h"

namespace torus::head {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::Write(PrometheusWriter& w, const std::string& name) const {
  absl::MutexLock lock(&mu_);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    w.Sample(name + "_bucket", {{"le", absl::StrCat(bounds_[i])}}, static_cast<double>(cumulative));
  }
  w.Sample(name + "_bucket", {{"le", "+Inf"}}, static_cast<double>(count_));
  w.Sample(name + "_sum", {}, sum_);
  w.Sample(name + "_count", {}, static_cast<double>(count_));
}

void RequestCounter::Add(const std::string& method, const std::string& code) {
  absl::MutexLock lock(&mu_);
  ++counts_[{method, code}];
}

std::map<std::pair<std::string, std::string>, uint64_t> RequestCounter::Counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

std::string GrpcCodeName(int code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  if (code >= 0 && code < static_cast<int>(std::size(kNames))) return kNames[code];
  return absl::StrCat("CODE_", code);
}

namespace {

class CountingInterceptor : public grpc::experimental::Interceptor {
 public:
  CountingInterceptor(RequestCounter* counter, std::string method) : counter_(counter), method_(std::move(method)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      counter_->Add(method_, GrpcCodeName(methods->GetSendStatus().error_code()));
    }
    methods->Proceed();
  }

 private:
  RequestCounter* counter_;
  const std::string method_;
};

}  // namespace

GrpcCountingInterceptorFactory::GrpcCountingInterceptorFactory(RequestCounter* counter,
                                                               const std::vector<std::string>& services)
    : counter_(counter) {
  for (const std::string& name : services) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
    if (service == nullptr) continue;
    for (int i = 0; i < service->method_count(); ++i) {
      const google::protobuf::MethodDescriptor* method = service->method(i);
      const std::string path = absl::StrCat("/", service->full_name(), "/", method->name());
      if (method->client_streaming() && method->server_streaming()) {
        uncounted_.insert(path);
      } else {
        methods_.insert(path);
      }
    }
  }
}

grpc::experimental::Interceptor* GrpcCountingInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  const char* method = info->method();
  if (method != nullptr && uncounted_.contains(method)) return nullptr;
  return new CountingInterceptor(counter_, method != nullptr && methods_.count(method) ? method : "unknown");
}

std::string HttpRouteFamily(const std::string& path) {
  if (path == "/" || path == "/healthz" || path == "/metrics") return path;
  if (path.rfind("/static/", 0) == 0) return "/static";
  // Only known words are kept, so that arbitrary paths cannot make a series each.
  static const std::set<std::string> kCollections = {"cluster", "nodes",   "slices", "placement_groups", "runs",
                                                     "jobs",    "metrics", "version", "packages"};
  static const std::set<std::string> kSubs = {"logs", "log", "report", "stop", "tail"};
  std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  if (parts.empty() || parts[0] != "api") return "other";
  const bool v0 = parts.size() >= 2 && parts[1] == "v0";
  const size_t collection_at = v0 ? 2 : 1;
  if (parts.size() <= collection_at || kCollections.count(parts[collection_at]) == 0) return "other";
  std::string out = v0 ? "/api/v0/" : "/api/";
  out += parts[collection_at];
  if (parts.size() > collection_at + 1) out += "/{id}";
  if (parts.size() > collection_at + 2) out += kSubs.count(parts[collection_at + 2]) ? "/" + parts[collection_at + 2] : "/{sub}";
  return out;
}

std::optional<double> PlacementLatencySeconds(const Group& group) {
  const std::vector<PgEvent>& history = group.history;
  int created = static_cast<int>(history.size()) - 1;
  while (created >= 0 && history[created].state != "CREATED") --created;
  if (group.state != PgState::kCreated || created < 0) return std::nullopt;
  int start = created;
  while (start > 0 && history[start - 1].state != "CREATED") --start;
  return std::max<int64_t>(0, history[created].time_ms - history[start].time_ms) / 1000.0;
}

std::vector<double> PlacementLatencyBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};
}

}  // namespace torus::head
