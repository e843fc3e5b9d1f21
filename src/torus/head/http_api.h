// HttpApi: the head's HTTP endpoint (default 127.0.0.1:8265): the cluster view as JSON under /api/v0/.
//
//   GET /healthz                  "ok" (no token needed; says nothing about the cluster)
//   GET /api/v0/cluster           nodes (dead ones too), slices, resource totals
//   GET /api/v0/nodes[?state=ALIVE|DEAD]
//   GET /api/v0/nodes/{node_id}
//   GET /api/v0/slices[?state=READY|INCOMPLETE|DEGRADED|RESERVED]
//   GET /api/v0/slices/{name}
//   GET /api/v0/placement_groups[?state=...], /api/v0/placement_groups/{id or name}
//   GET /metrics                  Prometheus text: nodes, slices, resources, placement groups (and what other
//                                 components add: jobs, runs)
//
// /metrics and every /api/ route need `Authorization: Bearer <cluster token>`; errors are JSON `{"error": "..."}` with 401,
// 404 or 400.
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
#include "torus/head/node_registry.h"
#include "torus/head/placement_group_manager.h"
#include "torus/head/prometheus.h"

namespace httplib {
class Server;
}

namespace torus::head {

class HttpApi {
 public:
  HttpApi(const NodeRegistry* registry, const PlacementGroupManager* groups, const Clock* clock, std::string token,
          std::string cluster_id);
  ~HttpApi();  // stops serving

  // Adds samples to GET /metrics (Prometheus text); call before Start.
  void AddMetricsSource(std::function<void(PrometheusWriter&)> source);

  // Lets another component add its routes (e.g. the Jobs API); call before Start.
  void AddRoutes(std::function<void(httplib::Server&)> add);

  // Binds host:port (0 = any free port) and serves on a background thread; returns the bound port.
  absl::StatusOr<int> Start(const std::string& host, int port);
  void Stop();

 private:
  void RegisterRoutes();

  const NodeRegistry* registry_;
  const PlacementGroupManager* groups_;
  const Clock* clock_;
  const std::string token_;
  const std::string cluster_id_;
  std::vector<std::function<void(httplib::Server&)>> extra_routes_;
  std::vector<std::function<void(PrometheusWriter&)>> metrics_sources_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace torus::head
