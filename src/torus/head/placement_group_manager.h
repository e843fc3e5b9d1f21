// PlacementGroupManager: creates, reschedules and removes placement groups and slice groups.
//
// Mechanism around the pure scheduling core: one scheduler thread takes pending groups in submission order
// (rescheduling ones first), asks the core for a placement against the head's own accounting of what every group
// holds, and reserves it with two-phase commit on the agents (prepare all, then commit all; any refusal or timeout
// cancels every prepare and the group retries with backoff). A group is never partly created.
//
// Fairness: younger requests may be placed past an older one that waits, but once a request has waited longer than
// `fifo_after`, nothing behind it is placed until it is (so large requests are not starved by a stream of small
// ones).
//
// Failures: when a node dies, an ordinary group loses the bundles on it and re-places just those; a slice group
// treats the slice as the unit of failure: the whole degraded slice is released on every surviving host and a
// replacement slice (of the shape the group holds) is reserved atomically; until one exists the group is PENDING with
// the reason, holding only whole healthy slices.
//
// Thread-safety: thread-safe. Public methods take the manager's mutex briefly; agent RPCs run on the scheduler thread
// with the mutex released.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/common/clock.h"
#include "torus/head.pb.h"
#include "torus/head/agent_pool.h"
#include "torus/head/node_registry.h"
#include "torus/head/placement_group.h"

namespace torus::head {

// Groups bundles by (agent, ledger group) for one round of agent calls.
std::vector<AgentBundles> GroupByAgent(const std::vector<HeldBundle>& bundles);

class PlacementGroupManager {
 public:
  struct Options {
    std::chrono::milliseconds prepare_ttl{10'000};  // agents drop uncommitted prepares after this
    int64_t max_backoff_ms = 1000;
    int64_t fifo_after_ms = 10'000;
  };
  using ViewOr = absl::StatusOr<rpc::PlacementGroupView>;

  PlacementGroupManager(const NodeRegistry* registry, AgentPool* agents, const Clock* clock, Options options);
  ~PlacementGroupManager();  // stops the scheduler thread

  void Start();
  void Stop();

  // Validate, queue, and return the group as it is now (PENDING). InvalidArgument names the field;
  // AlreadyExists for a name a live group uses.
  ViewOr CreatePlacementGroup(const rpc::PlacementGroupSpec& spec);
  ViewOr ReserveSlices(const rpc::SliceGroupSpec& spec);

  // The same for requests already validated in scheduling-core form (used by gang runs).
  ViewOr SubmitBundles(sched::BundleRequest request, const std::string& name);
  ViewOr SubmitSlices(sched::SliceGroupRequest request, const std::string& name);

  // By id or name; NotFound otherwise.
  ViewOr Get(const std::string& id_or_name) const;
  // Calls `done` (on some thread) once the group is CREATED, FAILED or REMOVED, or when `wait_ms` passes.
  void WaitReady(const std::string& id_or_name, int64_t wait_ms, std::function<void(ViewOr)> done);
  // Removes a group in any state (idempotent): releases every bundle on every agent; ends REMOVED.
  ViewOr Remove(const std::string& id_or_name);
  std::vector<rpc::PlacementGroupView> List(bool include_removed) const;

  // TPU chips of `node_id` that live groups hold (slice-group bundles carry chips), ascending.
  std::vector<int> BusyChips(const std::string& node_id) const;

  // slice name -> id of the live group holding it.
  std::map<std::string, std::string> SliceHolders() const;
  // Groups waiting (PENDING or RESCHEDULING), oldest first.
  std::vector<rpc::PlacementGroupView> Waiting() const;

  // Called (on the scheduler thread or a caller's, never under the manager's lock) after a group changes state,
  // with its id and new state. Set before Start; used by jobs and gang runs that own groups.
  using StateListener = std::function<void(const std::string& id, PgState state)>;
  void AddStateListener(StateListener listener);

  // Events from the registry.
  void NotifyClusterChanged();
  void NotifyNodeDead(const std::string& node_id);

 private:
  struct Waiter {
    std::string id;
    int64_t deadline_micros;
    std::function<void(ViewOr)> done;
  };
  using Lock = std::unique_lock<std::mutex>;
  using Targets = std::map<std::string, std::pair<std::string, std::string>>;  // node id -> (address, agent)

  // What one scheduling attempt of one group decided; reserved on the agents together with the rest of its batch.
  struct PlacementDecision {
    std::string id;
    bool placed = false;
    std::vector<HeldBundle> fresh;        // bundles to reserve now
    std::vector<std::string> new_slices;  // the slices held afterwards (slice groups)
    int alternative = 0;
    uint64_t attempt = 0;
    std::string refusal;                  // set by ReserveBatch when an agent refused or timed out
  };

  ViewOr Submit(std::unique_ptr<PlacementGroup> group, const std::string& name);
  PlacementGroup* FindLocked(const std::string& id_or_name) const;
  void Run();
  void HandleDeathsLocked();
  void ReleaseQueued(Lock& lock);
  void ExpireTimeoutsLocked();
  void ScheduleWaiting(Lock& lock);
  // Tries to place one group; unlocks `lock` around agent RPCs. Returns true when it is CREATED afterwards.
  bool TrySchedule(const std::string& id, Lock& lock);
  // Decides against `input` (the head's accounting); on no placement records the reason on the group.
  PlacementDecision DecideLocked(PlacementGroup* group, const sched::IndexInput& input, const Targets& where);
  // Counts a decision's bundles as held in `input`, so that later decisions of the same pass see them.
  static void HoldInInput(const PlacementDecision& decision, sched::IndexInput& input);
  // Two-phase reservation of a batch of decisions in one round of prepares and one of commits; unlocks `lock`.
  void ReserveBatch(std::vector<PlacementDecision>& batch, Lock& lock);
  // Records a reserved (or refused) decision on its group. Returns true when the group is CREATED.
  bool ApplyLocked(PlacementDecision& decision);
  Targets AgentTargets() const;
  sched::IndexInput IndexInputLocked(const PlacementGroup& placing) const;
  void SetStateLocked(PlacementGroup& group, PgState state, const std::string& message);
  void QueueReleaseLocked(const std::vector<HeldBundle>& bundles);
  void FinishWaitersLocked(std::vector<std::pair<std::function<void(ViewOr)>, ViewOr>>& out, bool all_due);
  int64_t NextWakeMicrosLocked() const;
  // Delivers queued state events to the listeners; unlocks `lock` meanwhile.
  void FlushEvents(Lock& lock);

  const NodeRegistry* registry_;
  AgentPool* agents_;
  const Clock* clock_;
  const Options options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::unique_ptr<PlacementGroup>> groups_;  // guarded by mu_
  std::map<std::string, std::string> live_names_;                   // name -> id; guarded by mu_
  std::vector<std::string> dead_nodes_;                             // guarded by mu_
  std::vector<HeldBundle> to_release_;                              // guarded by mu_
  std::vector<Waiter> waiters_;                                     // guarded by mu_
  std::vector<std::pair<std::string, PgState>> events_;             // guarded by mu_
  std::vector<StateListener> listeners_;                            // set before Start
  uint64_t next_seq_ = 1;                                           // guarded by mu_
  bool dirty_ = false;                                              // guarded by mu_
  bool stopping_ = false;                                           // guarded by mu_
  std::thread thread_;
};

}  // namespace torus::head
