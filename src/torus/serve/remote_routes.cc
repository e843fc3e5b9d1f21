#include "torus/serve/remote_routes.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace torus::serve {
namespace {

using nlohmann::json;

constexpr int64_t kMaxCount = 1'000'000;

absl::Status Bad(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::StatusOr<int> Count(const json& j, const std::string& path) {
  if (!j.is_number_integer() || j.get<int64_t>() < 0 || j.get<int64_t>() > kMaxCount) {
    return Bad(path, "expected a whole number from 0 to 1000000");
  }
  return static_cast<int>(j.get<int64_t>());
}

int64_t Millis(const json& spec, const char* field, int64_t fallback) {
  auto it = spec.find(field);
  if (it == spec.end() || !it->is_number() || !std::isfinite(it->get<double>())) return fallback;
  return static_cast<int64_t>(std::llround(it->get<double>() * 1000));
}

}  // namespace

absl::StatusOr<std::vector<ServiceRoute>> RoutesFromServicesJson(const json& services) {
  if (!services.is_array()) return absl::InvalidArgumentError("services: expected a list");
  std::vector<ServiceRoute> routes;
  for (size_t i = 0; i < services.size(); ++i) {
    const json& s = services[i];
    const std::string path = absl::StrCat("services[", i, "]");
    if (!s.is_object() || !s.contains("name") || !s["name"].is_string() || !s.contains("route_prefix") ||
        !s["route_prefix"].is_string()) {
      return Bad(path, "expected an object with name and route_prefix");
    }
    ServiceRoute r;
    r.name = s["name"].get<std::string>();
    r.prefix = s["route_prefix"].get<std::string>();
    const json spec = s.value("spec", json::object());
    if (spec.is_object()) {
      r.request_timeout_ms = Millis(spec, "request_timeout_s", r.request_timeout_ms);
      r.queue_timeout_ms = Millis(spec, "queue_timeout_s", r.queue_timeout_ms);
      if (spec.contains("max_request_bytes") && spec["max_request_bytes"].is_number_integer()) {
        r.max_request_bytes = spec["max_request_bytes"].get<int64_t>();
      }
      if (spec.contains("max_queued_requests") && spec["max_queued_requests"].is_number_integer()) {
        r.max_queued_requests = spec["max_queued_requests"].get<int>();
      }
    }
    const json replicas = s.value("replicas", json::array());
    for (const json& rep : replicas.is_array() ? replicas : json::array()) {
      if (!rep.is_object() || rep.value("state", "") != "READY") continue;
      const std::string address = rep.value("address", "");
      const size_t colon = address.rfind(':');
      if (colon == std::string::npos || colon == 0) continue;
      int port = 0;
      try {
        port = std::stoi(address.substr(colon + 1));
      } catch (const std::exception&) {
        continue;
      }
      if (port <= 0 || port > 65535) continue;
      std::string host = address.substr(0, colon);
      if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
      r.ready.push_back({rep.value("run_id", ""), host, port});
    }
    routes.push_back(std::move(r));
  }
  return routes;
}

std::string IngressLoadToJson(const IngressLoad& load) {
  json services = json::object();
  for (const auto& [name, l] : load.services) {
    services[name] = {{"in_flight", l.in_flight}, {"queued", l.queued}, {"replicas", l.replicas}};
  }
  return json{{"ingress", load.ingress}, {"services", services}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::StatusOr<IngressLoad> IngressLoadFromJson(absl::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("expected a JSON object");
  IngressLoad out;
  if (!j.contains("ingress") || !j["ingress"].is_string() || j["ingress"].get<std::string>().empty() ||
      j["ingress"].get<std::string>().size() > 256) {
    return Bad("ingress", "expected the reporting ingress's host:port (1-256 characters)");
  }
  out.ingress = j["ingress"].get<std::string>();
  if (!j.contains("services") || !j["services"].is_object()) return Bad("services", "expected an object");
  for (const auto& [name, s] : j["services"].items()) {
    const std::string path = "services." + name;
    if (!s.is_object()) return Bad(path, "expected an object");
    ServiceLoad l;
    if (s.contains("in_flight")) {
      auto n = Count(s["in_flight"], path + ".in_flight");
      if (!n.ok()) return n.status();
      l.in_flight = *n;
    }
    if (s.contains("queued")) {
      auto n = Count(s["queued"], path + ".queued");
      if (!n.ok()) return n.status();
      l.queued = *n;
    }
    if (s.contains("replicas")) {
      if (!s["replicas"].is_object()) return Bad(path + ".replicas", "expected an object of counts");
      for (const auto& [id, n] : s["replicas"].items()) {
        auto c = Count(n, path + ".replicas." + id);
        if (!c.ok()) return c.status();
        l.replicas[id] = *c;
      }
    }
    out.services[name] = std::move(l);
  }
  return out;
}

}  // namespace torus::serve
