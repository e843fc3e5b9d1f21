#include "torus/head/api/http_api.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "torus/head/api/connection_threads.h"
#include "torus/head/api/http_util.h"
#include "torus/head/api/views.h"
#include "torus/head/api/metrics_http.h"
#include "torus/common/resources.h"
#include "torus/rpc/auth.h"
#include "torus/rpc/status_json.h"

namespace torus::head {

HttpApi::HttpApi(const StateStore* store, const Liveness* liveness, const Clock* clock, std::string token,
                 std::string cluster_id)
    : store_(store),
      liveness_(liveness),
      clock_(clock),
      token_(std::move(token)),
      cluster_id_(std::move(cluster_id)) {}

HttpApi::~HttpApi() { Stop(); }

void HttpApi::AddRoutes(std::function<void(httplib::Server&)> add) { extra_routes_.push_back(std::move(add)); }

void HttpApi::AddMetricsSource(std::function<void(PrometheusWriter&)> source) {
  metrics_sources_.push_back(std::move(source));
}

absl::StatusOr<int> HttpApi::Start(const std::string& host, int port) {
  if (tls_) {
    if (absl::Status s = tls_->Load(); !s.ok()) return s;
    server_ = std::make_unique<httplib::SSLServer>([this](SSL_CTX& ctx) { return tls_->Install(&ctx); });
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  // Headers and body go out as separate writes; without this a small reply on a kept-alive connection waits for
  // the client's delayed acknowledgement (~40 ms).
  server_->set_tcp_nodelay(true);
  server_->set_payload_max_length(max_body_bytes_);
  // A thread per open connection (kept-alive clients, event streams and slow senders each hold one while they
  // last), started as it is accepted: a fixed pool would make every client wait behind a few slow ones.
  server_->new_task_queue = [] { return new ConnectionThreads(kMaxHttpConnectionThreads); };
  RegisterRoutes();
  for (const auto& add : extra_routes_) add(*server_);
  // The library listens with a backlog of 5: under a burst of new connections (16 clients that reconnect every few
  // requests) the accept queue overflows, and a client whose handshake the kernel then drops sees its request
  // reset. The listening socket is given the system's backlog instead (listen again on a listening socket resizes
  // its queue).
  int listener = -1;
  server_->set_socket_options([&listener](socket_t sock) {
    httplib::default_socket_options(sock);
    listener = sock;
  });
  int bound = port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", host, ":", port));
  }
  server_->set_socket_options(httplib::default_socket_options);  // `listener` is this frame's
  if (listener >= 0 && ::listen(listener, SOMAXCONN) != 0) {
    return absl::InternalError(absl::StrCat("cannot resize the HTTP listen queue: ", std::strerror(errno)));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return bound;
}

void HttpApi::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

namespace {

constexpr char kCookieName[] = "torus_token";

// The value of cookie `name` in a Cookie header ("a=1; torus_token=x"), or "".
std::string CookieValue(const std::string& header, const std::string& name) {
  size_t pos = 0;
  while (pos < header.size()) {
    size_t end = header.find(';', pos);
    if (end == std::string::npos) end = header.size();
    std::string part = header.substr(pos, end - pos);
    size_t start = part.find_first_not_of(' ');
    if (start != std::string::npos && part.compare(start, name.size() + 1, name + "=") == 0) {
      return part.substr(start + name.size() + 1);
    }
    pos = end + 1;
  }
  return "";
}

// The HTTP library compresses every text and JSON reply with the best encoding the client accepts, and its brotli runs
// at the slowest setting: ~1.7 s of CPU for a 1 MB cluster view, which a browser polling every 2 s asks for. gzip
// does the same in ~50 ms. So the request's Accept-Encoding is cut down to gzip before the library reads it (the
// request object is the server's own, non-const; only the handler's view of it is const).
void OfferOnlyGzip(const httplib::Request& req) {
  const std::string accepted = req.get_header_value("Accept-Encoding");
  if (accepted.empty()) return;
  auto& headers = const_cast<httplib::Request&>(req).headers;
  headers.erase("Accept-Encoding");
  if (accepted.find("gzip") != std::string::npos) headers.emplace("Accept-Encoding", "gzip");
}

// A POST, PUT or PATCH with neither Content-Length nor Transfer-Encoding (`curl -X POST .../stop`, as Ray's docs
// show) has no body by HTTP/1.1's rules, but the library would read one until the client closes the connection (a
// 5 s timeout, then 400 with no text). The request is given the length it has, 0, before the library reads it.
void MarkBodilessRequest(const httplib::Request& req) {
  if (req.method != "POST" && req.method != "PUT" && req.method != "PATCH") return;
  if (req.has_header("Content-Length") || req.has_header("Transfer-Encoding")) return;
  const_cast<httplib::Request&>(req).headers.emplace("Content-Length", "0");
}

// The API takes JSON bodies whatever their Content-Type, as Ray's does: `curl -d '{...}'` labels its body
// application/x-www-form-urlencoded, which the library would parse as a form and refuse over 8 KiB (413). Such a
// body under /api/ is relabelled before the library reads it.
void TreatFormBodyAsJson(const httplib::Request& req) {
  if (req.path.rfind("/api/", 0) != 0) return;
  if (req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) != 0) return;
  auto& headers = const_cast<httplib::Request&>(req).headers;
  headers.erase("Content-Type");
  headers.emplace("Content-Type", "application/json");
}

// Routes that serve log text: node, run and job logs.
bool IsLogPath(const std::string& path) {
  return path.find("/logs") != std::string::npos || (path.size() >= 4 && path.compare(path.size() - 4, 4, "/log") == 0);
}

bool IsPagePath(const std::string& path) { return path == "/" || path.rfind("/static/", 0) == 0; }

void SendLoginPage(httplib::Response& res, const std::string& why) {
  res.status = 401;
  res.set_content(absl::StrCat("<!doctype html><meta charset=utf-8><title>torus: sign in</title>"
                               "<body style=\"font-family:sans-serif;margin:3em\"><h1>torus dashboard</h1><p>",
                               why,
                               "</p><p>Open the URL that <code>torus start</code> or <code>torus up</code> printed "
                               "(<code>http://HOST:PORT/?token=...</code>); <code>torus dashboard</code> prints it "
                               "again.</p></body>"),
                  "text/html; charset=utf-8");
}

}  // namespace

bool HttpApi::Authorized(const httplib::Request& req, httplib::Response& res) const {
  const bool safe_method = req.method == "GET" || req.method == "HEAD";
  std::string header = req.get_header_value("Authorization");
  if (!header.empty()) {
    if (rpc::BearerMatches(header, token_)) return true;
    SendError(res, 401, "wrong cluster token");
    return false;
  }
  std::string cookie = CookieValue(req.get_header_value("Cookie"), kCookieName);
  if (safe_method && !cookie.empty() && rpc::BearerMatches("Bearer " + cookie, token_)) return true;
  // Read-only mode opens what the page shows, but not logs: a job's output may print its environment, which holds
  // the cluster token (TORUS_TOKEN).
  if (safe_method && read_only_ && !IsLogPath(req.path)) return true;
  if (IsPagePath(req.path)) {
    SendLoginPage(res, cookie.empty() ? "This page needs the cluster token." : "The saved token is not this cluster's.");
  } else {
    SendError(res, 401, "missing cluster token; send 'Authorization: Bearer <token>'");
  }
  return false;
}

void HttpApi::RegisterRoutes() {
  server_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    OfferOnlyGzip(req);
    MarkBodilessRequest(req);
    TreatFormBodyAsJson(req);
    const bool protected_path = req.path.rfind("/api/", 0) == 0 || req.path == "/metrics" || IsPagePath(req.path);
    if (!protected_path) return httplib::Server::HandlerResponse::Unhandled;
    // A change while the journal cannot commit (etcd without a quorum) is refused at once rather than left waiting.
    auto refuse_change = [this, &req, &res] {
      if (req.method == "GET" || req.method == "HEAD") return false;
      absl::Status writable = store_->Writable();
      if (writable.ok()) return false;
      SendError(res, 503, std::string(writable.message()));
      return true;
    };
    // Workers report with their run's own token, checked by that route.
    if (IsRunReportPath(req.path)) {
      return refuse_change() ? httplib::Server::HandlerResponse::Handled : httplib::Server::HandlerResponse::Unhandled;
    }
    // The login URL: a right token becomes an HttpOnly cookie, and the token leaves the address bar.
    if (req.path == "/" && req.has_param("token")) {
      if (!rpc::BearerMatches("Bearer " + req.get_param_value("token"), token_)) {
        SendLoginPage(res, "The token in this URL is not this cluster's.");
        return httplib::Server::HandlerResponse::Handled;
      }
      res.set_header("Set-Cookie", absl::StrCat(kCookieName, "=", req.get_param_value("token"),
                                                "; Path=/; HttpOnly; SameSite=Strict", tls_ ? "; Secure" : ""));
      res.set_redirect("/", 303);
      return httplib::Server::HandlerResponse::Handled;
    }
    return Authorized(req, res) && !refuse_change() ? httplib::Server::HandlerResponse::Unhandled
                                                    : httplib::Server::HandlerResponse::Handled;
  });
  server_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    http_requests_.Add(absl::StrCat(req.method, " ", HttpRouteFamily(req.path)), absl::StrCat(res.status));
  });

  auto status = [this](bool include_dead) {
    rpc::ClusterStatus s;
    const int64_t wall = clock_->WallMillis();
    store_->Read([&](const ClusterState& state) { BuildClusterStatus(state, *liveness_, include_dead, wall, &s); });
    s.set_cluster_id(cluster_id_);
    return s;
  };
  // Every group, in submission order.
  auto groups = [this] {
    return store_->Read([](const ClusterState& state) {
      std::vector<const Group*> sorted;
      for (const auto& [id, g] : state.groups()) sorted.push_back(&g);
      std::sort(sorted.begin(), sorted.end(), [](const Group* a, const Group* b) { return a->seq < b->seq; });
      std::vector<rpc::PlacementGroupView> out;
      for (const Group* g : sorted) out.push_back(GroupView(state, *g));
      return out;
    });
  };

  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });

  server_->Get("/metrics", [this, status, groups](const httplib::Request&, httplib::Response& res) {
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
    std::map<std::string, int> by_state = {{"PENDING", 0}, {"CREATED", 0}, {"RESCHEDULING", 0}, {"REMOVED", 0},
                                           {"FAILED", 0}};
    store_->Read([&](const ClusterState& state) {
      for (const auto& [id, g] : state.groups()) ++by_state[PgStateName(g.state)];
    });
    w.Family("torus_placement_groups", "gauge", "Placement groups and slice groups by state.");
    for (const auto& [state, count] : by_state) w.Sample("torus_placement_groups", {{"state", state}}, count);
    w.Family("torus_pending_requests", "gauge", "Placement groups waiting (PENDING or RESCHEDULING).");
    w.Sample("torus_pending_requests", {}, view.pending_size());
    for (const auto& source : metrics_sources_) source(w);
    w.Family("torus_http_requests_total", "counter", "HTTP requests the head answered, by route and status code.");
    for (const auto& [key, count] : http_requests_.Counts()) {
      const std::string& route = key.first;
      const size_t space = route.find(' ');
      w.Sample("torus_http_requests_total",
               {{"method", route.substr(0, space)}, {"route", route.substr(space + 1)}, {"code", key.second}},
               static_cast<double>(count));
    }
    res.set_content(w.Text(), "text/plain; version=0.0.4; charset=utf-8");
  });

  server_->Get("/api/v0/cluster", [status](const httplib::Request&, httplib::Response& res) {
    SendJson(res, 200, rpc::StatusToJson(status(true)));
  });

  auto node_json = [this](const rpc::NodeView& n) {
    nlohmann::json j = rpc::NodeToJson(n);
    if (metrics_ != nullptr) j["metrics_sources"] = MetricSourcesJson(metrics_->Sources(n.info().node_id()));
    return j;
  };

  server_->Get("/api/v0/nodes", [status, node_json](const httplib::Request& req, httplib::Response& res) {
    std::string state = req.get_param_value("state");
    if (!state.empty() && state != "ALIVE" && state != "DEAD") {
      return SendError(res, 400, absl::StrCat("state \"", state, "\" is not valid; use ALIVE or DEAD"));
    }
    std::string label_key, label_value;
    if (req.has_param("label")) {
      const std::string label = req.get_param_value("label");
      const size_t eq = label.find('=');
      if (eq == std::string::npos || eq == 0) {
        return SendError(res, 400, absl::StrCat("label \"", label, "\" is not valid; use KEY=VALUE"));
      }
      label_key = label.substr(0, eq);
      label_value = label.substr(eq + 1);
    }
    nlohmann::json nodes = nlohmann::json::array();
    const rpc::ClusterStatus view = status(true);
    for (const auto& n : view.nodes()) {
      if (!state.empty() && rpc::NodeStateName(n.state()) != state) continue;
      if (!label_key.empty()) {
        auto it = n.info().labels().find(label_key);
        if (it == n.info().labels().end() || it->second != label_value) continue;
      }
      nodes.push_back(node_json(n));
    }
    if (Paginate(req, res, &nodes)) SendJson(res, 200, nodes);
  });

  server_->Get(R"(/api/v0/nodes/([^/]+))", [this, node_json](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    const int64_t wall = clock_->WallMillis();
    auto view = store_->Read(
        [&](const ClusterState& state) { return NodeViewOf(state, *liveness_, NodeId(id), wall); });
    if (!view) return SendError(res, 404, absl::StrCat("node ", id, " does not exist"));
    SendJson(res, 200, node_json(*view));
  });

  server_->Get("/api/v0/slices", [status](const httplib::Request& req, httplib::Response& res) {
    std::string state = req.get_param_value("state");
    if (!state.empty() && state != "READY" && state != "INCOMPLETE" && state != "DEGRADED" && state != "RESERVED") {
      return SendError(res, 400,
                       absl::StrCat("state \"", state, "\" is not valid; use READY, INCOMPLETE, DEGRADED or RESERVED"));
    }
    const std::string type = req.get_param_value("accelerator_type");
    nlohmann::json slices = nlohmann::json::array();
    const rpc::ClusterStatus view = status(true);
    for (const auto& s : view.slices()) {
      if (!state.empty() && rpc::SliceStateName(s.state()) != state) continue;
      if (!type.empty() && s.accelerator_type() != type) continue;
      slices.push_back(rpc::SliceToJson(s));
    }
    if (Paginate(req, res, &slices)) SendJson(res, 200, slices);
  });

  server_->Get(R"(/api/v0/slices/([^/]+))", [status](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    const rpc::ClusterStatus view = status(true);
    for (const auto& s : view.slices()) {
      if (s.name() == name) return SendJson(res, 200, rpc::SliceToJson(s));
    }
    SendError(res, 404, absl::StrCat("slice ", name, " does not exist"));
  });

  server_->Get("/api/v0/placement_groups", [groups](const httplib::Request& req, httplib::Response& res) {
    std::string state = req.get_param_value("state");
    nlohmann::json out = nlohmann::json::array();
    for (const auto& view : groups()) {
      if (state.empty() || view.state() == state) out.push_back(rpc::PlacementGroupToJson(view));
    }
    if (Paginate(req, res, &out)) SendJson(res, 200, out);
  });

  server_->Get(R"(/api/v0/placement_groups/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    auto view = store_->Read([&](const ClusterState& state) -> std::optional<rpc::PlacementGroupView> {
      const Group* g = state.FindGroup(id);
      return g == nullptr ? std::nullopt : std::optional<rpc::PlacementGroupView>(GroupView(state, *g));
    });
    if (!view) return SendError(res, 404, absl::StrCat("placement group ", id, " does not exist"));
    SendJson(res, 200, rpc::PlacementGroupToJson(*view));
  });

  server_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && res.body.empty()) SendError(res, 404, absl::StrCat("no route ", req.method, " ", req.path));
    // The library's own refusals come without a body.
    if (res.status == 400 && res.body.empty()) {
      SendError(res, 400, "the request is not readable HTTP/1.1 (a malformed request line or header, or a header "
                          "line over 8192 bytes)");
    }
    if (res.status == 413 && res.body.empty()) {
      SendError(res, 413, absl::StrCat("the request body is larger than ", max_body_bytes_, " bytes"));
    }
  });
  server_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    SendError(res, 500, "internal error");
  });
}

}  // namespace torus::head
