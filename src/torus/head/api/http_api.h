// HttpApi: the head's HTTP endpoint (default 127.0.0.1:8265): the cluster view as JSON under /api/v0/.
//
//   GET /healthz                  "ok" (no token needed; says nothing about the cluster)
//   GET /api/v0/cluster           nodes (dead ones too), slices, resource totals
//   GET /api/v0/nodes[?state=ALIVE|DEAD][&label=KEY%3DVALUE][&limit=N&offset=N]   (each node with its metrics_sources)
//   GET /api/v0/nodes/{node_id}
//   GET /api/v0/slices[?state=READY|INCOMPLETE|DEGRADED|RESERVED][&accelerator_type=T][&limit=N&offset=N]
//   GET /api/v0/slices/{name}
//   GET /api/v0/placement_groups[?state=...][&limit=N&offset=N], /api/v0/placement_groups/{id or name}
//   GET /metrics                  Prometheus text: nodes, slices, resources, placement groups, HTTP requests (and
//                                 what other components add: jobs, runs, node and chip metrics, gRPC requests)
// Lists with limit/offset answer one page and the whole count in the header X-Total-Count.
//
// Authentication: /metrics, every /api/ route and the dashboard page (/ and /static/) need the cluster token, as
// `Authorization: Bearer <token>`, or for a browser the cookie that `GET /?token=<token>` sets (HttpOnly,
// SameSite=Strict; accepted for GET and HEAD only, so a page elsewhere cannot make the browser change anything).
// In read-only mode (off unless switched on) GET and HEAD need no token, except for logs (node, run and job logs:
// a job's output may print its environment, which holds the cluster token); everything else still does. Errors are
// JSON `{"error": "..."}` with 401, 404 or 400.
//
// TLS: with SetTls, HTTPS only (TLS 1.2 or later; the cookie is then also Secure).
//
// Connections: each open connection has a thread of its own (ConnectionThreads), up to kMaxHttpConnectionThreads;
// beyond that, new connections wait for one to close. A connection silent for 5 s (between requests, or within one)
// is closed.
//
// Thread-safety: handlers run on the HTTP server's threads and read only thread-safe components.
#pragma once

#include <memory>
#include <string>
#include <functional>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/common/clock.h"
#include "torus/head/metrics/metrics_store.h"
#include "torus/head/metrics/prometheus.h"
#include "torus/head/metrics/server_metrics.h"
#include "torus/head/state/liveness.h"
#include "torus/head/state/state_store.h"
#include "torus/tls/server_certificate.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace torus::head {

// The most connections served at once (each holds a thread while it is open).
inline constexpr int kMaxHttpConnectionThreads = 1000;

class HttpApi {
 public:
  HttpApi(const StateStore* store, const Liveness* liveness, const Clock* clock, std::string token,
          std::string cluster_id);
  ~HttpApi();  // stops serving

  // Adds samples to GET /metrics (Prometheus text); call before Start.
  void AddMetricsSource(std::function<void(PrometheusWriter&)> source);

  // Read-only mode: GET and HEAD need no token. Call before Start.
  void SetReadOnly(bool read_only) { read_only_ = read_only; }
  // Node JSON gains each node's metric sources from `store`. Call before Start.
  void SetMetricsStore(const MetricsStore* store) { metrics_ = store; }

  // Refuses request bodies larger than this with 413 (default 1 GiB). Call before Start.
  void SetMaxBodyBytes(size_t bytes) { max_body_bytes_ = bytes; }

  // Serve HTTPS with the certificate and key of `files` (re-read when renewed); call before Start.
  void SetTls(const tls::TlsFiles& files) { tls_ = std::make_unique<tls::ServerCertificate>(files); }
  bool tls() const { return tls_ != nullptr; }

  // Lets another component add its routes (e.g. the Jobs API); call before Start.
  void AddRoutes(std::function<void(httplib::Server&)> add);

  // Binds host:port (0 = any free port) and serves on a background thread; returns the bound port.
  absl::StatusOr<int> Start(const std::string& host, int port);
  void Stop();

 private:
  void RegisterRoutes();
  // The pre-routing check of the token (header, cookie, login URL, read-only mode).
  bool Authorized(const httplib::Request& req, httplib::Response& res) const;

  const StateStore* store_;
  const Liveness* liveness_;
  const Clock* clock_;
  const std::string token_;
  const std::string cluster_id_;
  std::vector<std::function<void(httplib::Server&)>> extra_routes_;
  std::vector<std::function<void(PrometheusWriter&)>> metrics_sources_;
  bool read_only_ = false;
  size_t max_body_bytes_ = size_t{1} << 30;
  const MetricsStore* metrics_ = nullptr;
  RequestCounter http_requests_;
  std::unique_ptr<tls::ServerCertificate> tls_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace torus::head
