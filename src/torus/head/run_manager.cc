#include "torus/head/run_manager.h"

#include <filesystem>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"
#include "torus/rpc/auth.h"
#include "torus/rpc/convert.h"
#include "torus/sched/slices.h"
#include "torus/train/checkpoints.h"
#include "torus/train/env_builder.h"

namespace torus::head {
namespace {

std::string Describe(int exit_code, int signal) {
  return signal != 0 ? absl::StrCat("was killed by signal ", signal) : absl::StrCat("exited with code ", exit_code);
}

}  // namespace

std::string RunStatusName(RunStatus s) {
  switch (s) {
    case RunStatus::kPending: return "PENDING";
    case RunStatus::kRunning: return "RUNNING";
    case RunStatus::kRestarting: return "RESTARTING";
    case RunStatus::kSucceeded: return "SUCCEEDED";
    case RunStatus::kFailed: return "FAILED";
    case RunStatus::kStopped: return "STOPPED";
  }
  return "UNKNOWN";
}

RunManager::RunManager(const NodeRegistry* registry, PlacementGroupManager* groups, AgentPool* agents,
                       TaskQueue* tasks, const Clock* clock, Options options)
    : registry_(registry), groups_(groups), agents_(agents), tasks_(tasks), clock_(clock), options_(std::move(options)) {}

void RunManager::SetReportBaseUrl(const std::string& url) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.report_base_url = url;
}

Run* RunManager::FindLocked(const std::string& id_or_name) {
  auto it = runs_.find(id_or_name);
  if (it != runs_.end()) return &it->second;
  Run* latest = nullptr;  // by name: the newest run of that name
  for (auto& [id, run] : runs_) {
    if (run.spec.run.name == id_or_name && (latest == nullptr || run.created_time_ms >= latest->created_time_ms)) {
      latest = &run;
    }
  }
  return latest;
}

const Run* RunManager::FindLocked(const std::string& id_or_name) const {
  return const_cast<RunManager*>(this)->FindLocked(id_or_name);
}

absl::StatusOr<std::string> RunManager::Submit(train::RunSpec spec) {
  spec = train::ApplyRunDefaults(std::move(spec));
  auto plan = train::PlanRun(spec);
  if (!plan.ok()) return plan.status();
  auto token = rpc::GenerateToken();
  if (!token.ok()) return token.status();
  std::string id = absl::StrCat("run-", token->substr(0, 10));
  auto run_token = rpc::GenerateToken();
  if (!run_token.ok()) return run_token.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    Run& run = runs_[id];
    run.id = id;
    run.spec = spec;
    run.plan = *plan;
    run.token = *run_token;
    run.created_time_ms = clock_->WallMillis();
    run.message = "waiting for resources";
  }
  std::error_code ec;
  std::filesystem::create_directories(spec.run.storage_path + "/" + spec.run.name, ec);
  auto group = plan->tpu ? groups_->SubmitSlices(plan->slice_request, "run:" + id)
                         : groups_->SubmitBundles(plan->bundle_request, "run:" + id);
  std::lock_guard<std::mutex> lock(mu_);
  Run& run = runs_[id];
  if (!group.ok()) {
    FinishLocked(run, RunStatus::kFailed, std::string(group.status().message()));
    return group.status();
  }
  run.group_id = group->id();
  run_of_group_[group->id()] = id;
  // Resume across runs of the same name: what an earlier run committed counts.
  run.committed = train::ListCommitted(run.storage());
  spdlog::info("run {} ({}) submitted: {} workers, group {}", id, spec.run.name, plan->num_workers, group->id());
  if (group->state() == "CREATED") tasks_->Post([this, id] { StartAttempt(id); });
  return id;
}

void RunManager::FinishLocked(Run& run, RunStatus status, const std::string& message) {
  if (run.Terminal()) return;
  run.status = status;
  run.message = message;
  run.end_time_ms = clock_->WallMillis();
  if (!run.attempts.empty() && run.attempts.back().end_time_ms == 0) {
    run.attempts.back().end_time_ms = run.end_time_ms;
    run.attempts.back().end_reason = message;
  }
  if (!run.group_id.empty()) {
    std::string group = run.group_id;
    tasks_->Post([this, group] { groups_->Remove(group).IgnoreError(); });
  }
  spdlog::info("run {} {}: {}", run.id, RunStatusName(status), message);
}

void RunManager::OnGroupState(const std::string& group_id, PgState state) {
  std::string id;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = run_of_group_.find(group_id);
  if (it == run_of_group_.end()) return;
  id = it->second;
  Run& run = runs_[id];
  if (run.Terminal()) return;
  if (state == PgState::kCreated && (run.status == RunStatus::kPending || run.status == RunStatus::kRestarting)) {
    tasks_->Post([this, id] { StartAttempt(id); });
  } else if ((state == PgState::kRescheduling || state == PgState::kPending) && run.status == RunStatus::kRunning) {
    const int attempt = run.attempts.empty() ? 0 : run.attempts.back().number;
    auto view = groups_->Get(group_id);
    std::string why = view.ok() && !view->history().empty() ? view->history().rbegin()->message() : "a host was lost";
    tasks_->Post([this, id, attempt, why] { FailAttempt(id, attempt, absl::StrCat("host lost: ", why)); });
  } else if (state == PgState::kFailed || state == PgState::kRemoved) {
    // Whatever removed the group (a user's `torus pg remove`), the workers lose their reservation: stop them.
    if (!run.attempts.empty()) {
      std::set<std::string> targets;
      for (const RankState& r : run.attempts.back().ranks) targets.insert(r.target);
      std::string owner = absl::StrCat("run:", run.id, ":a", run.attempts.back().number);
      tasks_->Post([this, targets, owner] {
        agents_->StopOwner({targets.begin(), targets.end()}, owner, options_.stop_grace_ms);
      });
    }
    FinishLocked(run, run.stop_requested ? RunStatus::kStopped : RunStatus::kFailed,
                 run.stop_requested ? "stopped" : "the run's placement group was removed");
  }
}

void RunManager::StartAttempt(const std::string& id) {
  // Snapshot what the attempt needs, without the lock.
  std::string group_id;
  train::GangEnvInput input;
  train::RunSpec spec;
  int attempt_number = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Run* run = FindLocked(id);
    if (run == nullptr || run->Terminal() ||
        (run->status != RunStatus::kPending && run->status != RunStatus::kRestarting)) {
      return;
    }
    group_id = run->group_id;
    spec = run->spec;
    attempt_number = static_cast<int>(run->attempts.size()) + 1;
    input.run_id = run->id;
    input.run_name = spec.run.name;
    input.attempt = attempt_number;
    input.storage_path = run->storage();
    input.checkpoint_dir = run->committed.empty() ? "" : run->committed.back().second;
    input.report_url = absl::StrCat(options_.report_base_url, "/api/v0/runs/", run->id, "/report");
    input.run_token = run->token;
    input.use_gpu = spec.scaling.use_gpu;
    input.user_env = spec.env;
  }
  auto group = groups_->Get(group_id);
  if (!group.ok() || group->state() != "CREATED") return;  // the group's next CREATED starts us

  std::map<std::string, const NodeRecord*> nodes;
  std::vector<NodeRecord> records = registry_->Records(/*include_dead=*/false);
  for (const NodeRecord& r : records) nodes[r.info.node_id] = &r;
  std::vector<std::string> targets;
  // GPU indices in use per node by the other runs' live workers; this attempt takes the lowest free ones.
  std::map<std::string, std::set<int>> gpus_in_use;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [other_id, other] : runs_) {
      if (other_id == id || other.Terminal() || other.attempts.empty()) continue;
      for (const RankState& r : other.attempts.back().ranks) {
        if (!r.exited) gpus_in_use[r.node_id].insert(r.gpus.begin(), r.gpus.end());
      }
    }
  }
  for (const rpc::PlacedBundle& b : group->bundles()) {
    auto node = nodes.find(b.node_id());
    if (node == nodes.end()) return;  // died since; the group will be rescheduled
    train::RankPlacement p;
    p.node_id = b.node_id();
    p.address = b.address();
    p.slice_name = b.slice_name();
    if (!b.slice_name().empty()) {
      auto pos = std::find(group->slices().begin(), group->slices().end(), b.slice_name());
      p.slice_index = static_cast<int>(pos - group->slices().begin());
      p.tpu_worker_id = b.worker_id();
      p.chips.assign(b.chips().begin(), b.chips().end());
      p.host_chips = static_cast<int>(node->second->info.total.GetFixed(kResourceTpu) / kResourceScale);
      auto gen = ParseAcceleratorType(node->second->info.labels.contains("torus.io/accelerator-type")
                                          ? node->second->info.labels.at("torus.io/accelerator-type")
                                          : "");
      if (gen.ok()) input.tpu_generation = *gen;
    }
    auto gpus = b.resources().find("GPU");
    if (gpus != b.resources().end()) {
      std::set<int>& used = gpus_in_use[b.node_id()];
      for (int64_t g = 0, index = 0; g < gpus->second / kResourceScale; ++g) {
        while (used.contains(index)) ++index;
        used.insert(index);
        p.gpus.push_back(index);
      }
    }
    input.ranks.push_back(std::move(p));
    targets.push_back(absl::StrCat(node->second->info.address, ":", node->second->info.agent_port));
  }
  if (input.tpu_generation) {
    std::map<std::string, std::vector<std::string>> hosts_of_slice;
    for (const sched::Slice& s : sched::BuildSlices(registry_->Snapshot(/*include_dead=*/false))) {
      for (const sched::SliceHost& h : s.hosts) {
        if (h.worker_id >= 0) hosts_of_slice[s.name].push_back(h.address);
      }
    }
    for (const std::string& s : group->slices()) input.slice_hosts.push_back(hosts_of_slice[s]);
  }
  if (input.ranks.empty()) return;
  auto master = agents_->FreePort(targets[0]);
  auto jax = agents_->FreePort(targets[0]);
  for (int i = 0; jax.ok() && master.ok() && *jax == *master && i < 5; ++i) jax = agents_->FreePort(targets[0]);
  if (!master.ok() || !jax.ok()) {
    tasks_->Post([this, id, attempt_number] {
      FailAttempt(id, attempt_number, "cannot get a free port on rank 0's host");
    });
    return;
  }
  input.master_port = *master;
  input.jax_port = *jax;
  auto envs = train::BuildGangEnv(input);
  std::string owner = absl::StrCat("run:", id, ":a", attempt_number);
  std::vector<std::pair<std::string, rpc::StartWorkerRequest>> starts;
  RunAttempt attempt;
  attempt.number = attempt_number;
  attempt.start_time_ms = clock_->WallMillis();
  attempt.checkpoint_dir = input.checkpoint_dir;
  if (envs.ok()) {
    for (size_t r = 0; r < input.ranks.size(); ++r) {
      rpc::StartWorkerRequest request;
      request.set_worker_id(absl::StrCat(id, "-a", attempt_number, "-r", r));
      request.set_owner(owner);
      for (const std::string& arg : spec.entrypoint) request.add_argv(arg);
      request.set_cwd(spec.working_dir);
      auto& env = *request.mutable_env_set();
      env.insert((*envs)[r].set.begin(), (*envs)[r].set.end());
      for (const std::string& k : (*envs)[r].unset) request.add_env_unset(k);
      if (!options_.python_path.empty()) {
        auto user = spec.env.find("PYTHONPATH");
        env["PYTHONPATH"] = user == spec.env.end() ? options_.python_path
                                                   : absl::StrCat(options_.python_path, ":", user->second);
      }
      RankState rank;
      rank.rank = static_cast<int>(r);
      rank.node_id = input.ranks[r].node_id;
      rank.address = input.ranks[r].address;
      rank.target = targets[r];
      rank.worker_id = request.worker_id();
      rank.slice_name = input.ranks[r].slice_name;
      rank.chips = input.ranks[r].chips;
      rank.gpus = input.ranks[r].gpus;
      for (int chip : rank.chips) request.add_chips(chip);
      attempt.ranks.push_back(rank);
      starts.emplace_back(targets[r], std::move(request));
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    Run* run = FindLocked(id);
    if (run == nullptr || run->Terminal()) return;
    if (!envs.ok()) {
      FinishLocked(*run, RunStatus::kFailed, absl::StrCat("cannot build the workers' environment: ",
                                                          envs.status().message()));
      return;
    }
    run->attempts.push_back(attempt);
    run->reports.clear();
    run->status = RunStatus::kRunning;
    run->message = absl::StrCat("attempt ", attempt_number, ": ", input.ranks.size(), " workers",
                                input.checkpoint_dir.empty() ? "" : " from " + input.checkpoint_dir);
  }
  auto started = agents_->StartWorkers(starts);
  std::string failure;
  for (size_t r = 0; r < started.size() && failure.empty(); ++r) {
    if (!started[r].ok()) failure = absl::StrCat("rank ", r, " failed to start: ", started[r].status().message());
  }
  spdlog::info("run {} attempt {}: started {} workers{}", id, attempt_number, started.size(),
               failure.empty() ? "" : " (" + failure + ")");
  if (!failure.empty()) FailAttempt(id, attempt_number, failure);
}

void RunManager::OnWorkerExited(const std::string& node_id, const std::string& worker_id, int exit_code,
                                int signal) {
  std::lock_guard<std::mutex> lock(mu_);
  // Worker ids are "<run id>-a<attempt>-r<rank>".
  size_t a = worker_id.rfind("-a");
  if (a == std::string::npos) return;
  Run* run = FindLocked(worker_id.substr(0, a));
  if (run == nullptr) return;
  for (RunAttempt& attempt : run->attempts) {
    for (RankState& rank : attempt.ranks) {
      if (rank.worker_id == worker_id) {
        rank.exited = true;
        rank.exit_code = exit_code;
        rank.signal = signal;
      }
    }
  }
  if (run->Terminal() || run->attempts.empty()) return;
  RunAttempt& attempt = run->attempts.back();
  for (RankState& rank : attempt.ranks) {
    if (rank.worker_id != worker_id) continue;
    if (run->status != RunStatus::kRunning) return;  // already stopping this attempt
    if (signal != 0 || exit_code != 0) {
      std::string id = run->id;
      int number = attempt.number;
      std::string reason = absl::StrCat("rank ", rank.rank, " on ", node_id, " ", Describe(exit_code, signal));
      tasks_->Post([this, id, number, reason] { FailAttempt(id, number, reason); });
      return;
    }
    bool all_done = std::all_of(attempt.ranks.begin(), attempt.ranks.end(),
                                [](const RankState& r) { return r.exited && r.signal == 0 && r.exit_code == 0; });
    if (all_done) FinishLocked(*run, RunStatus::kSucceeded, absl::StrCat("all ", attempt.ranks.size(),
                                                                         " workers exited 0"));
    return;
  }
}

void RunManager::FailAttempt(const std::string& id, int attempt_number, const std::string& reason) {
  std::set<std::string> targets;
  std::string owner = absl::StrCat("run:", id, ":a", attempt_number);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Run* run = FindLocked(id);
    if (run == nullptr || run->Terminal() || run->attempts.empty() || run->attempts.back().number != attempt_number ||
        run->status != RunStatus::kRunning) {
      return;
    }
    RunAttempt& attempt = run->attempts.back();
    attempt.end_time_ms = clock_->WallMillis();
    attempt.end_reason = reason;
    for (const RankState& r : attempt.ranks) targets.insert(r.target);
    run->failures += 1;
    const int max = run->spec.run.max_failures;
    if (max != -1 && run->failures > max) {
      FinishLocked(*run, RunStatus::kFailed,
                   absl::StrCat("failed ", run->failures, " time", run->failures == 1 ? "" : "s",
                                " (max_failures=", max, "); last: ", reason));
    } else {
      run->status = RunStatus::kRestarting;
      run->message = absl::StrCat("attempt ", attempt_number, " failed: ", reason, "; restarting");
      spdlog::warn("run {}: attempt {} failed ({}); restarting", id, attempt_number, reason);
    }
  }
  // Every worker of the attempt stops; a dead host's agent simply does not answer.
  agents_->StopOwner({targets.begin(), targets.end()}, owner, options_.stop_grace_ms);
  // Wait (bounded) until the old workers are gone, so that the next attempt never shares a chip with them.
  const int64_t deadline = clock_->NowMicros() + (options_.stop_grace_ms + 2000) * 1000;
  while (clock_->NowMicros() < deadline) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      Run* run = FindLocked(id);
      if (run == nullptr) return;
      std::set<std::string> alive_nodes;
      for (const NodeRecord& r : registry_->Records(false)) alive_nodes.insert(r.info.node_id);
      const RunAttempt& attempt = run->attempts.back();
      bool gone = std::all_of(attempt.ranks.begin(), attempt.ranks.end(), [&](const RankState& r) {
        return r.exited || !alive_nodes.contains(r.node_id);
      });
      if (gone) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  StartAttempt(id);  // starts only if the group is CREATED; otherwise its CREATED event will
}

absl::StatusOr<bool> RunManager::Stop(const std::string& id_or_name) {
  std::set<std::string> targets;
  std::string owner, group;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Run* run = FindLocked(id_or_name);
    if (run == nullptr) return absl::NotFoundError(absl::StrCat("run ", id_or_name, " does not exist"));
    if (run->Terminal()) return false;
    run->stop_requested = true;
    if (!run->attempts.empty()) {
      for (const RankState& r : run->attempts.back().ranks) targets.insert(r.target);
      owner = absl::StrCat("run:", run->id, ":a", run->attempts.back().number);
    }
    FinishLocked(*run, RunStatus::kStopped, "stopped by the user");
  }
  if (!owner.empty()) {
    tasks_->Post([this, targets, owner] {
      agents_->StopOwner({targets.begin(), targets.end()}, owner, options_.stop_grace_ms);
    });
  }
  return true;
}

absl::StatusOr<nlohmann::json> RunManager::Report(const std::string& id, const std::string& bearer,
                                                  const std::string& body) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Run* run = FindLocked(id);
    if (run == nullptr || run->id != id) return absl::NotFoundError(absl::StrCat("run ", id, " does not exist"));
    if (!rpc::BearerMatches(bearer, run->token)) return absl::UnauthenticatedError("wrong run token");
  }
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("body must be a JSON object");
  for (const char* field : {"rank", "attempt", "step"}) {
    if (!j.contains(field) || !j[field].is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("\"", field, "\" must be an integer"));
    }
  }
  if (j.contains("metrics") && !j["metrics"].is_object()) return absl::InvalidArgumentError("\"metrics\" must be an object");
  if (j.contains("checkpoint") && !j["checkpoint"].is_null() && !j["checkpoint"].is_string()) {
    return absl::InvalidArgumentError("\"checkpoint\" must be a string or null");
  }
  const int rank = j["rank"].get<int>();
  const int attempt = j["attempt"].get<int>();
  const int64_t step = j["step"].get<int64_t>();
  const std::string checkpoint = j.value("checkpoint", nlohmann::json()).is_string() ? j["checkpoint"].get<std::string>() : "";

  std::lock_guard<std::mutex> lock(mu_);
  Run* run = FindLocked(id);
  if (run == nullptr || run->id != id) return absl::NotFoundError(absl::StrCat("run ", id, " does not exist"));
  if (!rpc::BearerMatches(bearer, run->token)) return absl::UnauthenticatedError("wrong run token");
  if (run->attempts.empty() || run->attempts.back().number != attempt || run->Terminal()) {
    return absl::FailedPreconditionError(absl::StrCat("attempt ", attempt, " of run ", id, " is not the running one"));
  }
  RunAttempt& current = run->attempts.back();
  if (rank < 0 || rank >= static_cast<int>(current.ranks.size())) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is out of range"));
  }
  if (!checkpoint.empty()) {
    absl::Status valid = train::ValidateStagedDir(run->storage(), checkpoint);
    if (!valid.ok()) return valid;
  }
  if (rank == 0 && j.contains("metrics")) {
    current.metrics.push_back({{"step", step}, {"metrics", j["metrics"]}, {"time_ms", clock_->WallMillis()}});
    if (current.metrics.size() > 10'000) current.metrics.erase(current.metrics.begin());
  }
  auto& reported = run->reports[step];
  reported[rank] = checkpoint;
  nlohmann::json reply = {{"committed", false}};
  if (reported.size() == current.ranks.size()) {
    std::map<int, std::string> staged;
    for (const auto& [r, dir] : reported) {
      if (!dir.empty()) staged[r] = dir;
    }
    if (!staged.empty()) {
      auto dir = train::CommitCheckpoint(run->storage(), step, attempt, staged);
      if (!dir.ok()) return dir.status();
      run->committed.erase(std::remove_if(run->committed.begin(), run->committed.end(),
                                          [&](const auto& c) { return c.first == step; }),
                           run->committed.end());
      run->committed.emplace_back(step, *dir);
      std::sort(run->committed.begin(), run->committed.end());
      if (run->spec.run.checkpoints_to_keep) {
        train::PruneCheckpoints(run->storage(), *run->spec.run.checkpoints_to_keep);
        run->committed = train::ListCommitted(run->storage());
      }
      reply = {{"committed", true}, {"checkpoint", *dir}};
      spdlog::info("run {}: checkpoint of step {} committed at {}", id, step, *dir);
    }
    // Older steps can no longer complete.
    run->reports.erase(run->reports.begin(), run->reports.upper_bound(step));
  }
  return reply;
}

absl::StatusOr<rpc::ReadWorkerLogReply> RunManager::ReadLog(const std::string& id_or_name, int rank, int attempt,
                                                            int64_t offset, int64_t max_bytes) {
  std::string target, worker;
  bool finished_attempt = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Run* run = FindLocked(id_or_name);
    if (run == nullptr) return absl::NotFoundError(absl::StrCat("run ", id_or_name, " does not exist"));
    if (run->attempts.empty()) {
      rpc::ReadWorkerLogReply empty;
      empty.set_next_offset(offset);
      empty.set_finished(run->Terminal());
      return empty;
    }
    const RunAttempt* a = &run->attempts.back();
    if (attempt > 0) {
      if (attempt > static_cast<int>(run->attempts.size())) {
        return absl::NotFoundError(absl::StrCat("run ", run->id, " has no attempt ", attempt));
      }
      a = &run->attempts[attempt - 1];
    }
    if (rank < 0 || rank >= static_cast<int>(a->ranks.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is out of range; attempt ", a->number, " has ", a->ranks.size(), " ranks"));
    }
    target = a->ranks[rank].target;
    worker = a->ranks[rank].worker_id;
    finished_attempt = a->end_time_ms != 0;
  }
  auto reply = agents_->ReadWorkerLog(target, worker, offset, max_bytes);
  if (!reply.ok() && finished_attempt) {
    // The host is gone with its log; say so rather than fail.
    rpc::ReadWorkerLogReply gone;
    gone.set_next_offset(offset);
    gone.set_finished(true);
    return gone;
  }
  return reply;
}

std::map<std::string, int> RunManager::CountByStatus() const {
  std::map<std::string, int> counts;
  for (RunStatus s : {RunStatus::kPending, RunStatus::kRunning, RunStatus::kRestarting, RunStatus::kSucceeded,
                      RunStatus::kFailed, RunStatus::kStopped}) {
    counts[RunStatusName(s)] = 0;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, run] : runs_) ++counts[RunStatusName(run.status)];
  return counts;
}

int64_t RunManager::TotalRestarts() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t total = 0;
  for (const auto& [id, run] : runs_) total += run.failures;
  return total;
}

std::vector<nlohmann::json> RunManager::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const Run*> sorted;
  for (const auto& [id, run] : runs_) sorted.push_back(&run);
  std::sort(sorted.begin(), sorted.end(),
            [](const Run* a, const Run* b) { return a->created_time_ms < b->created_time_ms; });
  std::vector<nlohmann::json> out;
  for (const Run* run : sorted) out.push_back(ToJson(*run));
  return out;
}

absl::StatusOr<nlohmann::json> RunManager::Get(const std::string& id_or_name) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Run* run = FindLocked(id_or_name);
  if (run == nullptr) return absl::NotFoundError(absl::StrCat("run ", id_or_name, " does not exist"));
  return ToJson(*run);
}

nlohmann::json RunManager::ToJson(const Run& run) const {
  nlohmann::json attempts = nlohmann::json::array();
  for (const RunAttempt& a : run.attempts) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const RankState& r : a.ranks) {
      nlohmann::json rank = {{"rank", r.rank}, {"node_id", r.node_id}, {"address", r.address},
                             {"worker_id", r.worker_id}, {"exited", r.exited}};
      if (!r.slice_name.empty()) {
        rank["slice"] = r.slice_name;
        rank["chips"] = r.chips;
      }
      if (!r.gpus.empty()) rank["gpus"] = r.gpus;
      if (r.exited) {
        rank["exit_code"] = r.exit_code;
        rank["signal"] = r.signal;
      }
      ranks.push_back(std::move(rank));
    }
    attempts.push_back({{"attempt", a.number},
                        {"start_time_ms", a.start_time_ms},
                        {"end_time_ms", a.end_time_ms},
                        {"end_reason", a.end_reason},
                        {"checkpoint_dir", a.checkpoint_dir},
                        {"ranks", ranks},
                        {"metrics", a.metrics}});
  }
  nlohmann::json committed = nlohmann::json::array();
  for (const auto& [step, dir] : run.committed) committed.push_back({{"step", step}, {"dir", dir}});
  return {{"run_id", run.id},
          {"name", run.spec.run.name},
          {"status", RunStatusName(run.status)},
          {"message", run.message},
          {"failures", run.failures},
          {"max_failures", run.spec.run.max_failures},
          {"num_workers", run.attempts.empty() ? run.plan.num_workers
                                               : static_cast<int>(run.attempts.back().ranks.size())},
          {"group_id", run.group_id},
          {"storage_path", run.storage()},
          {"entrypoint", run.spec.entrypoint},
          {"created_time_ms", run.created_time_ms},
          {"end_time_ms", run.end_time_ms},
          {"attempt", run.attempts.empty() ? 0 : run.attempts.back().number},
          {"attempts", attempts},
          {"checkpoints", committed}};
}

}  // namespace torus::head
