#include "torus/head/http_api.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "torus/head/head_service.h"
#include "torus/head/http_util.h"
#include "torus/common/resources.h"
#include "torus/rpc/auth.h"
#include "torus/rpc/status_json.h"

namespace torus::head {

HttpApi::HttpApi(const NodeRegistry* registry, const PlacementGroupManager* groups, const Clock* clock,
                 std::string token, std::string cluster_id)
    : registry_(registry),
      groups_(groups),
      clock_(clock),
      token_(std::move(token)),
      cluster_id_(std::move(cluster_id)) {}

HttpApi::~HttpApi() { Stop(); }

void HttpApi::AddRoutes(std::function<void(httplib::Server&)> add) { extra_routes_.push_back(std::move(add)); }

void HttpApi::AddMetricsSource(std::function<void(PrometheusWriter&)> source) {
  metrics_sources_.push_back(std::move(source));
}

absl::StatusOr<int> HttpApi::Start(const std::string& host, int port) {
  server_ = std::make_unique<httplib::Server>();
  RegisterRoutes();
  for (const auto& add : extra_routes_) add(*server_);
  int bound = port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", host, ":", port));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return bound;
}

void HttpApi::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

void HttpApi::RegisterRoutes() {
  server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path.rfind("/api/", 0) != 0 && req.path != "/metrics") return httplib::Server::HandlerResponse::Unhandled;
    // Workers report with their run's own token, checked by that route.
    if (IsRunReportPath(req.path)) return httplib::Server::HandlerResponse::Unhandled;
    std::string header = req.get_header_value("Authorization");
    if (header.empty()) {
      SendError(res, 401, "missing cluster token; send 'Authorization: Bearer <token>'");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!rpc::BearerMatches(header, token_)) {
      SendError(res, 401, "wrong cluster token");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  auto status = [this](bool include_dead) {
    rpc::ClusterStatus s;
    BuildClusterStatus(*registry_, *groups_, *clock_, include_dead, &s);
    s.set_cluster_id(cluster_id_);
    return s;
  };

  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });

  server_->Get("/metrics", [this, status](const httplib::Request&, httplib::Response& res) {
    const rpc::ClusterStatus view = status(true);
    PrometheusWriter w;
    std::map<std::string, int> nodes = {{"ALIVE", 0}, {"DEAD", 0}};
    for (const auto& n : view.nodes()) ++nodes[rpc::NodeStateName(n.state())];
    w.Family("torus_nodes", "gauge", "Nodes by state.");
    for (const auto& [state, count] : nodes) w.Sample("torus_nodes", {{"state", state}}, count);
    std::map<std::string, int> slices = {{"READY", 0}, {"RESERVED", 0}, {"DEGRADED", 0}, {"INCOMPLETE", 0}};
    for (const auto& s : view.slices()) ++slices[rpc::SliceStateName(s.state())];
    w.Family("torus_slices", "gauge", "TPU slices by state.");
    for (const auto& [state, count] : slices) w.Sample("torus_slices", {{"state", state}}, count);
    w.Family("torus_resource_total", "gauge", "Resources of alive nodes (memory in bytes, TPU in chips).");
    for (const auto& [name, fixed] : view.resources_total()) {
      w.Sample("torus_resource_total", {{"resource", name}}, FromFixed(fixed));
    }
    w.Family("torus_resource_available", "gauge", "Unreserved resources of alive nodes.");
    for (const auto& [name, fixed] : view.resources_available()) {
      w.Sample("torus_resource_available", {{"resource", name}}, FromFixed(fixed));
    }
    std::map<std::string, int> groups = {{"PENDING", 0}, {"CREATED", 0}, {"RESCHEDULING", 0}, {"REMOVED", 0},
                                         {"FAILED", 0}};
    for (const auto& g : groups_->List(/*include_removed=*/true)) ++groups[g.state()];
    w.Family("torus_placement_groups", "gauge", "Placement groups and slice groups by state.");
    for (const auto& [state, count] : groups) w.Sample("torus_placement_groups", {{"state", state}}, count);
    w.Family("torus_pending_requests", "gauge", "Placement groups waiting (PENDING or RESCHEDULING).");
    w.Sample("torus_pending_requests", {}, view.pending_size());
    for (const auto& source : metrics_sources_) source(w);
    res.set_content(w.Text(), "text/plain; version=0.0.4");
  });

  server_->Get("/api/v0/cluster", [status](const httplib::Request&, httplib::Response& res) {
    SendJson(res, 200, rpc::StatusToJson(status(true)));
  });

  server_->Get("/api/v0/nodes", [status](const httplib::Request& req, httplib::Response& res) {
    std::string state = req.get_param_value("state");
    if (!state.empty() && state != "ALIVE" && state != "DEAD") {
      return SendError(res, 400, absl::StrCat("state \"", state, "\" is not valid; use ALIVE or DEAD"));
    }
    nlohmann::json nodes = nlohmann::json::array();
    const rpc::ClusterStatus view = status(true);
    for (const auto& n : view.nodes()) {
      if (state.empty() || rpc::NodeStateName(n.state()) == state) nodes.push_back(rpc::NodeToJson(n));
    }
    SendJson(res, 200, nodes);
  });

  server_->Get(R"(/api/v0/nodes/([^/]+))", [status](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    const rpc::ClusterStatus view = status(true);
    for (const auto& n : view.nodes()) {
      if (n.info().node_id() == id) return SendJson(res, 200, rpc::NodeToJson(n));
    }
    SendError(res, 404, absl::StrCat("node ", id, " does not exist"));
  });

  server_->Get("/api/v0/slices", [status](const httplib::Request& req, httplib::Response& res) {
    std::string state = req.get_param_value("state");
    if (!state.empty() && state != "READY" && state != "INCOMPLETE" && state != "DEGRADED" && state != "RESERVED") {
      return SendError(res, 400,
                       absl::StrCat("state \"", state, "\" is not valid; use READY, INCOMPLETE, DEGRADED or RESERVED"));
    }
    nlohmann::json slices = nlohmann::json::array();
    const rpc::ClusterStatus view = status(true);
    for (const auto& s : view.slices()) {
      if (state.empty() || rpc::SliceStateName(s.state()) == state) slices.push_back(rpc::SliceToJson(s));
    }
    SendJson(res, 200, slices);
  });

  server_->Get(R"(/api/v0/slices/([^/]+))", [status](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    const rpc::ClusterStatus view = status(true);
    for (const auto& s : view.slices()) {
      if (s.name() == name) return SendJson(res, 200, rpc::SliceToJson(s));
    }
    SendError(res, 404, absl::StrCat("slice ", name, " does not exist"));
  });

  server_->Get("/api/v0/placement_groups", [this](const httplib::Request& req, httplib::Response& res) {
    std::string state = req.get_param_value("state");
    nlohmann::json out = nlohmann::json::array();
    for (const auto& view : groups_->List(/*include_removed=*/true)) {
      if (state.empty() || view.state() == state) out.push_back(rpc::PlacementGroupToJson(view));
    }
    SendJson(res, 200, out);
  });

  server_->Get(R"(/api/v0/placement_groups/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    auto view = groups_->Get(req.matches[1]);
    if (!view.ok()) return SendError(res, 404, std::string(view.status().message()));
    SendJson(res, 200, rpc::PlacementGroupToJson(*view));
  });

  server_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && res.body.empty()) SendError(res, 404, absl::StrCat("no route ", req.method, " ", req.path));
  });
  server_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    SendError(res, 500, "internal error");
  });
}

}  // namespace torus::head
