#include "torus/head/workloads/steps.h"

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/head/placement/group_ops.h"

namespace torus::head {

JobStep ApplyJobStep(Txn& txn, const JobId& id, int64_t wall_ms, std::vector<HeldBundle>& release) {
  const Job* job = txn.state().FindJob(id);
  if (job == nullptr) return {};
  JobStep step = DecideJob(JobFactsOf(txn.state(), *job), wall_ms);
  const GroupId group = job->group;
  if (step.update) {
    spdlog::info("job {} {}: {}", id.str(), JobStatusName(step.update->status), step.update->message);
    txn.Apply(*step.update).IgnoreError();
    // A finished job gives its resources back in the same transaction.
    const Job* now = txn.state().FindJob(id);
    if (now != nullptr && now->Terminal()) step = DecideJob(JobFactsOf(txn.state(), *now), wall_ms);
  }
  if (step.release_group) {
    for (HeldBundle& b : EndGroup(txn, group, PgState::kRemoved, absl::StrCat("released: job ", id.str(), " ended"),
                                  wall_ms)) {
      release.push_back(std::move(b));
    }
  }
  return step;
}

RunStep ApplyRunStep(Txn& txn, const RunId& id, int64_t wall_ms, std::vector<HeldBundle>& release,
                     int64_t failure_window_ms) {
  const Run* run = txn.state().FindRun(id);
  if (run == nullptr) return {};
  RunStep step = DecideRun(RunFactsOf(txn.state(), *run, failure_window_ms), wall_ms);
  const GroupId group = run->group;
  if (step.explain) {
    spdlog::info("run {}: attempt {} ended: {}", id.str(), step.explain->number, step.explain->reason);
    txn.Apply(*step.explain).IgnoreError();
  }
  if (step.end_attempt) {
    spdlog::warn("run {}: attempt {} failed ({})", id.str(), step.end_attempt->number, step.end_attempt->reason);
    txn.Apply(*step.end_attempt).IgnoreError();
  }
  if (step.finish) {
    spdlog::info("run {} {}: {}", id.str(), RunStatusName(step.finish->status), step.finish->message);
    txn.Apply(*step.finish).IgnoreError();
  }
  if (step.release_group) {
    for (HeldBundle& b : EndGroup(txn, group, PgState::kRemoved, absl::StrCat("released: run ", id.str(), " ended"),
                                  wall_ms)) {
      release.push_back(std::move(b));
    }
  }
  return step;
}

}  // namespace torus::head
