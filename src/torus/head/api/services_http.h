// Services over HTTP (the head's JSON API), and their Prometheus samples:
//
//   POST   /api/v0/services          body: a service spec, YAML or JSON (train/service_spec.h)
//                                    -> 201 {"name", "version", "changed": true} for a new service or version;
//                                       200 with "changed": false when the spec is the deployed one
//   GET    /api/v0/services          [service]
//   GET    /api/v0/services/{name}   service: {name, version, status, route_prefix, url, target_replicas,
//                                    ready_replicas, queued_requests, replicas: [{run_id, name, version, state,
//                                    address, in_flight, requests, created_ms, ready_ms, message}], events: [...],
//                                    spec: {...}, created_ms, updated_ms}
//   DELETE /api/v0/services/{name}   {"deleted": true}; its replicas drain and stop
//   POST   /api/v0/services/load     body: the load an ingress apart from the head carries (serve/remote_routes.h)
//                                    -> {"accepted": true}; counted for autoscaling while fresh (3 s)
//
//   torus_serve_requests_total{service, code}             counter (answers the ingress gave, by status code)
//   torus_serve_request_duration_seconds{service}         histogram (first byte in to last byte out)
//   torus_serve_retries_total{service}                    counter (requests sent again to another replica)
//   torus_serve_ongoing_requests{service, where}          gauge (where: in_flight | queued)
//   torus_serve_replicas{service, state}                  gauge
//   torus_serve_replica_in_flight{service, replica}       gauge
//   torus_serve_replica_requests_total{service, replica}  counter
//
// Thread-safety: handlers call the thread-safe ServiceController.
#pragma once

#include <httplib.h>

#include <string>

#include "nlohmann/json.hpp"
#include "torus/head/metrics/prometheus.h"
#include "torus/head/services/service_controller.h"
#include "torus/serve/route_table.h"

namespace torus::head {

// `ingress_url`: where the ingress listens ("http://10.0.0.2:8000"; "" when it does not run here).
void RegisterServiceRoutes(httplib::Server& server, ServiceController* services, const std::string* ingress_url);

nlohmann::json ServiceJson(const ServiceView& view, const std::string& ingress_url);

void WriteServiceMetrics(PrometheusWriter& w, const std::vector<ServiceView>& views,
                         const std::map<std::string, serve::ServiceCounters>& counters);

}  // namespace torus::head
