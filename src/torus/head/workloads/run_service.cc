#include "torus/head/workloads/run_service.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/head/placement/group_ops.h"
#include "torus/head/workloads/goodput.h"
#include "torus/head/workloads/steps.h"
#include "torus/rpc/auth.h"
#include "torus/train/checkpoints.h"
#include "torus/train/run_report.h"

namespace torus::head {
namespace {

absl::Status NoRun(const std::string& id) { return absl::NotFoundError(absl::StrCat("run ", id, " does not exist")); }

RunView ViewOf(const ClusterState& s, const Run& run, int64_t now_ms) {
  RunView view{run, {}, now_ms};
  for (const RunAttempt& a : run.attempts) {
    std::vector<std::optional<Worker>> ranks;
    for (const RankState& r : a.ranks) {
      const Worker* w = s.FindWorker(r.worker);
      ranks.push_back(w == nullptr ? std::nullopt : std::optional<Worker>(*w));
    }
    view.workers.push_back(std::move(ranks));
  }
  return view;
}

}  // namespace

absl::StatusOr<RunId> RunService::Submit(train::RunSpec spec, const std::string& service, int64_t service_version) {
  spec = train::ApplyRunDefaults(std::move(spec));
  auto plan = train::PlanRun(spec);
  if (!plan.ok()) return plan.status();
  const std::string storage = spec.run.storage_path + "/" + spec.run.name;
  // Resume across runs of the same name: what an earlier run committed counts (a replica has nothing to resume).
  std::vector<std::pair<int64_t, std::string>> committed;
  if (service.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(storage, ec);
    committed = train::ListCommitted(storage);
  }
  const int64_t wall = clock_->WallMillis();
  return store_->Update([&](Txn& txn) -> absl::StatusOr<RunId> {
    if (absl::Status s = txn.state().CheckPackageStored("working_dir", spec.working_dir); !s.ok()) return s;
    for (size_t i = 0; i < spec.py_modules.size(); ++i) {
      absl::Status s = txn.state().CheckPackageStored(absl::StrCat("py_modules[", i, "]"), spec.py_modules[i]);
      if (!s.ok()) return s;
    }
    RunId id;
    do {
      id = RunId(absl::StrCat("run-", ids_->Suffix(10)));
    } while (txn.state().FindRun(id) != nullptr);
    const NewGroup group_spec{"run:" + id.str(), Owner::Run(id), 0, wall};
    auto group = plan->tpu ? SubmitSliceGroup(txn, *ids_, plan->slice_request, group_spec)
                           : SubmitBundleGroup(txn, *ids_, plan->bundle_request, group_spec);
    if (!group.ok()) return group.status();
    absl::Status s =
        txn.Apply(RunSubmitted{id, train::RunSpecToJson(spec), ids_->Secret(), *group, committed, wall, service,
                               service_version});
    if (!s.ok()) return s;
    spdlog::info("run {} ({}) submitted: {} workers, group {}", id.str(), spec.run.name, plan->num_workers,
                 group->str());
    return id;
  });
}

absl::StatusOr<RunView> RunService::Get(const std::string& id_or_name) const {
  return store_->Read([&](const ClusterState& s) -> absl::StatusOr<RunView> {
    const Run* run = s.FindRun(id_or_name);
    if (run == nullptr) return NoRun(id_or_name);
    return ViewOf(s, *run, clock_->WallMillis());
  });
}

std::vector<RunView> RunService::List() const {
  std::vector<RunView> out = store_->Read([&](const ClusterState& s) {
    std::vector<RunView> views;
    const int64_t now = clock_->WallMillis();
    for (const auto& [id, run] : s.runs()) views.push_back(ViewOf(s, run, now));
    return views;
  });
  std::stable_sort(out.begin(), out.end(), [](const RunView& a, const RunView& b) {
    return a.run.created_time_ms < b.run.created_time_ms;
  });
  return out;
}

absl::StatusOr<bool> RunService::Stop(const std::string& id_or_name) {
  std::vector<HeldBundle> release;
  auto stopped = store_->Update([&](Txn& txn) -> absl::StatusOr<bool> {
    const Run* run = txn.state().FindRun(id_or_name);
    if (run == nullptr) return NoRun(id_or_name);
    if (run->Terminal()) return false;
    const RunId id = run->id;
    txn.Apply(RunStopRequested{id}).IgnoreError();
    ApplyRunStep(txn, id, clock_->WallMillis(), release);
    return true;
  });
  scheduler_->Release(std::move(release));
  return stopped;
}

std::optional<nlohmann::json> RunService::AlreadyCommitted(const std::string& id, const std::string& storage,
                                                           int64_t step) {
  const std::vector<std::pair<int64_t, std::string>> committed = train::ListCommitted(storage);
  auto it = std::find_if(committed.begin(), committed.end(), [step](const auto& c) { return c.first == step; });
  if (it == committed.end()) return std::nullopt;
  store_->Update([&](Txn& txn) {
    const Run* run = txn.state().FindRun(RunId(id));
    if (run == nullptr || run->committed == committed) return;
    txn.Apply(CheckpointCommitted{RunId(id), step, it->second, committed, clock_->WallMillis()}).IgnoreError();
  });
  return nlohmann::json{{"committed", true}, {"checkpoint", it->second}};
}

absl::StatusOr<nlohmann::json> RunService::Report(const std::string& id, const std::string& bearer,
                                                  const std::string& body) {
  auto storage = store_->Read([&](const ClusterState& s) -> absl::StatusOr<std::string> {
    const Run* run = s.FindRun(RunId(id));
    if (run == nullptr) return NoRun(id);
    if (!rpc::BearerMatches(bearer, run->token)) return absl::UnauthenticatedError("wrong run token");
    return run->storage();
  });
  if (!storage.ok()) return storage.status();
  auto report = train::ParseRunReport(body);
  if (!report.ok()) return report.status();
  if (!report->checkpoint.empty()) {
    if (absl::Status valid = train::ValidateStagedDir(*storage, report->checkpoint); !valid.ok()) {
      // A report sent again after the head that committed its step died before answering (a failover): its staged
      // copy was moved into the step's committed checkpoint. The same answer again, and the commit recorded.
      if (std::optional<nlohmann::json> answer = AlreadyCommitted(id, *storage, report->step)) return *answer;
      return valid;
    }
  }

  // The report itself; and, when it completes a step with checkpoints, what is to be committed.
  struct Completed {
    std::map<int, std::string> staged;
    std::optional<int> keep;
  };
  auto completed = store_->Update([&](Txn& txn) -> absl::StatusOr<std::optional<Completed>> {
    const Run* run = txn.state().FindRun(RunId(id));
    if (run == nullptr) return NoRun(id);
    if (!rpc::BearerMatches(bearer, run->token)) return absl::UnauthenticatedError("wrong run token");
    const RunAttempt* current = run->current();
    if (current == nullptr || current->number != report->attempt || current->ended() || run->Terminal()) {
      return absl::FailedPreconditionError(
          absl::StrCat("attempt ", report->attempt, " of run ", id, " is not the running one"));
    }
    if (report->rank < 0 || report->rank >= static_cast<int>(current->ranks.size())) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", report->rank, " is out of range"));
    }
    const size_t ranks = current->ranks.size();
    RunReported r{run->id,      report->attempt,
                  report->rank, report->step,
                  report->rank == 0 ? report->metrics_json : std::nullopt,
                  report->checkpoint, clock_->WallMillis()};
    if (absl::Status s = txn.Apply(std::move(r)); !s.ok()) return s;
    const Run* after = txn.state().FindRun(RunId(id));
    auto step = after->reports.find(report->step);
    if (step == after->reports.end() || step->second.size() != ranks) return std::optional<Completed>();
    Completed c{{}, after->spec.run.checkpoints_to_keep};
    for (const auto& [rank, dir] : step->second) {
      if (!dir.empty()) c.staged[rank] = dir;
    }
    return std::optional<Completed>(std::move(c));
  });
  if (!completed.ok()) return completed.status();
  if (!*completed) return nlohmann::json{{"committed", false}};

  // Every rank reported this step: merge and commit its checkpoints (file moves, outside the store's lock; one
  // commit of a run at a time).
  std::shared_ptr<absl::Mutex> run_mu;
  {
    absl::MutexLock lock(&commits_mu_);
    auto& m = commit_locks_[id];
    if (!m) m = std::make_shared<absl::Mutex>();
    run_mu = m;
  }
  absl::MutexLock commit_lock(run_mu.get());
  auto dir = train::CommitCheckpoint(*storage, report->step, report->attempt, (*completed)->staged);
  if (!dir.ok()) return dir.status();
  if ((*completed)->keep) train::PruneCheckpoints(*storage, *(*completed)->keep);
  std::vector<std::pair<int64_t, std::string>> committed = train::ListCommitted(*storage);
  store_->Update([&](Txn& txn) {
    if (txn.state().FindRun(RunId(id)) == nullptr) return;
    txn.Apply(CheckpointCommitted{RunId(id), report->step, *dir, committed, clock_->WallMillis()}).IgnoreError();
  });
  spdlog::info("run {}: checkpoint of step {} committed at {}", id, report->step, *dir);
  return nlohmann::json{{"committed", true}, {"checkpoint", *dir}};
}

absl::StatusOr<RunService::AttemptRanks> RunService::LocateRanks(const std::string& id_or_name, int attempt) const {
  return store_->Read([&](const ClusterState& s) -> absl::StatusOr<AttemptRanks> {
    const Run* run = s.FindRun(id_or_name);
    if (run == nullptr) return NoRun(id_or_name);
    if (run->attempts.empty()) return AttemptRanks{0, run->Terminal(), {}};
    const RunAttempt* a = &run->attempts.back();
    if (attempt > 0) {
      if (attempt > static_cast<int>(run->attempts.size())) {
        return absl::NotFoundError(absl::StrCat("run ", run->id.str(), " has no attempt ", attempt));
      }
      a = &run->attempts[static_cast<size_t>(attempt - 1)];
    }
    AttemptRanks out{a->number, a->ended(), {}};
    for (const RankState& r : a->ranks) {
      const Node* n = s.FindNode(r.node);
      out.ranks.emplace_back(n == nullptr ? "" : n->target(), r.worker);
    }
    return out;
  });
}

absl::StatusOr<RunService::RankLogs> RunService::ReadLogs(const std::string& id_or_name, int attempt,
                                                          const std::vector<int64_t>& offsets, int64_t max_bytes,
                                                          int64_t wait_ms) {
  auto where = LocateRanks(id_or_name, attempt);
  if (!where.ok()) return where.status();
  if (!offsets.empty() && offsets.size() != where->ranks.size()) {
    return absl::InvalidArgumentError(absl::StrCat("offsets: give one offset per rank (attempt ", where->attempt,
                                                   " has ", where->ranks.size(), " ranks), or none"));
  }
  RankLogs out{where->attempt, {}};
  std::vector<LogRead> reads;
  std::vector<size_t> read_rank;  // reads[i] is of rank read_rank[i]
  for (size_t r = 0; r < where->ranks.size(); ++r) {
    const int64_t offset = offsets.empty() ? 0 : offsets[r];
    out.ranks.push_back(absl::NotFoundError("its node is forgotten"));
    if (where->ranks[r].first.empty()) continue;
    reads.push_back({.target = where->ranks[r].first, .worker = where->ranks[r].second, .offset = offset,
                     .max_bytes = max_bytes});
    read_rank.push_back(r);
  }
  // Waiting: each agent answers once one of its ranks writes or all of them have ended; the first to answer with
  // output ends the others' waits.
  for (LogRead& read : reads) read.wait_ms = std::clamp<int64_t>(wait_ms, 0, 60'000);
  std::vector<absl::StatusOr<LogChunk>> chunks = agents_->ReadWorkerLogs(reads);
  for (size_t i = 0; i < chunks.size(); ++i) out.ranks[read_rank[i]] = std::move(chunks[i]);
  // A host that is gone with its log: an ended attempt's output reads as empty and finished.
  for (size_t r = 0; r < out.ranks.size(); ++r) {
    if (!out.ranks[r].ok() && where->ended) out.ranks[r] = LogChunk{"", offsets.empty() ? 0 : offsets[r], true};
  }
  return out;
}

absl::StatusOr<LogChunk> RunService::ReadLog(const std::string& id_or_name, int rank, int attempt, int64_t offset,
                                             int64_t max_bytes, int64_t wait_ms) {
  auto where = LocateRanks(id_or_name, attempt);
  if (!where.ok()) return where.status();
  if (where->attempt == 0) return LogChunk{"", offset, where->ended};
  if (rank < 0 || rank >= static_cast<int>(where->ranks.size())) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is out of range; attempt ", where->attempt,
                                                   " has ", where->ranks.size(), " ranks"));
  }
  const auto& [target, worker] = where->ranks[static_cast<size_t>(rank)];
  absl::StatusOr<LogChunk> chunk =
      target.empty() ? absl::StatusOr<LogChunk>(absl::NotFoundError("its node is forgotten"))
                     : agents_->ReadWorkerLog({.target = target, .worker = worker, .offset = offset,
                                               .max_bytes = max_bytes, .wait_ms = wait_ms});
  // The host is gone with its log: say so rather than fail.
  if (!chunk.ok() && where->ended) return LogChunk{"", offset, true};
  return chunk;
}

std::map<std::string, int> RunService::CountByStatus() const {
  std::map<std::string, int> counts;
  for (RunStatus s : {RunStatus::kPending, RunStatus::kRunning, RunStatus::kRestarting, RunStatus::kSucceeded,
                      RunStatus::kFailed, RunStatus::kStopped}) {
    counts[RunStatusName(s)] = 0;
  }
  store_->Read([&](const ClusterState& s) {
    for (const auto& [id, run] : s.runs()) ++counts[RunStatusName(run.status)];
  });
  return counts;
}

std::vector<RunService::RunGoodputRow> RunService::Goodputs() const {
  const int64_t now = clock_->WallMillis();
  return store_->Read([&](const ClusterState& s) {
    std::vector<RunGoodputRow> out;
    for (const auto& [id, run] : s.runs()) out.push_back({id.str(), run.spec.run.name, RunGoodput(run, now)});
    return out;
  });
}

std::map<std::string, int> RunService::FailedAttemptsByCause() const {
  return store_->Read([](const ClusterState& s) {
    std::map<std::string, int> out;
    for (const auto& [id, run] : s.runs()) {
      for (const RunAttempt& a : run.attempts) {
        if (!a.cause.empty() && a.cause != "stopped") ++out[a.cause];
      }
    }
    return out;
  });
}

int64_t RunService::TotalRestarts() const {
  return store_->Read([](const ClusterState& s) {
    int64_t total = 0;
    for (const auto& [id, run] : s.runs()) total += run.failures;
    return total;
  });
}

}  // namespace torus::head
