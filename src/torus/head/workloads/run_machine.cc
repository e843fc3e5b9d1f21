#include "torus/head/workloads/run_machine.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "torus/head/workloads/explain.h"

namespace torus::head {
namespace {

bool AnyLive(const std::vector<const Worker*>& workers) {
  return std::any_of(workers.begin(), workers.end(),
                     [](const Worker* w) { return w != nullptr && w->phase != WorkerPhase::kExited; });
}

// Why the attempt ended, as far as is known now; kNone when nothing failed.
Explanation Why(const RunFacts& f, bool stopped) {
  Explanation e = ExplainAttempt(f.workers, stopped);
  if (e.kind == CauseKind::kNone && f.group != nullptr && f.group->state != PgState::kCreated) {
    e.kind = CauseKind::kPlacement;
    const std::string last = f.group->history.empty() ? "" : f.group->history.back().message;
    e.text = f.group->Live() ? absl::StrCat("its reservation lost a host: ", last.empty() ? "a host was lost" : last)
                             : absl::StrCat("its placement group ended: ", last.empty() ? PgStateName(f.group->state) : last);
  }
  return e;
}

// The last attempt's settled cause, when it is due.
void Explain(const RunFacts& f, int64_t wall_ms, RunStep& step) {
  const Run& run = *f.run;
  const RunAttempt* last = run.current();
  if (last == nullptr || !last->ended() || last->explained) return;
  const bool is_last_of_finished = run.Terminal() && last->end_time_ms == run.end_time_ms;
  if (is_last_of_finished && run.status == RunStatus::kSucceeded) return;
  const bool all_ended = std::all_of(f.workers.begin(), f.workers.end(),
                                     [](const Worker* w) { return w == nullptr || w->phase == WorkerPhase::kExited; });
  const int64_t window_end = last->end_time_ms + f.failure_window_ms;
  if (!all_ended && wall_ms < window_end) {
    step.wake_at_ms = window_end;
    return;
  }
  const bool stopped = is_last_of_finished && run.status == RunStatus::kStopped;
  Explanation e = Why(f, stopped);
  AttemptExplained x{run.id, last->number, CauseKindName(e.kind), e.text, e.details, "", wall_ms};
  if (e.kind == CauseKind::kNone) {
    x.reason = last->end_reason;  // nothing to add
    x.cause = last->cause;
  }
  const int max = run.spec.run.max_failures;
  if (is_last_of_finished && run.status == RunStatus::kFailed &&
      run.message == FailedRunMessage(run.failures, max, last->end_reason)) {
    x.run_message = FailedRunMessage(run.failures, max, x.reason);
  }
  step.explain = std::move(x);
}

}  // namespace

std::string FailedRunMessage(int failures, int max_failures, const std::string& reason) {
  return absl::StrCat("failed ", failures, " time", failures == 1 ? "" : "s", " (max_failures=", max_failures,
                      "); last: ", reason);
}

RunStep DecideRun(const RunFacts& f, int64_t wall_ms) {
  const Run& run = *f.run;
  const bool group_live = f.group != nullptr && f.group->Live();
  const bool workers_live = AnyLive(f.workers);
  RunStep step;
  Explain(f, wall_ms, step);
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
    const bool all_done = !f.workers.empty() && std::all_of(f.workers.begin(), f.workers.end(), [](const Worker* w) {
      return w != nullptr && w->exit && w->exit->Succeeded();
    });
    if (all_done) {
      // Every rank finished: a host lost afterwards changes nothing.
      step.finish =
          RunFinished{run.id, RunStatus::kSucceeded, absl::StrCat("all ", f.workers.size(), " workers exited 0"), wall_ms};
      step.release_group = true;
      return step;
    }
    const Explanation why = Why(f, /*stopped=*/false);
    if (why.kind == CauseKind::kNone) return step;
    step.end_attempt = AttemptEnded{run.id, attempt->number, why.text, wall_ms, CauseKindName(why.kind), why.details};
    step.stop_workers = workers_live;
    const int failures = run.failures + 1;
    const int max = run.spec.run.max_failures;
    if (max != -1 && failures > max) {
      step.finish = RunFinished{run.id, RunStatus::kFailed, FailedRunMessage(failures, max, why.text), wall_ms};
      step.release_group = true;
    }
    return step;
  }
  // No attempt runs: start the next once the group is CREATED and the last attempt's workers are gone.
  step.stop_workers = workers_live;
  if (f.group->state == PgState::kCreated) {
    step.start_attempt = !workers_live;
    return step;
  }
  // Waiting for the slices: at most placement_timeout_s from the submission, or from the last attempt's end.
  const int timeout_s = run.spec.run.placement_timeout_s;
  if (timeout_s > 0) {
    const int64_t since = attempt != nullptr ? attempt->end_time_ms : run.created_time_ms;
    const int64_t deadline = since + int64_t{timeout_s} * 1000;
    if (wall_ms >= deadline) {
      const std::string why = f.group->reason.empty() ? "no placement" : f.group->reason;
      step.finish = RunFinished{
          run.id, RunStatus::kFailed,
          attempt != nullptr
              ? absl::StrCat("its placement could not be renewed within ", timeout_s, " s: ", why, " (attempt ",
                             attempt->number, " ended: ", attempt->end_reason, ")")
              : absl::StrCat("its placement could not be made within ", timeout_s, " s: ", why),
          wall_ms};
      step.release_group = true;
    } else if (step.wake_at_ms == 0 || deadline < step.wake_at_ms) {
      step.wake_at_ms = deadline;
    }
  }
  return step;
}

RunFacts RunFactsOf(const ClusterState& state, const Run& run, int64_t failure_window_ms) {
  RunFacts f;
  f.run = &run;
  f.failure_window_ms = failure_window_ms;
  if (!run.group.empty()) f.group = state.FindGroup(run.group);
  if (const RunAttempt* a = run.current()) {
    for (const RankState& r : a->ranks) f.workers.push_back(state.FindWorker(r.worker));
  }
  return f;
}

}  // namespace torus::head
