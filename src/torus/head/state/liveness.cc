#include "torus/head/state/liveness.h"

#include <algorithm>

namespace torus::head {

void Liveness::Registered(const NodeId& node, uint64_t incarnation, ResourceSet reported_available) {
  bool had_leases = false;
  {
    absl::MutexLock lock(&mu_);
    Entry& e = nodes_[node.str()];
    had_leases = !e.leased.empty();
    // Its leases arrive with its first heartbeat.
    e = Entry{incarnation, clock_->NowMicros(), true, std::move(reported_available), {}};
  }
  if (had_leases && on_leases_changed_) on_leases_changed_();
}

void Liveness::Restored(const NodeId& node, uint64_t incarnation, int64_t allowance_micros) {
  absl::MutexLock lock(&mu_);
  nodes_[node.str()] = Entry{incarnation, clock_->NowMicros() + allowance_micros, false, std::nullopt, {}};
}

void Liveness::Forget(const NodeId& node, uint64_t incarnation) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node.str());
  if (it != nodes_.end() && it->second.incarnation == incarnation) nodes_.erase(it);
}

Liveness::Beat Liveness::Heartbeat(const NodeId& node, uint64_t incarnation, const ResourceSet* available,
                                   const LeaseHoldings* leased) {
  bool leases_changed = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = nodes_.find(node.str());
    if (it == nodes_.end() || !it->second.confirmed || it->second.incarnation != incarnation) {
      return Beat::kReregister;
    }
    it->second.last_heard_micros = clock_->NowMicros();
    if (available != nullptr) it->second.available = *available;
    if (leased != nullptr && !(it->second.leased == *leased)) {
      it->second.leased = *leased;
      leases_changed = true;
    }
  }
  if (leases_changed && on_leases_changed_) on_leases_changed_();
  return Beat::kOk;
}

std::vector<Liveness::Silent> Liveness::Expired(int64_t timeout_micros) const {
  std::vector<Silent> out;
  const int64_t now = clock_->NowMicros();
  absl::MutexLock lock(&mu_);
  for (const auto& [id, e] : nodes_) {
    const int64_t silent = now - e.last_heard_micros;
    if (silent > timeout_micros) out.push_back({NodeId(id), e.incarnation, silent});
  }
  std::sort(out.begin(), out.end(), [](const Silent& a, const Silent& b) { return a.node < b.node; });
  return out;
}

bool Liveness::Confirmed(const NodeId& node) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node.str());
  return it != nodes_.end() && it->second.confirmed;
}

std::optional<int64_t> Liveness::SilentMicros(const NodeId& node) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node.str());
  if (it == nodes_.end()) return std::nullopt;
  return clock_->NowMicros() - it->second.last_heard_micros;
}

std::optional<ResourceSet> Liveness::ReportedAvailable(const NodeId& node) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node.str());
  if (it == nodes_.end()) return std::nullopt;
  return it->second.available;
}

std::map<NodeId, LeaseHoldings> Liveness::Leased() const {
  std::map<NodeId, LeaseHoldings> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, e] : nodes_) {
    if (e.confirmed && !e.leased.empty()) out.emplace(NodeId(id), e.leased);
  }
  return out;
}

}  // namespace torus::head
