// RouteTable: what the ingress routes to — each service's path prefix, its READY replicas and its request limits —
// and what it counts: requests in flight per replica, requests waiting for one per service, answers and latencies.
// The service controller writes the routes (Set) and reads the load (Load) to scale on it; the ingress reads
// routes and counts.
//
// Picking: the READY replica with the fewest requests in flight, ties broken at random (Ray Serve's and Envoy's
// least-request). A service with no READY replica holds the request (counted as queued, at most
// max_queued_requests) until one is READY or queue_timeout passes. Threads that may block wait in Acquire; event
// loops, which must not block, use TryAcquire and Unqueue, and learn of changes through Subscribe.
//
// Thread-safety: thread-safe. Subscribers are called on the thread that calls Set or Stop, with no lock of the
// table held (they may call into it).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace torus::serve {

struct ReplicaEndpoint {
  std::string id;    // the replica's run id
  std::string host;  // rank 0's address
  int port = 0;
  bool operator==(const ReplicaEndpoint&) const = default;
};

struct ServiceRoute {
  std::string name;
  std::string prefix;
  std::vector<ReplicaEndpoint> ready;  // receiving new requests
  int64_t request_timeout_ms = 300'000;
  int64_t max_request_bytes = int64_t{16} << 20;
  int max_queued_requests = 100;
  int64_t queue_timeout_ms = 60'000;
};

// Latency buckets (seconds) of the per-service histograms.
inline constexpr std::array<double, 14> kLatencyBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                                         0.1,    0.25,  0.5,    1,     2.5,   10,   60};

struct ServiceCounters {
  std::map<int, int64_t> responses;  // by status code (what the client got)
  std::array<int64_t, kLatencyBounds.size() + 1> latency_buckets{};  // last = +Inf; not cumulative
  double latency_sum_s = 0;
  int64_t latency_count = 0;
  int64_t retries = 0;  // requests sent again to another replica after one failed before answering
};

struct ServiceLoad {
  int in_flight = 0;                      // on its replicas
  int queued = 0;                         // waiting for a READY replica
  std::map<std::string, int> replicas;    // replica id -> in flight (present ones)
  std::map<std::string, int64_t> served;  // replica id -> requests sent to it, ever
};

class RouteTable {
 public:
  // Replaces the routes. In-flight counts of replicas that stay are kept; held requests are woken.
  void Set(std::vector<ServiceRoute> routes);

  // The service whose prefix is the longest that matches `path` (a path without the query), without its replicas;
  // nullopt when none.
  std::optional<ServiceRoute> Match(absl::string_view path) const;
  // Every prefix, for the 404 message.
  std::vector<std::string> Prefixes() const;

  // kExhausted: the service has READY replicas but every one is in `exclude` (each failed this request).
  // kWait (TryAcquire only): no READY replica yet; the request is counted as queued.
  enum class Outcome { kPicked, kGone, kQueueFull, kTimedOut, kExhausted, kStopped, kWait };
  struct Pick {
    Outcome outcome = Outcome::kGone;
    ReplicaEndpoint replica;
  };
  // A READY replica of `service` not in `exclude` (least in flight, ties at random), counted in flight until
  // Release; with none, waits until `deadline_ms` (steady clock) as one of the service's queued requests.
  Pick Acquire(const std::string& service, const std::set<std::string>& exclude, int64_t deadline_ms);
  // Acquire without waiting. `queued`: the request is already counted as queued (an earlier TryAcquire returned
  // kWait). kWait: no READY replica; the request is (still) counted as queued, and is tried again when the routes
  // change (Subscribe) until its queue timeout, after which the caller calls Unqueue. Any other outcome ends its
  // queued count. Never returns kTimedOut.
  Pick TryAcquire(const std::string& service, const std::set<std::string>& exclude, bool queued);
  // A request that TryAcquire left queued gives up waiting (its queue timeout passed, or its client went away).
  void Unqueue(const std::string& service);
  void Release(const std::string& service, const std::string& replica_id);

  void Record(const std::string& service, int status, double seconds, bool retried);
  // Release and Record at once (one lock), for a request answered by `replica_id`.
  void Finish(const std::string& service, const std::string& replica_id, int status, double seconds, bool retried);

  std::map<std::string, ServiceLoad> Load() const;
  std::map<std::string, ServiceCounters> Counters() const;
  // Wakes every held request (they end kStopped); later Acquires return kStopped.
  void Stop();

  // Calls `on_change` after every Set and Stop (from the caller's thread, no table lock held) until Unsubscribe;
  // returns the subscription's id. It should be quick (e.g. wake an event loop, which then calls TryAcquire).
  int Subscribe(std::function<void()> on_change);
  // Ends a subscription; once it returns, its callback is not running and is never called again. REQUIRES: not
  // called from a subscriber (nor is Subscribe).
  void Unsubscribe(int id);

 private:
  struct Entry {
    ServiceRoute route;
    std::map<std::string, int> in_flight;  // replica id -> count (replicas no longer READY kept while > 0)
    std::map<std::string, int64_t> served;
    int queued = 0;
  };
  // Pick for Acquire and TryAcquire: kWait when the request should wait (`*queued` then says it is counted).
  Pick PickLocked(const std::string& service, const std::set<std::string>& exclude, bool* queued)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnqueueLocked(const std::string& service) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Notify() ABSL_LOCKS_EXCLUDED(mu_, subscribers_mu_);
  void ReleaseLocked(const std::string& service, const std::string& replica_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordLocked(const std::string& service, int status, double seconds, bool retried)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  std::map<std::string, Entry> services_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, ServiceCounters> counters_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_){std::random_device{}()};
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;

  // Held while subscribers are called, so that Unsubscribe waits for a call under way; never held with mu_ except
  // by a subscriber that calls into the table (then mu_ comes second).
  absl::Mutex subscribers_mu_;
  std::map<int, std::function<void()>> subscribers_ ABSL_GUARDED_BY(subscribers_mu_);
  int next_subscriber_ ABSL_GUARDED_BY(subscribers_mu_) = 0;
};

}  // namespace torus::serve
