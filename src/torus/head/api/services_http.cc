#include "torus/head/api/services_http.h"

#include "absl/strings/str_cat.h"
#include "torus/head/api/http_util.h"
#include "torus/serve/remote_routes.h"

namespace torus::head {

nlohmann::json ServiceJson(const ServiceView& view, const std::string& ingress_url) {
  const Service& s = view.service;
  nlohmann::json replicas = nlohmann::json::array();
  for (const ReplicaView& r : view.replicas) {
    replicas.push_back({{"run_id", r.run_id},
                        {"name", r.name},
                        {"version", r.version},
                        {"state", r.state},
                        {"address", r.address},
                        {"in_flight", r.in_flight},
                        {"requests", r.requests},
                        {"created_ms", r.created_ms},
                        {"ready_ms", r.ready_ms},
                        {"message", r.message}});
  }
  return {{"name", s.name},
          {"version", s.version},
          {"status", view.status},
          {"route_prefix", s.spec.route_prefix},
          {"url", ingress_url.empty() ? "" : ingress_url + (s.spec.route_prefix == "/" ? "" : s.spec.route_prefix)},
          {"target_replicas", view.target},
          {"ready_replicas", view.ready},
          {"queued_requests", view.queued},
          {"replicas", replicas},
          {"events", view.events},
          {"spec", nlohmann::json::parse(s.spec_json)},
          {"created_ms", s.created_ms},
          {"updated_ms", s.updated_ms}};
}

void RegisterServiceRoutes(httplib::Server& server, ServiceController* services, const std::string* ingress_url) {
  server.Post("/api/v0/services", [services](const httplib::Request& req, httplib::Response& res) {
    auto deployed = services->Deploy(req.body);
    if (!deployed.ok()) {
      const absl::Status& s = deployed.status();
      SendError(res, s.code() == absl::StatusCode::kUnavailable ? 503 : HttpCodeOf(s), std::string(s.message()));
      return;
    }
    SendJson(res, deployed->changed ? 201 : 200,
             {{"name", deployed->name}, {"version", deployed->version}, {"changed", deployed->changed}});
  });
  server.Post("/api/v0/services/load", [services](const httplib::Request& req, httplib::Response& res) {
    auto load = serve::IngressLoadFromJson(req.body);
    if (!load.ok()) {
      SendError(res, 400, absl::StrCat("ingress load: ", load.status().message()));
      return;
    }
    services->ReportLoad(*std::move(load));
    SendJson(res, 200, {{"accepted", true}});
  });
  server.Get("/api/v0/services", [services, ingress_url](const httplib::Request& req, httplib::Response& res) {
    nlohmann::json items = nlohmann::json::array();
    for (const ServiceView& v : services->List()) items.push_back(ServiceJson(v, *ingress_url));
    FilterByStatus(req, &items);
    if (!Paginate(req, res, &items)) return;
    SendJson(res, 200, items);
  });
  server.Get(R"(/api/v0/services/([^/]+))", [services, ingress_url](const httplib::Request& req, httplib::Response& res) {
    auto view = services->Get(req.matches[1]);
    if (!view.ok()) {
      SendStatus(res, view.status());
      return;
    }
    SendJson(res, 200, ServiceJson(*view, *ingress_url));
  });
  server.Delete(R"(/api/v0/services/([^/]+))", [services](const httplib::Request& req, httplib::Response& res) {
    absl::Status s = services->Delete(req.matches[1]);
    if (!s.ok()) {
      SendError(res, s.code() == absl::StatusCode::kUnavailable ? 503 : HttpCodeOf(s), std::string(s.message()));
      return;
    }
    SendJson(res, 200, {{"deleted", true}});
  });
}

void WriteServiceMetrics(PrometheusWriter& w, const std::vector<ServiceView>& views,
                         const std::map<std::string, serve::ServiceCounters>& counters) {
  w.Family("torus_serve_requests_total", "counter", "Answers the ingress gave, by service and status code.");
  for (const auto& [service, c] : counters) {
    for (const auto& [code, n] : c.responses) {
      w.Sample("torus_serve_requests_total", {{"service", service}, {"code", std::to_string(code)}},
               static_cast<double>(n));
    }
  }
  w.Family("torus_serve_request_duration_seconds", "histogram",
           "Time from a request's first byte to its answer's last, by service.");
  for (const auto& [service, c] : counters) {
    int64_t cumulative = 0;
    for (size_t i = 0; i < serve::kLatencyBounds.size(); ++i) {
      cumulative += c.latency_buckets[i];
      std::string le = nlohmann::json(serve::kLatencyBounds[i]).dump();
      w.Sample("torus_serve_request_duration_seconds_bucket", {{"service", service}, {"le", le}},
               static_cast<double>(cumulative));
    }
    cumulative += c.latency_buckets.back();
    w.Sample("torus_serve_request_duration_seconds_bucket", {{"service", service}, {"le", "+Inf"}},
             static_cast<double>(cumulative));
    w.Sample("torus_serve_request_duration_seconds_sum", {{"service", service}}, c.latency_sum_s);
    w.Sample("torus_serve_request_duration_seconds_count", {{"service", service}},
             static_cast<double>(c.latency_count));
  }
  w.Family("torus_serve_retries_total", "counter", "Requests sent again to another replica after one failed first.");
  for (const auto& [service, c] : counters) {
    w.Sample("torus_serve_retries_total", {{"service", service}}, static_cast<double>(c.retries));
  }
  w.Family("torus_serve_ongoing_requests", "gauge", "Requests on replicas (in_flight) or waiting for one (queued).");
  for (const ServiceView& v : views) {
    int in_flight = 0;
    for (const ReplicaView& r : v.replicas) in_flight += r.in_flight;
    w.Sample("torus_serve_ongoing_requests", {{"service", v.service.name}, {"where", "in_flight"}}, in_flight);
    w.Sample("torus_serve_ongoing_requests", {{"service", v.service.name}, {"where", "queued"}}, v.queued);
  }
  w.Family("torus_serve_replicas", "gauge", "Replicas by state.");
  for (const ServiceView& v : views) {
    std::map<std::string, int> by_state = {{"PENDING", 0}, {"STARTING", 0}, {"READY", 0}, {"DRAINING", 0},
                                           {"STOPPING", 0}};
    for (const ReplicaView& r : v.replicas) ++by_state[r.state];
    for (const auto& [state, n] : by_state) {
      w.Sample("torus_serve_replicas", {{"service", v.service.name}, {"state", state}}, n);
    }
  }
  w.Family("torus_serve_replica_in_flight", "gauge", "Requests in flight on each replica.");
  for (const ServiceView& v : views) {
    for (const ReplicaView& r : v.replicas) {
      w.Sample("torus_serve_replica_in_flight", {{"service", v.service.name}, {"replica", r.run_id}}, r.in_flight);
    }
  }
  w.Family("torus_serve_replica_requests_total", "counter", "Requests the ingress sent to each replica.");
  for (const ServiceView& v : views) {
    for (const ReplicaView& r : v.replicas) {
      w.Sample("torus_serve_replica_requests_total", {{"service", v.service.name}, {"replica", r.run_id}},
               static_cast<double>(r.requests));
    }
  }
}

}  // namespace torus::head
