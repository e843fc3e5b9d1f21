// Liveness: when each alive node was last heard from, what its agent last reported as available and as held by its
// own task leases (which the head's accounting of groups does not see), and whether it has registered with this
// head. A node restored from the journal is alive but unconfirmed: its heartbeats are
// answered "register again" until its agent registers and reports what it holds, and it is heard "now" at
// restore, so it has one node timeout to do so.
//
// Heartbeats touch only this table (its own mutex), never the state store, so that 10,000 nodes at 2 Hz cost
// little. Volatile: nothing here is journaled.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "torus/common/clock.h"
#include "torus/common/resources.h"
#include "torus/head/state/ids.h"

namespace torus::head {

// What an agent's task leases hold on its host.
struct LeaseHoldings {
  ResourceSet resources;
  std::vector<int> chips;  // ascending
  std::vector<int> gpus;   // ascending
  bool empty() const { return resources.empty() && chips.empty() && gpus.empty(); }
  bool operator==(const LeaseHoldings&) const = default;
};

class Liveness {
 public:
  explicit Liveness(const Clock* clock) : clock_(clock) {}

  // `listener` is called (outside the lock) whenever a confirmed node's lease holdings change. Set it before the
  // first heartbeat.
  void OnLeasesChanged(std::function<void()> listener) { on_leases_changed_ = std::move(listener); }

  // The node registered with this head as `incarnation`; heard now.
  void Registered(const NodeId& node, uint64_t incarnation, ResourceSet reported_available);
  // The node is alive in a replayed state, unconfirmed until it registers: heard `allowance_micros` from now (its
  // agent may take that long to find the new head before its silence counts).
  void Restored(const NodeId& node, uint64_t incarnation, int64_t allowance_micros = 0);
  // The node is dead as `incarnation`: forgotten (unless it registered again since, as another incarnation).
  void Forget(const NodeId& node, uint64_t incarnation);

  enum class Beat { kOk, kReregister };
  // kReregister unless `node` is confirmed as `incarnation`. `available` and `leased` (null = unchanged) are stored.
  Beat Heartbeat(const NodeId& node, uint64_t incarnation, const ResourceSet* available,
                 const LeaseHoldings* leased = nullptr);

  struct Silent {
    NodeId node;
    uint64_t incarnation = 0;
    int64_t silent_micros = 0;
  };
  // Nodes not heard from for longer than `timeout_micros`, by node id.
  std::vector<Silent> Expired(int64_t timeout_micros) const;

  bool Confirmed(const NodeId& node) const;
  // Time since the node was last heard from; nullopt for a node not in the table.
  std::optional<int64_t> SilentMicros(const NodeId& node) const;
  // What its agent last reported as available; nullopt when it never did (or is not in the table).
  std::optional<ResourceSet> ReportedAvailable(const NodeId& node) const;
  // What the task leases of each confirmed node hold, as its agent last reported; nodes holding none are left out.
  std::map<NodeId, LeaseHoldings> Leased() const;

 private:
  struct Entry {
    uint64_t incarnation = 0;
    int64_t last_heard_micros = 0;
    bool confirmed = false;
    std::optional<ResourceSet> available;
    LeaseHoldings leased;
  };
  const Clock* clock_;
  std::function<void()> on_leases_changed_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> nodes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace torus::head
