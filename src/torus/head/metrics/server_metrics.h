// Control-plane metrics of the head itself: a latency histogram (placement), and request counts by method and
// outcome for the gRPC service (through a server interceptor) and the HTTP API (through the server's logger).
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/server_interceptor.h"
#include "torus/head/state/model.h"
#include "torus/head.pb.h"
#include "torus/head/metrics/prometheus.h"

namespace torus::head {

// A Prometheus histogram with fixed upper bounds (ascending; +Inf is implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // Writes `name`_bucket{le=...}, `name`_sum and `name`_count; the caller has started the family as "histogram".
  void Write(PrometheusWriter& w, const std::string& name) const;

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // one per bound, then +Inf
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

// Counts of requests by (method, code).
class RequestCounter {
 public:
  void Add(const std::string& method, const std::string& code);
  std::map<std::pair<std::string, std::string>, uint64_t> Counts() const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, uint64_t> counts_ ABSL_GUARDED_BY(mu_);
};

// Counts every gRPC call the server finishes: method (e.g. "/torus.rpc.HeadService/Heartbeat") and status code name.
// Methods of services not in `services` (full names, e.g. "torus.rpc.HeadService") count as "unknown", so that
// callers cannot make a series per made-up method name. The bidirectional streams of those services (an agent's
// heartbeat stream lives as long as its registration) are not counted: an interceptor would run on every message.
class GrpcCountingInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  GrpcCountingInterceptorFactory(RequestCounter* counter, const std::vector<std::string>& services);
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override;

 private:
  RequestCounter* counter_;
  std::set<std::string> methods_;    // "/<service>/<method>"
  std::set<std::string> uncounted_;  // bidirectional streams of the services
};

// The gRPC status code's name ("OK", "UNAUTHENTICATED", ...).
std::string GrpcCodeName(int code);

// The route family of an HTTP path, so that ids do not make a series each: "/api/v0/nodes/n1/logs" ->
// "/api/v0/nodes/{id}/logs", "/api/jobs/raysubmit_x" -> "/api/jobs/{id}", "/static/app.js" -> "/static".
std::string HttpRouteFamily(const std::string& path);

// How long a group that just became CREATED waited for it, in seconds: from the first PENDING or RESCHEDULING
// event after its previous CREATED (the first event is its submission) to its latest CREATED. nullopt when it is not CREATED.
std::optional<double> PlacementLatencySeconds(const Group& group);

// Bounds of the placement latency histogram, in seconds (1 ms to 5 min).
std::vector<double> PlacementLatencyBounds();

}  // namespace torus::head
