#include "torus/head/autoscaler/kubernetes_provider.h"

#include <httplib.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "spdlog/spdlog.h"
#include "torus/autoscale/kubernetes_objects.h"

namespace torus::head {
namespace {

using json = nlohmann::json;

constexpr int64_t kFailureCheckMicros = 5'000'000;

std::string ReadTrimmed(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(text.str()));
}

std::string SliceSelector(const std::string& slice) {
  return httplib::detail::encode_query_param(absl::StrCat(std::string(autoscale::kSliceLabel), "=", slice));
}

std::string ManagedSelector() {
  return httplib::detail::encode_query_param(
      absl::StrCat(std::string(autoscale::kManagedByLabel), "=", std::string(autoscale::kManagedByValue)));
}

// The API server's message of a failed call (a Status object's `message`), else its body.
std::string ApiMessage(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j["message"].is_string()) return j["message"].get<std::string>();
  return body.substr(0, 300);
}

std::string LabelOf(const json& object, std::string_view key) {
  const json& labels = object["metadata"]["labels"];
  if (!labels.is_object()) return "";
  auto it = labels.find(std::string(key));
  return it != labels.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<KubernetesSliceProvider>> KubernetesSliceProvider::Create(
    const autoscale::KubernetesProvider& config, const Clock* clock) {
  std::string ns = config.ns;
  if (ns.empty()) ns = ReadTrimmed(config.service_account_dir + "/namespace");
  if (ns.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "provider.namespace is not given and ", config.service_account_dir,
        "/namespace cannot be read (is the head running in a pod with a service account?)"));
  }
  if (ReadTrimmed(config.service_account_dir + "/token").empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no service account token in ", config.service_account_dir, "/token"));
  }
  return std::unique_ptr<KubernetesSliceProvider>(new KubernetesSliceProvider(config, ns, clock));
}

KubernetesSliceProvider::KubernetesSliceProvider(autoscale::KubernetesProvider config, std::string ns,
                                                 const Clock* clock)
    : config_(std::move(config)), ns_(std::move(ns)), clock_(clock) {
  client_ = std::make_unique<httplib::Client>(config_.api_server);
  client_->set_connection_timeout(5, 0);
  client_->set_read_timeout(15, 0);
  client_->set_write_timeout(15, 0);
  if (config_.api_server.rfind("https://", 0) == 0) {
    client_->set_ca_cert_path((config_.service_account_dir + "/ca.crt").c_str());
    client_->enable_server_certificate_verification(true);
  }
}

KubernetesSliceProvider::~KubernetesSliceProvider() = default;

absl::StatusOr<json> KubernetesSliceProvider::Call(const std::string& method, const std::string& path,
                                                   const json* body) {
  const httplib::Headers headers = {
      {"Authorization", "Bearer " + ReadTrimmed(config_.service_account_dir + "/token")},
      {"Accept", "application/json"}};
  httplib::Result result = method == "GET"    ? client_->Get(path.c_str(), headers)
                           : method == "POST" ? client_->Post(path.c_str(), headers, body->dump(), "application/json")
                                              : client_->Delete(path.c_str(), headers);
  const std::string what = absl::StrCat(method, " ", path);
  if (!result) {
    return absl::UnavailableError(
        absl::StrCat(what, ": the Kubernetes API server at ", config_.api_server, " did not answer (",
                     httplib::to_string(result.error()), ")"));
  }
  if (result->status == 404) return absl::NotFoundError(absl::StrCat(what, ": ", ApiMessage(result->body)));
  if (result->status == 409) return absl::AlreadyExistsError(absl::StrCat(what, ": ", ApiMessage(result->body)));
  if (result->status == 403 || result->status == 401) {
    return absl::PermissionDeniedError(absl::StrCat(what, ": ", ApiMessage(result->body),
                                                    " (the head's service account needs the RBAC of deploy/)"));
  }
  if (result->status >= 400) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": HTTP ", result->status, ": ", ApiMessage(result->body)));
  }
  json answer = json::parse(result->body, nullptr, /*allow_exceptions=*/false);
  if (answer.is_discarded()) return absl::InternalError(absl::StrCat(what, ": the answer is not JSON"));
  return answer;
}

absl::Status KubernetesSliceProvider::Launch(const LaunchRequest& request) {
  const autoscale::SliceObjects objects = autoscale::KubernetesSliceObjects(
      config_, ns_, *request.type, request.slice, request.capacity_class, request.wall_ms);
  absl::MutexLock lock(&mu_);
  const std::string base = absl::StrCat("/api/v1/namespaces/", ns_);
  absl::Status failed;
  if (auto s = Call("POST", base + "/services", &objects.service); !s.ok()) failed = s.status();
  for (size_t i = 0; failed.ok() && i < objects.pods.size(); ++i) {
    if (auto s = Call("POST", base + "/pods", &objects.pods[i]); !s.ok()) failed = s.status();
  }
  if (failed.ok()) return absl::OkStatus();
  // Never a partial slice: what was created goes again.
  if (absl::Status cleanup = DeleteSlice(request.slice); !cleanup.ok()) {
    spdlog::warn("autoscaler: slice {} was partly created and could not be deleted: {}", request.slice,
                 std::string(cleanup.message()));
  }
  return absl::Status(failed.code(), absl::StrCat("creating slice ", request.slice, ": ", failed.message()));
}

absl::Status KubernetesSliceProvider::DeleteSlice(const std::string& slice) {
  const std::string base = absl::StrCat("/api/v1/namespaces/", ns_);
  auto pods = Call("DELETE", absl::StrCat(base, "/pods?labelSelector=", SliceSelector(slice)), nullptr);
  if (!pods.ok() && !absl::IsNotFound(pods.status())) return pods.status();
  auto service = Call("DELETE", absl::StrCat(base, "/services/", slice), nullptr);
  if (!service.ok() && !absl::IsNotFound(service.status())) return service.status();
  return absl::OkStatus();
}

absl::Status KubernetesSliceProvider::Terminate(const std::string& slice) {
  absl::MutexLock lock(&mu_);
  reported_.erase(slice);
  return DeleteSlice(slice);
}

absl::StatusOr<json> KubernetesSliceProvider::ListPods() {
  auto list = Call("GET", absl::StrCat("/api/v1/namespaces/", ns_, "/pods?labelSelector=", ManagedSelector()), nullptr);
  if (!list.ok()) return list.status();
  if (!(*list)["items"].is_array()) return absl::InternalError("the pod list has no items");
  return (*list)["items"];
}

std::map<std::string, std::string> KubernetesSliceProvider::TakeFailures() {
  std::map<std::string, std::string> out;
  absl::MutexLock lock(&mu_);
  const int64_t now = clock_->NowMicros();
  if (now - last_check_micros_ < kFailureCheckMicros) return out;
  last_check_micros_ = now;
  auto pods = ListPods();
  if (!pods.ok()) {
    spdlog::warn("autoscaler: {}", std::string(pods.status().message()));
    return out;
  }
  for (const json& pod : *pods) {
    const std::string slice = LabelOf(pod, autoscale::kSliceLabel);
    const json& status = pod["status"];
    const std::string phase = status.is_object() && status["phase"].is_string() ? status["phase"].get<std::string>()
                                                                                 : "";
    if (slice.empty() || (phase != "Failed" && phase != "Succeeded") || reported_.count(slice)) continue;
    std::string why = absl::StrCat("pod ", pod["metadata"]["name"].is_string()
                                               ? pod["metadata"]["name"].get<std::string>()
                                               : std::string("?"),
                                   " ", phase);
    if (status["reason"].is_string()) absl::StrAppend(&why, ": ", status["reason"].get<std::string>());
    if (status["message"].is_string()) absl::StrAppend(&why, ": ", status["message"].get<std::string>());
    reported_.insert(slice);
    out[slice] = why;
  }
  return out;
}

std::vector<SliceProvider::Launched> KubernetesSliceProvider::List() {
  std::vector<Launched> out;
  absl::MutexLock lock(&mu_);
  auto pods = ListPods();
  if (!pods.ok()) {
    spdlog::warn("autoscaler: cannot list the slices launched earlier: {}", std::string(pods.status().message()));
    return out;
  }
  std::map<std::string, Launched> slices;
  for (const json& pod : *pods) {
    const std::string slice = LabelOf(pod, autoscale::kSliceLabel);
    auto c = autoscale::ParseCapacityClass(LabelOf(pod, autoscale::kCapacityClassLabel));
    if (slice.empty() || !c.ok()) continue;
    int64_t wall_ms = 0;
    const json& annotations = pod["metadata"]["annotations"];
    if (annotations.is_object() && annotations[std::string(autoscale::kLaunchedAnnotation)].is_string()) {
      wall_ms = std::atoll(annotations[std::string(autoscale::kLaunchedAnnotation)].get<std::string>().c_str());
    }
    slices[slice] = {slice, LabelOf(pod, autoscale::kNodeTypeLabel), *c, wall_ms};
  }
  for (auto& [name, l] : slices) out.push_back(std::move(l));
  return out;
}

}  // namespace torus::head
