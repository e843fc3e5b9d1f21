#include "torus/head/workloads/job_service.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/common/device_env.h"
#include "torus/common/label_selector.h"
#include "torus/head/placement/group_ops.h"
#include "torus/head/workloads/job_machine.h"
#include "torus/head/workloads/steps.h"

namespace torus::head {
namespace {

bool ValidIdChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; }

absl::Status NoJob(const std::string& id) { return absl::NotFoundError(absl::StrCat("Job ", id, " does not exist")); }

JobView ViewOf(const ClusterState& s, const Job& job) {
  JobView view{job, std::nullopt, "", job.message};
  if (const Worker* w = s.FindWorker(job.worker)) {
    view.worker = *w;
    if (const Node* n = s.FindNode(w->node)) view.node_address = n->info.address;
  }
  if (job.status == JobStatus::kPending && job.worker.empty()) view.message = PendingMessage(s, job);
  return view;
}

}  // namespace

absl::Status ValidateJobRequest(const JobRequest& r) {
  if (r.entrypoint.empty()) return absl::InvalidArgumentError("entrypoint: required, a shell command");
  if (!r.submission_id.empty() &&
      (r.submission_id.size() > 100 || !std::all_of(r.submission_id.begin(), r.submission_id.end(), ValidIdChar))) {
    return absl::InvalidArgumentError(absl::StrCat("submission_id \"", r.submission_id.substr(0, 100),
                                                   "\" is invalid; use 1-100 letters, digits, '_', '-' or '.'"));
  }
  const int64_t tpu = r.resources.GetFixed(kResourceTpu);
  if (tpu > 0) {
    absl::Status s = ValidateTpuRequest(FromFixed(tpu));
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("entrypoint_resources: ", s.message()));
  }
  for (const auto& [name, amount] : r.resources.amounts()) {
    absl::Status s = ValidateResourceName(name);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("entrypoint_resources: ", s.message()));
  }
  if (!r.label_selector.empty()) {
    auto selector = LabelSelector::Parse(r.label_selector);
    if (!selector.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("entrypoint_label_selector: ", selector.status().message()));
    }
  }
  for (const auto& [k, v] : r.env_vars) {
    if (k.empty() || k.find('=') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("runtime_env.env_vars: invalid name \"", k, "\""));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<JobId> JobService::Submit(JobRequest request) {
  if (absl::Status s = ValidateJobRequest(request); !s.ok()) return s;
  const int64_t wall = clock_->WallMillis();
  return store_->Update([&](Txn& txn) -> absl::StatusOr<JobId> {
    if (request.submission_id.empty()) {
      do {
        request.submission_id = absl::StrCat("raysubmit_", ids_->Suffix(16));
      } while (txn.state().FindJob(JobId(request.submission_id)) != nullptr);
    } else if (txn.state().FindJob(JobId(request.submission_id)) != nullptr) {
      return absl::AlreadyExistsError(absl::StrCat("Job with submission_id ", request.submission_id,
                                                   " already exists. Please use a different submission_id."));
    }
    if (absl::Status s = txn.state().CheckPackageStored("runtime_env.working_dir", request.working_dir); !s.ok()) {
      return s;
    }
    for (size_t i = 0; i < request.py_modules.size(); ++i) {
      absl::Status s =
          txn.state().CheckPackageStored(absl::StrCat("runtime_env.py_modules[", i, "]"), request.py_modules[i]);
      if (!s.ok()) return s;
    }
    Job job;
    job.id = JobId(request.submission_id);
    job.request = std::move(request);
    job.submit_time_ms = wall;
    job.message = "Job is waiting to be scheduled.";
    std::string group_error;
    if (!job.request.resources.empty()) {
      // The job's one bundle, with its selector; owned by the job from the start.
      sched::BundleRequest bundles;
      bundles.primary.bundles.push_back(job.request.resources);
      if (!job.request.label_selector.empty()) {
        bundles.primary.bundle_selectors.push_back(*LabelSelector::Parse(job.request.label_selector));
      }
      auto group = SubmitBundleGroup(txn, *ids_, std::move(bundles),
                                     NewGroup{"job:" + job.id.str(), Owner::Job(job.id), 0, wall});
      if (group.ok()) {
        job.group = *group;
      } else {
        group_error = std::string(group.status().message());
      }
    }
    const JobId id = job.id;
    spdlog::info("job {} submitted: {}", id.str(), job.request.entrypoint);
    if (absl::Status s = txn.Apply(JobSubmitted{std::move(job)}); !s.ok()) return s;
    if (!group_error.empty()) {
      txn.Apply(JobUpdated{id, JobStatus::kFailed, group_error, "JOB_SUBMISSION_ERROR", std::nullopt, wall})
          .IgnoreError();
    }
    return id;
  });
}

absl::StatusOr<JobView> JobService::Get(const std::string& id) const {
  return store_->Read([&](const ClusterState& s) -> absl::StatusOr<JobView> {
    const Job* job = s.FindJob(JobId(id));
    if (job == nullptr) return NoJob(id);
    return ViewOf(s, *job);
  });
}

std::vector<JobView> JobService::List() const {
  return store_->Read([&](const ClusterState& s) {
    std::vector<JobView> out;
    out.reserve(s.jobs().size());
    for (const auto& [id, job] : s.jobs()) out.push_back(ViewOf(s, job));
    return out;
  });
}

std::map<std::string, int> JobService::CountByStatus() const {
  std::map<std::string, int> counts;
  for (JobStatus s : {JobStatus::kPending, JobStatus::kRunning, JobStatus::kStopped, JobStatus::kSucceeded,
                      JobStatus::kFailed}) {
    counts[JobStatusName(s)] = 0;
  }
  store_->Read([&](const ClusterState& s) {
    for (const auto& [id, job] : s.jobs()) ++counts[JobStatusName(job.status)];
  });
  return counts;
}

absl::StatusOr<bool> JobService::Stop(const std::string& id) {
  std::vector<HeldBundle> release;
  auto stopped = store_->Update([&](Txn& txn) -> absl::StatusOr<bool> {
    const Job* job = txn.state().FindJob(JobId(id));
    if (job == nullptr) return NoJob(id);
    if (job->Terminal()) return false;
    txn.Apply(JobStopRequested{job->id}).IgnoreError();
    // A job that has not started is STOPPED now; a running one once its worker exits (the driver stops it).
    ApplyJobStep(txn, JobId(id), clock_->WallMillis(), release);
    return true;
  });
  scheduler_->Release(std::move(release));
  return stopped;
}

absl::Status JobService::Delete(const std::string& id) {
  return store_->Update([&](Txn& txn) {
    const Job* job = txn.state().FindJob(JobId(id));
    if (job == nullptr) return NoJob(id);
    if (!job->Terminal()) {
      return absl::FailedPreconditionError(
          absl::StrCat("Job ", id, " is ", JobStatusName(job->status), "; stop it before deleting it"));
    }
    return txn.Apply(JobDeleted{job->id});
  });
}

absl::StatusOr<LogChunk> JobService::ReadLog(const std::string& id, int64_t offset, int64_t max_bytes,
                                             int64_t wait_ms) {
  struct Where {
    std::string target;  // empty while nothing can be read: not started (yet), or it never ran
    WorkerId worker;
    bool terminal = false;
  };
  auto where = store_->Read([&](const ClusterState& s) -> absl::StatusOr<Where> {
    const Job* job = s.FindJob(JobId(id));
    if (job == nullptr) return NoJob(id);
    const Worker* w = s.FindWorker(job->worker);
    const Node* n = w == nullptr ? nullptr : s.FindNode(w->node);
    const bool ran = w != nullptr && w->pid != 0;
    return Where{n == nullptr || !ran ? "" : n->target(), job->worker, job->Terminal()};
  });
  if (!where.ok()) return where.status();
  if (where->target.empty()) return LogChunk{"", offset, where->terminal};
  auto chunk = agents_->ReadWorkerLog({.target = where->target,
                                       .worker = where->worker,
                                       .offset = offset,
                                       .max_bytes = max_bytes,
                                       .wait_ms = where->terminal ? 0 : wait_ms});
  // A finished job whose host is gone with its log reads as empty rather than fails.
  if (!chunk.ok() && where->terminal) return LogChunk{"", offset, true};
  return chunk;
}

}  // namespace torus::head
