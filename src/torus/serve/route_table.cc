#include "torus/serve/route_table.h"

#include <algorithm>
#include <chrono>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "torus/train/service_spec.h"

namespace torus::serve {
namespace {

int64_t SteadyMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void RouteTable::Set(std::vector<ServiceRoute> routes) {
  absl::ReleasableMutexLock lock(&mu_);
  std::map<std::string, Entry> next;
  for (ServiceRoute& r : routes) {
    Entry& e = next[r.name];
    auto old = services_.find(r.name);
    if (old != services_.end()) {
      e.queued = old->second.queued;
      e.served = old->second.served;
      for (const auto& [id, n] : old->second.in_flight) {
        if (n > 0) e.in_flight[id] = n;
      }
    }
    for (const ReplicaEndpoint& rep : r.ready) e.in_flight.try_emplace(rep.id, 0);
    e.route = std::move(r);
  }
  // Requests still in flight on a service that went keep their counts until they end.
  for (auto& [name, old] : services_) {
    if (next.contains(name)) continue;
    bool busy = old.queued > 0;
    for (const auto& [id, n] : old.in_flight) busy = busy || n > 0;
    if (!busy) continue;
    Entry& e = next[name];
    e.route.name = name;
    e.queued = old.queued;
    e.served = old.served;
    for (const auto& [id, n] : old.in_flight) {
      if (n > 0) e.in_flight[id] = n;
    }
  }
  services_ = std::move(next);
  changed_.SignalAll();
  lock.Release();
  Notify();
}

std::optional<ServiceRoute> RouteTable::Match(absl::string_view path) const {
  absl::MutexLock lock(&mu_);
  const ServiceRoute* best = nullptr;
  for (const auto& [name, e] : services_) {
    if (e.route.prefix.empty() || !train::PrefixMatches(e.route.prefix, path)) continue;
    if (best == nullptr || e.route.prefix.size() > best->prefix.size()) best = &e.route;
  }
  if (best == nullptr) return std::nullopt;
  ServiceRoute out;
  out.name = best->name;
  out.prefix = best->prefix;
  out.request_timeout_ms = best->request_timeout_ms;
  out.max_request_bytes = best->max_request_bytes;
  out.max_queued_requests = best->max_queued_requests;
  out.queue_timeout_ms = best->queue_timeout_ms;
  return out;
}

std::vector<std::string> RouteTable::Prefixes() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const auto& [name, e] : services_) {
    if (!e.route.prefix.empty()) out.push_back(e.route.prefix);
  }
  std::sort(out.begin(), out.end());
  return out;
}

RouteTable::Pick RouteTable::PickLocked(const std::string& service, const std::set<std::string>& exclude,
                                        bool* queued) {
  auto unqueue = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (*queued) UnqueueLocked(service);
    *queued = false;
  };
  if (stopped_) {
    unqueue();
    return {Outcome::kStopped, {}};
  }
  auto it = services_.find(service);
  if (it == services_.end() || it->second.route.prefix.empty()) {
    unqueue();  // a queued request of a service that was deleted is no longer queued
    return {Outcome::kGone, {}};
  }
  Entry& e = it->second;
  std::vector<const ReplicaEndpoint*> best;
  int least = 0;
  for (const ReplicaEndpoint& r : e.route.ready) {
    if (exclude.contains(r.id)) continue;
    const int n = e.in_flight[r.id];
    if (best.empty() || n < least) {
      best.clear();
      least = n;
    }
    if (n == least) best.push_back(&r);
  }
  if (!best.empty()) {
    unqueue();
    const ReplicaEndpoint& r =
        *best[best.size() == 1 ? 0 : std::uniform_int_distribution<size_t>(0, best.size() - 1)(rng_)];
    ++e.in_flight[r.id];
    ++e.served[r.id];
    return {Outcome::kPicked, r};
  }
  // Replicas exist but every one was tried: no point in waiting for them.
  if (!e.route.ready.empty()) {
    unqueue();
    return {Outcome::kExhausted, {}};
  }
  if (!*queued) {
    if (e.queued >= e.route.max_queued_requests) return {Outcome::kQueueFull, {}};
    ++e.queued;
    *queued = true;
  }
  return {Outcome::kWait, {}};
}

void RouteTable::UnqueueLocked(const std::string& service) {
  auto it = services_.find(service);
  if (it != services_.end() && it->second.queued > 0) --it->second.queued;
}

RouteTable::Pick RouteTable::Acquire(const std::string& service, const std::set<std::string>& exclude,
                                     int64_t deadline_ms) {
  absl::MutexLock lock(&mu_);
  bool queued = false;
  while (true) {
    Pick pick = PickLocked(service, exclude, &queued);
    if (pick.outcome != Outcome::kWait) return pick;
    const int64_t left = deadline_ms - SteadyMillis();
    if (left <= 0 || changed_.WaitWithTimeout(&mu_, absl::Milliseconds(left))) {
      if (deadline_ms - SteadyMillis() <= 0) {
        UnqueueLocked(service);
        return {Outcome::kTimedOut, {}};
      }
    }
  }
}

RouteTable::Pick RouteTable::TryAcquire(const std::string& service, const std::set<std::string>& exclude,
                                        bool queued) {
  absl::MutexLock lock(&mu_);
  return PickLocked(service, exclude, &queued);
}

void RouteTable::Unqueue(const std::string& service) {
  absl::MutexLock lock(&mu_);
  UnqueueLocked(service);
}

void RouteTable::Release(const std::string& service, const std::string& replica_id) {
  absl::MutexLock lock(&mu_);
  ReleaseLocked(service, replica_id);
}

void RouteTable::Finish(const std::string& service, const std::string& replica_id, int status, double seconds,
                        bool retried) {
  absl::MutexLock lock(&mu_);
  ReleaseLocked(service, replica_id);
  RecordLocked(service, status, seconds, retried);
}

void RouteTable::ReleaseLocked(const std::string& service, const std::string& replica_id) {
  auto it = services_.find(service);
  if (it == services_.end()) return;
  auto r = it->second.in_flight.find(replica_id);
  if (r == it->second.in_flight.end() || r->second <= 0) return;
  if (--r->second <= 0) {
    const bool ready = std::any_of(it->second.route.ready.begin(), it->second.route.ready.end(),
                                   [&](const ReplicaEndpoint& e) { return e.id == replica_id; });
    if (!ready) it->second.in_flight.erase(r);
  }
}

void RouteTable::Record(const std::string& service, int status, double seconds, bool retried) {
  absl::MutexLock lock(&mu_);
  RecordLocked(service, status, seconds, retried);
}

void RouteTable::RecordLocked(const std::string& service, int status, double seconds, bool retried) {
  ServiceCounters& c = counters_[service];
  ++c.responses[status];
  size_t bucket = 0;
  while (bucket < kLatencyBounds.size() && seconds > kLatencyBounds[bucket]) ++bucket;
  ++c.latency_buckets[bucket];
  c.latency_sum_s += seconds;
  ++c.latency_count;
  if (retried) ++c.retries;
}

std::map<std::string, ServiceLoad> RouteTable::Load() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, ServiceLoad> out;
  for (const auto& [name, e] : services_) {
    ServiceLoad& l = out[name];
    l.queued = e.queued;
    l.served = e.served;
    for (const auto& [id, n] : e.in_flight) {
      l.replicas[id] = n;
      l.in_flight += n;
    }
  }
  return out;
}

std::map<std::string, ServiceCounters> RouteTable::Counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

void RouteTable::Stop() {
  absl::ReleasableMutexLock lock(&mu_);
  stopped_ = true;
  changed_.SignalAll();
  lock.Release();
  Notify();
}

int RouteTable::Subscribe(std::function<void()> on_change) {
  absl::MutexLock lock(&subscribers_mu_);
  const int id = next_subscriber_++;
  subscribers_.emplace(id, std::move(on_change));
  return id;
}

void RouteTable::Unsubscribe(int id) {
  absl::MutexLock lock(&subscribers_mu_);
  subscribers_.erase(id);
}

void RouteTable::Notify() {
  absl::MutexLock lock(&subscribers_mu_);
  for (const auto& [id, on_change] : subscribers_) on_change();
}

}  // namespace torus::serve
