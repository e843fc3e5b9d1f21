// The gang-run state machine: what a run does next, decided from where it stands (level-triggered). Pure.
//
//   PENDING / RESTARTING --group CREATED, no worker of the last attempt left--> start attempt N+1 (RUNNING)
//   RUNNING --every rank exited 0--> SUCCEEDED
//   RUNNING --a rank failed (non-zero, signal, lost, not started) or a host of the group was lost (the group is no
//             longer CREATED)--> attempt ends; failures + 1; RESTARTING, or FAILED once max_failures is spent; every
//             worker of the attempt is stopped
//   any --stop--> STOPPED;  any --its group removed or failed--> FAILED
//   PENDING / RESTARTING --its group not CREATED for placement_timeout_s (from submission / the last attempt's
//             end)--> FAILED
// An attempt that ended other than by success gets its root cause (explain.h) once every worker of it has ended,
// or once the failure window has passed since its end (whichever comes first): the events that explain a failure
// may reach the head after the first symptom (a host is declared dead only after the node timeout).
// A terminal run releases its group and stops its workers. The next attempt starts only once every worker of the
// previous one is gone (exited, or lost with its host), so two attempts never share a chip.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <vector>

#include "torus/head/state/cluster_state.h"
#include "torus/head/state/model.h"
#include "torus/head/state/records.h"

namespace torus::head {

struct RunFacts {
  const Run* run = nullptr;
  const Group* group = nullptr;         // its reservation; null when forgotten
  std::vector<const Worker*> workers;   // of the last attempt, by rank (null for an unknown one)
  int64_t failure_window_ms = 4000;     // how long after an attempt's end its cause may still be learned
};

struct RunStep {
  std::optional<AttemptEnded> end_attempt;
  std::optional<RunFinished> finish;
  bool start_attempt = false;
  bool stop_workers = false;   // workers of the last attempt still run and must stop
  bool release_group = false;  // its group is live and must end (REMOVED)
  std::optional<AttemptExplained> explain;  // the last attempt's root cause is settled
  int64_t wake_at_ms = 0;      // look again then (the failure window ends); 0 = only on a record
};

RunStep DecideRun(const RunFacts& facts, int64_t wall_ms);

RunFacts RunFactsOf(const ClusterState& state, const Run& run, int64_t failure_window_ms = 4000);

// "failed 2 times (max_failures=1); last: <reason>": a run's message when it failed with its last attempt.
std::string FailedRunMessage(int failures, int max_failures, const std::string& reason);

}  // namespace torus::head
