// Membership: what agents tell the head about themselves — registration (with everything they hold), heartbeats,
// graceful exit, worker exits — and the deaths of nodes (silence, an operator's verdict).
//
// Registration reconciles instead of forgetting. An agent registers with its ledger and its workers (after a head
// restart, after being declared dead, or when it first joins); the head keeps what it knows (bundles of live groups
// reserved on that node by that attempt, workers of live workloads — adopted as they are, exits that happened while
// it was away applied), and answers with what the agent must drop: bundles no live group holds there, workers no
// workload runs there. What the head expected and the agent no longer has is lost (bundles: their groups are
// placed again; workers: their workloads see them lost) — except a worker still starting whose launch the head
// kept: the agent never had its start (a head that stopped after recording it), and it stays starting for the
// workloads' driver to send again. A registration from a different agent process (another
// pid or start time) than the one the head knew means the agent restarted: the node dies first, then joins anew.
//
// A death is one transaction: the node is DEAD, every bundle on it is lost (a slice group loses the whole slice,
// whose other bundles are released), every worker on it is lost.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/common/clock.h"
#include "torus/head/placement/placement_scheduler.h"
#include "torus/head/state/liveness.h"
#include "torus/head/state/state_store.h"

namespace torus::head {

struct ReportedBundle {
  std::string ledger_group;
  int index = 0;
  uint64_t attempt = 0;
  bool committed = false;
};

struct ReportedWorker {
  WorkerId id;
  int64_t pid = 0;
  bool running = false;
  int exit_code = 0;  // when exited
  int signal = 0;
  int64_t end_time_ms = 0;
  bool stopped = false;  // its agent stopped it
};

struct AgentReport {
  NodeRegistration info;
  ResourceSet available;  // as the agent's ledger says
  std::vector<ReportedBundle> bundles;
  std::vector<ReportedWorker> workers;
};

struct Registered {
  uint64_t incarnation = 0;
  std::vector<std::pair<std::string, int>> release;  // (ledger group, index) to release
  std::vector<WorkerId> stop;                        // workers to stop
};

// Validates an agent's registration: node id 1-64 of [0-9A-Za-z_-], address 1-255 characters, label keys and values
// (semantics.md §2), resource names and non-negative amounts. InvalidArgument names the field.
absl::Status ValidateRegistration(const NodeRegistration& registration, const ResourceSet& available);
absl::Status ValidateNodeId(std::string_view id);

class Membership {
 public:
  Membership(StateStore* store, Liveness* liveness, PlacementScheduler* scheduler, const Clock* clock,
             int64_t node_timeout_micros);

  // Marks every node alive in the (replayed) state as restored in Liveness: alive, awaiting its agent, which has
  // `allowance_micros` on top of the node timeout to register (its reconnect backoff and heartbeat period).
  void RestoreLiveness(int64_t allowance_micros = 0);

  absl::StatusOr<Registered> Register(AgentReport report);
  // Graceful shutdown of one incarnation: the node is DEAD at once. NotFound for an unknown id; a stale incarnation
  // is ignored (OK).
  absl::Status Unregister(const NodeId& node, uint64_t incarnation, const std::string& reason);
  // An operator's verdict: DEAD now. Returns whether it was alive. NotFound for an unknown id.
  // With `revoke`, the node is also revoked (NodeRevoked, in the same transaction): its certificate is refused from
  // now on and it is issued none again.
  absl::StatusOr<bool> MarkDead(const NodeId& node, const std::string& reason, bool revoke = false);
  // Declares DEAD every node silent for longer than the timeout; returns them.
  std::vector<NodeId> ExpireSilent();
  // An agent reports that a worker exited. NotFound for a worker the head does not know (the agent drops the
  // report); OK (and nothing changes) for an exit already known. An exit that comes before the reply to the
  // worker's start records the start too (`pid`, `start_ms`), so that nobody sees a worker that ended without
  // having run.
  // `exit` carries what the agent told (its wall_ms 0: now).
  absl::Status ReportWorkerExit(const NodeId& node, const WorkerId& worker, WorkerExit exit, int64_t pid = 0,
                                int64_t start_ms = 0);
  // Several exits of `node`'s workers, in the order they happened, in one transaction: one status per exit, each as
  // ReportWorkerExit would answer it alone.
  struct ReportedExit {
    WorkerId worker;
    WorkerExit exit;
    int64_t pid = 0;
    int64_t start_ms = 0;
  };
  std::vector<absl::Status> ReportWorkerExits(const NodeId& node, std::vector<ReportedExit> exits);
  absl::Status ReportWorkerExit(const NodeId& node, const WorkerId& worker, int exit_code, int signal,
                                int64_t end_ms, int64_t pid = 0, int64_t start_ms = 0) {
    return ReportWorkerExit(node, worker, WorkerExit{.exit_code = exit_code, .signal = signal, .wall_ms = end_ms},
                            pid, start_ms);
  }

 private:
  // The death of `node` (as `incarnation`) and its consequences, in `txn`; adds bundles to release. Its workers
  // are lost with `loss`, the host last heard from at `last_seen_ms` (0: now).
  void Die(Txn& txn, const NodeId& node, uint64_t incarnation, const std::string& reason, HostLoss loss,
           int64_t last_seen_ms, std::vector<HeldBundle>& release);

  StateStore* store_;
  Liveness* liveness_;
  PlacementScheduler* scheduler_;
  const Clock* clock_;
  const int64_t node_timeout_micros_;
};

}  // namespace torus::head
