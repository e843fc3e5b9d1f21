// The gang-run state machine: what a run does next, decided from where it stands (level-triggered). Pure.
//
//   PENDING / RESTARTING --group CREATED, no worker of the last attempt left--> start attempt N+1 (RUNNING)
//   RUNNING --every rank exited 0--> SUCCEEDED
//   RUNNING --a rank failed (non-zero, signal, lost, not started) or a host of the group was lost (the group is no
//             longer CREATED)--> attempt ends; failures + 1; RESTARTING, or FAILED once max_failures is spent; every
//             worker of the attempt is stopped
//   any --stop--> STOPPED;  any --its group removed or failed--> FAILED
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
};

struct RunStep {
  std::optional<AttemptEnded> end_attempt;
  std::optional<RunFinished> finish;
  bool start_attempt = false;
  bool stop_workers = false;   // workers of the last attempt still run and must stop
  bool release_group = false;  // its group is live and must end (REMOVED)
};

RunStep DecideRun(const RunFacts& facts, int64_t wall_ms);

RunFacts RunFactsOf(const ClusterState& state, const Run& run);

}  // namespace torus::head
