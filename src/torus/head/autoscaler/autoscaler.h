// The autoscaler's mechanism: a thread that, every period and whenever groups or nodes change, reads the state,
// asks the policy (plan.h) what to do, and has the provider launch and remove whole slices. It keeps what the state
// does not: the slices it launched and their phases, the capacity classes that failed lately, and what it says of
// each waiting group (the scheduler appends that to the group's reason).
//
// Removal: the hosts of a slice being removed are draining from that moment (the scheduler no longer places on
// them) and the provider stops them all. A pass of the scheduler already under way may still place a group there;
// that group then loses the slice with its hosts and is placed again, as after any slice failure.
//
// A head that restarts takes up the slices the provider lists; each gets a fresh provisioning timeout (its hosts
// register again with the new head).
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "torus/autoscale/config.h"
#include "torus/common/clock.h"
#include "torus/head/autoscaler/plan.h"
#include "torus/head/autoscaler/slice_provider.h"
#include "torus/head/state/liveness.h"
#include "torus/head/state/state_store.h"

namespace torus::head {

class Autoscaler {
 public:
  struct Options {
    int64_t period_ms = 1000;  // a plan at least this often
  };
  // What it has done lately, newest last (at most kMaxEvents).
  struct Event {
    int64_t wall_ms = 0;
    std::string kind;  // "launch", "launch-failed", "remove", "running"
    std::string slice;
    std::string node_type;
    std::string capacity_class;
    std::string message;
  };
  struct Status {
    std::vector<autoscale::NodeType> node_types;
    std::vector<ScaledSlice> slices;           // launched, not removed
    std::vector<ClassFailure> failures;        // still in effect
    std::map<GroupId, std::string> notes;      // waiting group -> what the autoscaler does about it
    std::vector<Event> events;
    // Counts since the head started, by (node type, capacity class).
    std::map<std::pair<std::string, std::string>, int64_t> launches, launch_failures, removals;
  };
  static constexpr size_t kMaxEvents = 100;

  // `new_suffix` gives the random part of new slice names (5 hex digits).
  Autoscaler(autoscale::AutoscalerConfig config, StateStore* store, const Liveness* liveness,
             SliceProvider* provider, const Clock* clock, std::function<std::string()> new_suffix,
             Options options);
  ~Autoscaler();  // stops the thread

  // Called when what it says of waiting groups changed (the scheduler then writes their reasons again).
  void OnNotesChanged(std::function<void()> listener);
  void Start();
  void Stop();

  // The store's subscriber: plans again soon after groups or nodes change.
  void OnRecords(const std::vector<Record>& records);
  void Wake();

  // What the autoscaler says of a waiting group ("" = nothing).
  std::string NoteFor(const GroupId& group) const;
  // Whether `node` is a host of a slice being removed.
  bool Draining(const sched::NodeSnapshot& node) const;
  Status GetStatus() const;

 private:
  void Run();
  void Tick();
  void AddEvent(Event event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const autoscale::AutoscalerConfig config_;
  StateStore* store_;
  const Liveness* liveness_;
  SliceProvider* provider_;
  const Clock* clock_;
  const std::function<std::string()> new_suffix_;
  const Options options_;
  std::function<void()> on_notes_changed_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  bool dirty_ ABSL_GUARDED_BY(mu_) = true;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<ScaledSlice> slices_ ABSL_GUARDED_BY(mu_);
  std::vector<ClassFailure> failures_ ABSL_GUARDED_BY(mu_);
  std::map<GroupId, std::string> notes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t, std::less<>> draining_ ABSL_GUARDED_BY(mu_);  // slice -> when its removal began
  int64_t last_tick_micros_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, int64_t> launches_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, int64_t> launch_failures_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, int64_t> removals_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace torus::head
