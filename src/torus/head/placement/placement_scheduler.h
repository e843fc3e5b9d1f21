// PlacementScheduler: the mechanism that turns waiting groups into reservations. One thread makes passes: each pass
// takes the waiting groups (RESCHEDULING ones first, then in submission order), decides each against the head's
// accounting (decide.h), reserves the decisions on the agents with two-phase commit — one round of prepares and one
// of commits for the whole batch (a group whose bundles are all on one agent is held in one phase: its prepare
// commits); any refusal or timeout cancels every prepare of that group, which retries with back-off — and records
// the outcome (GroupPlaced, or GroupWaiting with the reason). A group is never partly created.
// A group that already holds bundles (rescheduling) is decided and reserved on its own.
//
// Fairness: younger requests may be placed past an older one that waits, but once a request has waited longer than
// `fifo_after_ms`, nothing behind it is placed until it is (large requests are not starved by small ones). A request
// that no alive node could hold even idle (infeasible until nodes join) holds up nobody.
//
// Only nodes that registered with this head are placed on (a node restored from the journal waits until its agent
// registers again). A decision is recorded only if its group did not change meanwhile and its nodes are still
// alive; otherwise what was reserved is released and the group is decided again.
//
// Releases: bundles given up (a group ended, a slice degraded, a bundle moved) are released on their agents by this
// thread; an agent that misses a release is told again when it registers.
//
// Thread-safety: thread-safe. Agent RPCs run on the scheduler's thread, never under the store's lock.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "torus/common/clock.h"
#include "torus/head/agents/agent_pool.h"
#include "torus/head/placement/decide.h"
#include "torus/head/state/liveness.h"
#include "torus/head/state/state_store.h"

namespace torus::head {

class PlacementScheduler {
 public:
  struct Options {
    int64_t prepare_ttl_ms = 10'000;  // agents drop uncommitted prepares after this
    int64_t max_backoff_ms = 1000;
    int64_t fifo_after_ms = 10'000;
  };

  PlacementScheduler(StateStore* store, const Liveness* liveness, AgentPool* agents, const Clock* clock,
                     Options options);
  ~PlacementScheduler();  // stops the thread

  // The autoscaler's part (each optional; set before Start): what it says of a waiting group, appended to the
  // group's reason ("...; autoscaler: launching slice v6e-1a2b3 (TPU-V6E 4x4, spot)"), and the nodes it is removing,
  // which are not placed on.
  struct Autoscaling {
    std::function<std::string(const GroupId&)> note;
    std::function<bool(const sched::NodeSnapshot&)> draining;
  };
  void SetAutoscaling(Autoscaling autoscaling) { autoscaling_ = std::move(autoscaling); }

  void Start();
  void Stop();

  // The store's subscriber: wakes a pass on changes that may let a group be placed, and answers waiters.
  void OnRecords(const std::vector<Record>& records);
  void Wake();
  // Agents are told to release these bundles, soon, on the scheduler's thread.
  void Release(std::vector<HeldBundle> bundles);

  // Calls `done` with the group once it is CREATED, FAILED or REMOVED, or after `wait_ms` with its state then (at
  // once when `wait_ms` <= 0). NotFound for an unknown id or name. `done` runs on some thread of the head and must
  // not block.
  using WaitDone = std::function<void(absl::StatusOr<Group>)>;
  void WaitSettled(const std::string& id_or_name, int64_t wait_ms, WaitDone done);

 private:
  struct Backoff {
    int64_t retry_at_micros = 0;
    int64_t backoff_ms = 0;
  };
  struct Reservation {
    Decision decision;
    std::string refusal;  // why the agents did not hold it
  };
  struct Waiter {
    int64_t deadline_micros = 0;
    WaitDone done;
  };

  void Run();
  void Pass();
  void ExpireTimeouts();
  void Schedule();
  // Reserves a batch of decisions on the agents (prepare all, commit all), then records the outcomes.
  void Reserve(std::vector<Decision> batch);
  void SendReleases();
  // Answers the waiters of `groups` whose group settled (all waiters when `due` also: those past their deadline).
  void FinishWaiters(const std::vector<GroupId>& groups, bool due);
  int64_t NextWakeMicros();
  // node -> agent target of alive nodes (only those registered with this head when `placeable_only`), and their
  // incarnations when asked.
  std::map<NodeId, std::string> Targets(bool placeable_only, std::map<NodeId, uint64_t>* incarnations = nullptr) const;

  StateStore* store_;
  const Liveness* liveness_;
  AgentPool* agents_;
  const Clock* clock_;
  const Options options_;

  absl::Mutex mu_;
  absl::CondVar cv_;
  bool dirty_ ABSL_GUARDED_BY(mu_) = true;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<HeldBundle> to_release_ ABSL_GUARDED_BY(mu_);
  std::map<GroupId, Backoff> backoffs_ ABSL_GUARDED_BY(mu_);
  std::map<GroupId, std::vector<Waiter>> waiters_ ABSL_GUARDED_BY(mu_);
  int64_t next_timeout_micros_ ABSL_GUARDED_BY(mu_) = 0;  // when the next waiting group times out; 0 = none
  Autoscaling autoscaling_;  // set before Start
  uint64_t attempts_ = 0;  // scheduler thread only
  // The last pass's input and its index, which the next pass updates instead of building anew (ReuseIndex).
  // Scheduler thread only.
  std::optional<PassInput> last_input_;
  std::thread thread_;
};

}  // namespace torus::head
