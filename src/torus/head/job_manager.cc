#include "torus/head/job_manager.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/common/device_env.h"
#include "torus/common/label_selector.h"
#include "torus/rpc/auth.h"
#include "torus/rpc/convert.h"

namespace torus::head {
namespace {

std::string NewSubmissionId() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  auto token = rpc::GenerateToken();
  std::string id = "raysubmit_";
  const std::string& seed = token.ok() ? *token : std::to_string(time(nullptr));
  for (int i = 0; i < 16; ++i) id.push_back(kAlphabet[static_cast<unsigned char>(seed[i * 2] * 31 + seed[i * 2 + 1]) % 62]);
  return id;
}

bool ValidIdChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; }

}  // namespace

std::string JobStatusName(JobStatus s) {
  switch (s) {
    case JobStatus::kPending: return "PENDING";
    case JobStatus::kRunning: return "RUNNING";
    case JobStatus::kStopped: return "STOPPED";
    case JobStatus::kSucceeded: return "SUCCEEDED";
    case JobStatus::kFailed: return "FAILED";
  }
  return "UNKNOWN";
}

absl::Status ValidateJobRequest(const JobRequest& r) {
  if (r.entrypoint.empty()) return absl::InvalidArgumentError("entrypoint: required, a shell command");
  if (!r.submission_id.empty() &&
      (r.submission_id.size() > 100 || !std::all_of(r.submission_id.begin(), r.submission_id.end(), ValidIdChar))) {
    return absl::InvalidArgumentError(absl::StrCat("submission_id \"", r.submission_id.substr(0, 100),
                                                   "\" is invalid; use 1-100 letters, digits, '_', '-' or '.'"));
  }
  int64_t tpu = r.resources.GetFixed(kResourceTpu);
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

JobManager::JobManager(const NodeRegistry* registry, PlacementGroupManager* groups, AgentPool* agents,
                       TaskQueue* tasks, const Clock* clock, Options options)
    : registry_(registry), groups_(groups), agents_(agents), tasks_(tasks), clock_(clock), options_(std::move(options)) {}

void JobManager::SetHeadAddress(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.head_address = address;
}

absl::StatusOr<std::string> JobManager::Submit(JobRequest request) {
  if (absl::Status s = ValidateJobRequest(request); !s.ok()) return s;
  std::string id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (request.submission_id.empty()) {
      do {
        request.submission_id = NewSubmissionId();
      } while (jobs_.contains(request.submission_id));
    } else if (jobs_.contains(request.submission_id)) {
      return absl::AlreadyExistsError(absl::StrCat("Job with submission_id ", request.submission_id,
                                                   " already exists. Please use a different submission_id."));
    }
    id = request.submission_id;
    Job& job = jobs_[id];
    job.request = std::move(request);
    job.message = "Job is waiting for a node.";
  }
  const Job job = *Get(id);
  if (!job.request.resources.empty()) {
    rpc::PlacementGroupSpec spec;
    spec.set_name("job:" + id);
    rpc::BundleRequestProto* bundle = spec.add_bundles();
    rpc::ToProto(job.request.resources, bundle->mutable_resources());
    bundle->mutable_label_selector()->insert(job.request.label_selector.begin(), job.request.label_selector.end());
    auto group = groups_->CreatePlacementGroup(spec);
    std::lock_guard<std::mutex> lock(mu_);
    Job& stored = jobs_[id];
    if (!group.ok()) {
      FinishLocked(stored, JobStatus::kFailed, std::string(group.status().message()), "JOB_SUBMISSION_ERROR");
      return id;
    }
    stored.group_id = group->id();
    stored.message = "Job is waiting for resources: " + group->reason();
    job_of_group_[group->id()] = id;
    // The group may already be CREATED by now; the state listener covers later changes.
    if (group->state() == "CREATED") tasks_->Post([this, id] { Launch(id); });
  } else {
    tasks_->Post([this] { TryPlaceUnreserved(); });
  }
  spdlog::info("job {} submitted: {}", id, job.request.entrypoint);
  return id;
}

absl::StatusOr<Job> JobManager::Get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("Job ", id, " does not exist"));
  return it->second;
}

std::map<std::string, int> JobManager::CountByStatus() const {
  std::map<std::string, int> counts;
  for (JobStatus s : {JobStatus::kPending, JobStatus::kRunning, JobStatus::kStopped, JobStatus::kSucceeded,
                      JobStatus::kFailed}) {
    counts[JobStatusName(s)] = 0;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, job] : jobs_) ++counts[JobStatusName(job.status)];
  return counts;
}

std::vector<Job> JobManager::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Job> out;
  for (const auto& [id, job] : jobs_) out.push_back(job);
  return out;
}

void JobManager::FinishLocked(Job& job, JobStatus status, const std::string& message, const std::string& error_type) {
  if (job.Terminal()) return;
  job.status = status;
  job.message = message;
  job.error_type = error_type;
  job.end_time_ms = clock_->WallMillis();
  if (!job.group_id.empty()) {
    std::string group = job.group_id;
    tasks_->Post([this, group] { ReleaseGroup(group); });
  }
  spdlog::info("job {} {}: {}", job.request.submission_id, JobStatusName(status), message);
}

void JobManager::ReleaseGroup(const std::string& group_id) { groups_->Remove(group_id).IgnoreError(); }

absl::StatusOr<bool> JobManager::Stop(const std::string& id) {
  std::string target, worker;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("Job ", id, " does not exist"));
    Job& job = it->second;
    if (job.Terminal()) return false;
    job.stop_requested = true;
    if (job.status == JobStatus::kPending) {
      FinishLocked(job, JobStatus::kStopped, "Job was stopped before it started.", "");
      return true;
    }
    target = job.target;
    worker = job.worker_id();
  }
  // The exit report turns the job STOPPED.
  tasks_->Post([this, target, worker] {
    absl::Status s = agents_->StopWorker(target, worker, options_.stop_grace_ms);
    if (!s.ok()) spdlog::warn("stop of {} on {} failed: {}", worker, target, std::string(s.message()));
  });
  return true;
}

absl::Status JobManager::Delete(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("Job ", id, " does not exist"));
  if (!it->second.Terminal()) {
    return absl::FailedPreconditionError(absl::StrCat("Job ", id, " is ", JobStatusName(it->second.status),
                                                      "; stop it before deleting it"));
  }
  if (!it->second.group_id.empty()) job_of_group_.erase(it->second.group_id);
  jobs_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<rpc::ReadWorkerLogReply> JobManager::ReadLog(const std::string& id, int64_t offset, int64_t max_bytes) {
  std::string target, worker;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("Job ", id, " does not exist"));
    if (it->second.target.empty() || (it->second.pid == 0 && !it->second.Terminal())) {  // not started (yet)
      rpc::ReadWorkerLogReply empty;
      empty.set_next_offset(offset);
      empty.set_finished(it->second.Terminal());
      return empty;
    }
    target = it->second.target;
    worker = it->second.worker_id();
  }
  return agents_->ReadWorkerLog(target, worker, offset, max_bytes);
}

void JobManager::OnGroupState(const std::string& group_id, PgState state) {
  std::string id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = job_of_group_.find(group_id);
    if (it == job_of_group_.end()) return;
    id = it->second;
    auto job = jobs_.find(id);
    if (job == jobs_.end() || job->second.Terminal()) return;
    if (state == PgState::kFailed || state == PgState::kRemoved) {
      if (job->second.status == JobStatus::kPending) {
        FinishLocked(job->second, JobStatus::kFailed, "The job's resources were released before it started.",
                     "JOB_SUPERVISOR_ACTOR_START_FAILURE");
      } else if (job->second.status == JobStatus::kRunning) {
        // Its reservation is gone (a user removed the group): the entrypoint must not run on unreserved resources.
        std::string target = job->second.target, worker = job->second.worker_id();
        FinishLocked(job->second, JobStatus::kFailed, "The job's reserved resources were released.",
                     "JOB_SUPERVISOR_ACTOR_DIED");
        tasks_->Post([this, target, worker] { agents_->StopWorker(target, worker, options_.stop_grace_ms).IgnoreError(); });
      }
      return;
    }
    if (state != PgState::kCreated || job->second.status != JobStatus::kPending) return;
  }
  tasks_->Post([this, id] { Launch(id); });
}

void JobManager::OnClusterChanged() {
  {
    // Registrations arrive in bursts (a 10,000-node cluster starting); place at most once per burst, and only when
    // a job is waiting for a node.
    std::lock_guard<std::mutex> lock(mu_);
    if (placement_queued_) return;
    bool waiting = std::any_of(jobs_.begin(), jobs_.end(), [](const auto& kv) {
      return kv.second.status == JobStatus::kPending && kv.second.request.resources.empty() && kv.second.target.empty();
    });
    if (!waiting) return;
    placement_queued_ = true;
  }
  tasks_->Post([this] { TryPlaceUnreserved(); });
}

void JobManager::TryPlaceUnreserved() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    placement_queued_ = false;
  }
  // Jobs that reserve nothing run on the head host's agent when it matches their selector, else on the lowest-id
  // alive node that does.
  std::vector<NodeRecord> nodes = registry_->Records(/*include_dead=*/false);
  std::stable_partition(nodes.begin(), nodes.end(),
                        [&](const NodeRecord& n) { return n.info.address == options_.head_host; });
  std::vector<std::string> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, job] : jobs_) {
      if (job.status != JobStatus::kPending || !job.request.resources.empty() || !job.target.empty()) continue;
      auto selector = LabelSelector::Parse(job.request.label_selector);
      if (!selector.ok()) continue;  // validated at submission
      for (const NodeRecord& n : nodes) {
        if (!selector->Matches(n.info.labels)) continue;
        job.node_id = n.info.node_id;
        job.node_address = n.info.address;
        job.target = absl::StrCat(n.info.address, ":", n.info.agent_port);
        ready.push_back(id);
        break;
      }
      if (job.target.empty()) job.message = "Job is waiting for a node that matches its label selector.";
    }
  }
  for (const std::string& id : ready) Launch(id);
}

void JobManager::Launch(const std::string& id) {
  rpc::StartWorkerRequest request;
  std::string target;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second.Terminal() || it->second.status != JobStatus::kPending) return;
    Job& job = it->second;
    if (!job.group_id.empty()) {
      auto group = groups_->Get(job.group_id);
      if (!group.ok() || group->state() != "CREATED" || group->bundles_size() == 0) return;
      const rpc::PlacedBundle& bundle = group->bundles(0);
      job.node_id = bundle.node_id();
      job.node_address = bundle.address();
      for (const NodeRecord& n : registry_->Records(false)) {
        if (n.info.node_id == job.node_id) job.target = absl::StrCat(n.info.address, ":", n.info.agent_port);
      }
    }
    if (job.target.empty()) return;
    target = job.target;
    request.set_worker_id(job.worker_id());
    request.set_owner("job:" + id);
    request.add_argv("/bin/sh");
    request.add_argv("-c");
    request.add_argv(job.request.entrypoint);
    request.set_cwd(job.request.working_dir);
    auto& env = *request.mutable_env_set();
    for (const auto& [k, v] : job.request.env_vars) env[k] = v;
    // Set after the job's own variables: the job id tags the job's metrics and logs, and cannot be claimed.
    env["TORUS_JOB_ID"] = id;
    env["TORUS_ADDRESS"] = options_.head_address;
    env["TORUS_TOKEN"] = options_.token;
    env.erase("TORUS_RUN_ID");
    env.erase("TORUS_RANK");
    // A job that asked for TPU chips sees only the aligned block it was given (tpu.md §4); this wins over its env.
    const int64_t tpu = job.request.resources.GetFixed(kResourceTpu) / kResourceScale;
    if (tpu > 0) {
      absl::Status isolated = IsolateChipsLocked(job, static_cast<int>(tpu), request);
      if (!isolated.ok()) {
        FinishLocked(job, JobStatus::kFailed, std::string(isolated.message()), "JOB_ENTRYPOINT_COMMAND_START_ERROR");
        return;
      }
    }
  }
  auto started = agents_->StartWorker(target, request);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  Job& job = it->second;
  if (!started.ok()) {
    FinishLocked(job, JobStatus::kFailed, absl::StrCat("Job entrypoint failed to start: ", started.status().message()),
                 "JOB_ENTRYPOINT_COMMAND_START_ERROR");
    return;
  }
  // A quick entrypoint may have exited (and been reported) before this reply; it still ran here.
  job.pid = started->pid();
  job.start_time_ms = clock_->WallMillis();
  if (job.Terminal()) {
    if (job.end_time_ms > 0) job.start_time_ms = std::min(job.start_time_ms, job.end_time_ms);
    return;
  }
  job.status = JobStatus::kRunning;
  job.message = "Job is currently running.";
  spdlog::info("job {} running on node {} (pid {})", id, job.node_id, job.pid);
}

absl::Status JobManager::IsolateChipsLocked(Job& job, int k, rpc::StartWorkerRequest& request) {
  const NodeRecord* node = nullptr;
  std::vector<NodeRecord> records = registry_->Records(/*include_dead=*/false);
  for (const NodeRecord& r : records) {
    if (r.info.node_id == job.node_id) node = &r;
  }
  if (node == nullptr) return absl::UnavailableError(absl::StrCat("node ", job.node_id, " is gone"));
  const int host_chips = static_cast<int>(node->info.total.GetFixed(kResourceTpu) / kResourceScale);
  auto type = node->info.labels.find("torus.io/accelerator-type");
  auto gen = ParseAcceleratorType(type == node->info.labels.end() ? "" : type->second);
  if (!gen.ok() || host_chips == 0) {
    return absl::FailedPreconditionError(absl::StrCat("node ", job.node_id, " has no TPU chips to isolate"));
  }
  std::vector<bool> busy(host_chips, false);
  for (int chip : groups_->BusyChips(job.node_id)) {
    if (chip >= 0 && chip < host_chips) busy[chip] = true;
  }
  for (const auto& [other_id, other] : jobs_) {
    if (other_id == job.request.submission_id || other.Terminal() || other.node_id != job.node_id) continue;
    for (int chip : other.chips) {
      if (chip >= 0 && chip < host_chips) busy[chip] = true;
    }
  }
  auto chips = AllocateChipBlock(busy, std::min(k, host_chips));
  if (!chips.ok()) return chips.status();
  auto env = TpuIsolationEnv(*gen, host_chips, *chips);
  if (!env.ok()) return env.status();
  job.chips = *chips;
  for (int chip : *chips) request.add_chips(chip);
  for (const auto& [key, value] : env->set) (*request.mutable_env_set())[key] = value;
  for (const std::string& key : env->unset) request.add_env_unset(key);
  return absl::OkStatus();
}

void JobManager::OnWorkerExited(const std::string& node_id, const std::string& worker_id, int exit_code,
                                int signal) {
  std::lock_guard<std::mutex> lock(mu_);
  if (worker_id.rfind("job-", 0) != 0) return;
  auto it = jobs_.find(worker_id.substr(4));
  if (it == jobs_.end() || it->second.Terminal()) return;
  Job& job = it->second;
  if (signal == 0) job.exit_code = exit_code;
  if (job.stop_requested) {
    FinishLocked(job, JobStatus::kStopped, "Job was intentionally stopped.", "");
  } else if (signal == 0 && exit_code == 0) {
    FinishLocked(job, JobStatus::kSucceeded, "Job finished successfully.", "");
  } else if (signal != 0) {
    FinishLocked(job, JobStatus::kFailed, absl::StrCat("Job entrypoint was killed by signal ", signal, "."),
                 "JOB_ENTRYPOINT_COMMAND_ERROR");
  } else {
    FinishLocked(job, JobStatus::kFailed,
                 absl::StrCat("Job entrypoint command failed with exit code ", exit_code, "."),
                 "JOB_ENTRYPOINT_COMMAND_ERROR");
  }
}

void JobManager::OnNodeDead(const std::string& node_id) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, job] : jobs_) {
    if (job.Terminal() || job.node_id != node_id || job.status != JobStatus::kRunning) continue;
    FinishLocked(job, JobStatus::kFailed, absl::StrCat("The node running the job (", node_id, ") died."),
                 "NODE_DIED");
  }
}

}  // namespace torus::head
