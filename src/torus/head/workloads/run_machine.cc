#include "torus/head/workloads/run_machine.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace torus::head {
namespace {

bool AnyLive(const std::vector<const Worker*>& workers) {
  return std::any_of(workers.begin(), workers.end(),
                     [](const Worker* w) { return w != nullptr && w->phase != WorkerPhase::kExited; });
}

// Why the attempt failed, from its workers: the earliest failure (by exit time, then rank).
std::optional<std::string> FirstFailure(const std::vector<const Worker*>& workers) {
  const Worker* first = nullptr;
  for (const Worker* w : workers) {
    if (w == nullptr || !w->exit || w->exit->Succeeded()) continue;
    if (first == nullptr || w->exit->wall_ms < first->exit->wall_ms) first = w;
  }
  if (first == nullptr) return std::nullopt;
  return absl::StrCat("rank ", first->rank, " on ", first->node.str(), " ", first->exit->Describe());
}

}  // namespace

RunStep DecideRun(const RunFacts& f, int64_t wall_ms) {
  const Run& run = *f.run;
  const bool group_live = f.group != nullptr && f.group->Live();
  const bool workers_live = AnyLive(f.workers);
  RunStep step;
  if (run.Terminal()) {
    step.stop_workers = workers_live;
    step.release_group = group_live;
    return step;
  }
  if (run.stop_requested) {
    step.finish = RunFinished{run.id, RunStatus::kStopped, "stopped by the user", wall_ms};
    step.stop_workers = workers_live;
    step.release_group = group_live;
    return step;
  }
  if (!group_live) {
    // Whatever removed the group (a user's `torus pg remove`), the workers lose their reservation.
    step.finish = RunFinished{run.id, RunStatus::kFailed, "the run's placement group was removed", wall_ms};
    step.stop_workers = workers_live;
    return step;
  }
  const RunAttempt* attempt = run.current();
  if (attempt != nullptr && !attempt->ended()) {
    std::optional<std::string> reason = FirstFailure(f.workers);
    const bool all_done = !f.workers.empty() && std::all_of(f.workers.begin(), f.workers.end(), [](const Worker* w) {
      return w != nullptr && w->exit && w->exit->Succeeded();
    });
    if (!reason && all_done) {
      // Every rank finished: a host lost afterwards changes nothing.
      step.finish =
          RunFinished{run.id, RunStatus::kSucceeded, absl::StrCat("all ", f.workers.size(), " workers exited 0"), wall_ms};
      step.release_group = true;
      return step;
    }
    if (!reason && f.group->state != PgState::kCreated) {
      reason = absl::StrCat("host lost: ", f.group->history.empty() ? "a host was lost" : f.group->history.back().message);
    }
    if (!reason) return step;
    step.end_attempt = AttemptEnded{run.id, attempt->number, *reason, wall_ms};
    step.stop_workers = workers_live;
    const int failures = run.failures + 1;
    const int max = run.spec.run.max_failures;
    if (max != -1 && failures > max) {
      step.finish = RunFinished{run.id, RunStatus::kFailed,
                                absl::StrCat("failed ", failures, " time", failures == 1 ? "" : "s",
                                             " (max_failures=", max, "); last: ", *reason),
                                wall_ms};
      step.release_group = true;
    }
    return step;
  }
  // No attempt runs: start the next once the group is CREATED and the last attempt's workers are gone.
  step.stop_workers = workers_live;
  step.start_attempt = f.group->state == PgState::kCreated && !workers_live;
  return step;
}

RunFacts RunFactsOf(const ClusterState& state, const Run& run) {
  RunFacts f;
  f.run = &run;
  if (!run.group.empty()) f.group = state.FindGroup(run.group);
  if (const RunAttempt* a = run.current()) {
    for (const RankState& r : a->ranks) f.workers.push_back(state.FindWorker(r.worker));
  }
  return f;
}

}  // namespace torus::head
