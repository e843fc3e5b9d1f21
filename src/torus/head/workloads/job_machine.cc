#include "torus/head/workloads/job_machine.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "torus/head/workloads/explain.h"

namespace torus::head {
namespace {

JobUpdated Update(const Job& job, JobStatus status, std::string message, std::string error_type, int64_t wall_ms) {
  return JobUpdated{job.id, status, std::move(message), std::move(error_type), std::nullopt, wall_ms};
}

// Ray's job messages, with what torus knows of the cause.
constexpr size_t kMaxLogChars = 20'000;

std::string LastLogs(const std::string& tail) {
  return tail.empty() ? "" : absl::StrCat(", last available logs (truncated to 20,000 chars):\n",
                                          tail.substr(tail.size() > kMaxLogChars ? tail.size() - kMaxLogChars : 0));
}

// The terminal update for a job whose worker exited.
JobUpdated Ended(const Job& job, const Worker& worker, bool node_alive, int64_t wall_ms) {
  const WorkerExit& exit = *worker.exit;
  JobUpdated u;
  if (job.stop_requested) {
    u = Update(job, JobStatus::kStopped, "Job was intentionally stopped.", "", wall_ms);
  } else if (exit.start_failed) {
    u = Update(job, JobStatus::kFailed, absl::StrCat("Job entrypoint failed to start: ", exit.reason),
               "JOB_ENTRYPOINT_COMMAND_START_ERROR", wall_ms);
  } else if (exit.lost) {
    u = node_alive ? Update(job, JobStatus::kFailed, absl::StrCat("The job's entrypoint was lost: ", exit.reason),
                            "JOB_SUPERVISOR_ACTOR_DIED", wall_ms)
                   : Update(job, JobStatus::kFailed,
                            absl::StrCat("The node running the job (", worker.node.str(), ") died: ",
                                         absl::StripPrefix(exit.reason, absl::StrCat("node ", worker.node.str(),
                                                                                     " died: ")),
                                         "."),
                            "NODE_DIED", wall_ms);
  } else if (exit.signal != 0) {
    u = Update(job, JobStatus::kFailed,
               absl::StrCat(exit.stopped    ? absl::StrCat("Job entrypoint was stopped by torus (signal ", exit.signal, ")")
                            : exit.oom_killed ? absl::StrCat("Job entrypoint was killed by the kernel's OOM killer (peak RSS ",
                                                           HumanBytes(exit.peak_rss_bytes), ")")
                                            : absl::StrCat("Job entrypoint was killed by signal ", exit.signal,
                                                           " from outside torus"),
                            exit.output_tail.empty() ? "." : LastLogs(exit.output_tail)),
               "JOB_ENTRYPOINT_COMMAND_ERROR", wall_ms);
  } else if (exit.exit_code != 0) {
    const std::string accelerator =
        exit.accelerator_error.empty() ? "" : absl::StrCat(" after an accelerator error: ", exit.accelerator_error);
    u = Update(job, JobStatus::kFailed,
               absl::StrCat("Job entrypoint command failed with exit code ", exit.exit_code, accelerator,
                            exit.output_tail.empty() ? "." : LastLogs(exit.output_tail)),
               "JOB_ENTRYPOINT_COMMAND_ERROR", wall_ms);
  } else {
    u = Update(job, JobStatus::kSucceeded, "Job finished successfully.", "", wall_ms);
  }
  if (!exit.lost && !exit.start_failed && exit.signal == 0) u.exit_code = exit.exit_code;
  return u;
}

}  // namespace

bool JobStep::operator==(const JobStep& o) const {
  auto same_update = [](const std::optional<JobUpdated>& a, const std::optional<JobUpdated>& b) {
    if (a.has_value() != b.has_value()) return false;
    if (!a) return true;
    return a->job == b->job && a->status == b->status && a->message == b->message &&
           a->error_type == b->error_type && a->exit_code == b->exit_code && a->wall_ms == b->wall_ms;
  };
  return same_update(update, o.update) && start == o.start && stop_worker == o.stop_worker &&
         release_group == o.release_group;
}

JobStep DecideJob(const JobFacts& f, int64_t wall_ms) {
  const Job& job = *f.job;
  const bool group_live = f.group != nullptr && f.group->Live();
  const bool worker_live = f.worker != nullptr && f.worker->phase != WorkerPhase::kExited;
  JobStep step;
  if (job.Terminal()) {
    step.release_group = group_live;
    step.stop_worker = worker_live;
    return step;
  }
  if (f.worker != nullptr) {
    if (!worker_live) {
      step.update = Ended(job, *f.worker, f.worker_node_alive, wall_ms);
      step.release_group = group_live;
      return step;
    }
    if (!job.group.empty() && !group_live) {
      // Its reservation is gone (a user removed the group): the entrypoint must not run on unreserved resources.
      step.update = Update(job, JobStatus::kFailed, "The job's reserved resources were released.",
                           "JOB_SUPERVISOR_ACTOR_DIED", wall_ms);
      step.stop_worker = true;
      return step;
    }
    if (job.stop_requested) {
      step.stop_worker = true;  // the exit makes it STOPPED
      return step;
    }
    if (f.worker->phase == WorkerPhase::kRunning && job.status == JobStatus::kPending) {
      step.update = Update(job, JobStatus::kRunning, "Job is currently running.", "", wall_ms);
    }
    return step;
  }
  if (job.stop_requested) {
    step.update = Update(job, JobStatus::kStopped, "Job was stopped before it started.", "", wall_ms);
    step.release_group = group_live;
    return step;
  }
  if (!job.group.empty()) {
    if (!group_live) {
      step.update = Update(job, JobStatus::kFailed, "The job's resources were released before it started.",
                           "JOB_SUPERVISOR_ACTOR_START_FAILURE", wall_ms);
      return step;
    }
    step.start = f.group->state == PgState::kCreated;
    return step;
  }
  step.start = true;  // on a node the driver picks, when one matches
  return step;
}

JobFacts JobFactsOf(const ClusterState& state, const Job& job) {
  JobFacts f;
  f.job = &job;
  if (!job.group.empty()) f.group = state.FindGroup(job.group);
  if (!job.worker.empty()) f.worker = state.FindWorker(job.worker);
  if (f.worker != nullptr) {
    const Node* n = state.FindNode(f.worker->node);
    f.worker_node_alive = n != nullptr && n->alive();
  }
  return f;
}

std::string PendingMessage(const ClusterState& state, const Job& job) {
  if (!job.group.empty()) {
    const Group* g = state.FindGroup(job.group);
    return absl::StrCat("Job is waiting for resources: ", g == nullptr ? "its group was forgotten" : g->reason);
  }
  if (job.request.label_selector.empty()) return "Job is waiting for a node.";
  return "Job is waiting for a node that matches its label selector.";
}

}  // namespace torus::head
