// NodeRegistry: cluster membership. Registers agents, takes their heartbeats, and declares DEAD the nodes that fall
// silent for longer than the timeout, that unregister, or that an operator marks dead.
//
// A node id that registers again (a restarted agent, or one that was marked dead while still alive) replaces its
// record with a new incarnation; nothing is counted twice. Incarnations are unique across head restarts (seeded from
// the wall clock), so a heartbeat from an earlier life is always told to re-register.
//
// Thread-safety: thread-safe; every method takes the registry's mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/common/clock.h"
#include "torus/common/labels.h"
#include "torus/common/resources.h"
#include "torus/sched/cluster_snapshot.h"

namespace torus::head {

enum class NodeState { kAlive, kDead };

// What an agent says about itself when it registers.
struct NodeRegistration {
  std::string node_id;
  std::string address;
  std::string hostname;
  ResourceSet total;
  ResourceSet available;
  Labels labels;
  int64_t pid = 0;
  int64_t start_time_ms = 0;
  int32_t agent_port = 0;  // the agent's NodeService port on `address`
};

struct NodeRecord {
  NodeRegistration info;
  ResourceSet available;
  NodeState state = NodeState::kAlive;
  uint64_t incarnation = 0;
  int64_t last_heard_micros = 0;   // monotonic, from the registry's clock
  int64_t registered_wall_ms = 0;
  int64_t died_micros = 0;
  std::string death_reason;
};

enum class HeartbeatOutcome { kOk, kReregister };

class NodeRegistry {
 public:
  struct Options {
    int64_t node_timeout_micros = 3'000'000;
    size_t max_dead_nodes = 1000;  // oldest dead records beyond this are forgotten
  };
  // Called with the node id and reason each time a node becomes DEAD, outside the registry's lock.
  using DeathListener = std::function<void(const std::string& node_id, const std::string& reason)>;

  NodeRegistry(const Clock* clock, Options options);

  void SetDeathListener(DeathListener listener);
  // Called with the node id after each successful registration, outside the registry's lock.
  void SetRegistrationListener(std::function<void(const std::string& node_id)> listener);

  // Validates and records a registration; returns the new incarnation. InvalidArgument names the bad field.
  absl::StatusOr<uint64_t> Register(NodeRegistration registration);

  // Records a heartbeat; `available` is null when unchanged. kReregister when the id or incarnation is unknown or the
  // node is DEAD. InvalidArgument for malformed resource names or amounts.
  absl::StatusOr<HeartbeatOutcome> Heartbeat(const std::string& node_id, uint64_t incarnation,
                                             const ResourceSet* available);

  // Graceful shutdown of one incarnation: the node becomes DEAD at once. NotFound for an unknown id; a stale
  // incarnation is ignored (OK).
  absl::Status Unregister(const std::string& node_id, uint64_t incarnation, const std::string& reason);

  // Operator's verdict: the node is DEAD now. Returns whether it was alive. NotFound for an unknown id.
  absl::StatusOr<bool> MarkDead(const std::string& node_id, const std::string& reason);

  // Marks DEAD every alive node not heard from within the timeout; returns their ids.
  std::vector<std::string> ExpireSilentNodes();

  // The labels of `node_id` when it is ALIVE as `incarnation`; nullopt otherwise.
  std::optional<Labels> CurrentLabels(const std::string& node_id, uint64_t incarnation) const;

  // Copies of the records, ordered by node id.
  std::vector<NodeRecord> Records(bool include_dead) const;
  // The scheduler's view of the same nodes.
  std::vector<sched::NodeSnapshot> Snapshot(bool include_dead) const;
  size_t AliveCount() const;

 private:
  // REQUIRES: mu_ held. Replaces the record; returns the new incarnation.
  uint64_t RegisterLocked(NodeRecord& record, NodeRegistration registration);
  // REQUIRES: mu_ held. Marks dead and returns true when the node was alive.
  bool MarkDeadLocked(NodeRecord& record, std::string reason);
  void PruneDeadLocked();
  void NotifyDeaths(const std::vector<std::pair<std::string, std::string>>& deaths);

  const Clock* clock_;
  const Options options_;
  mutable std::mutex mu_;
  std::map<std::string, NodeRecord, std::less<>> nodes_;  // guarded by mu_
  uint64_t next_incarnation_;                             // guarded by mu_
  size_t alive_ = 0;                                      // guarded by mu_
  DeathListener death_listener_;                          // set before serving
  std::function<void(const std::string&)> registration_listener_;  // set before serving
};

// Node ids are 1-64 of [0-9A-Za-z_-].
absl::Status ValidateNodeId(std::string_view id);

// Validates an agent's registration: node id 1-64 of [0-9A-Za-z_-], address 1-255 characters, label keys and values
// (semantics.md §2), resource names and non-negative amounts.
absl::Status ValidateRegistration(const NodeRegistration& registration);

}  // namespace torus::head
