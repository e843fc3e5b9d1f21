#include "torus/head/agents/fake_agent_pool.h"

#include "absl/strings/str_cat.h"

namespace torus::head {
namespace {

absl::Status Unreachable(const std::string& target) {
  return absl::UnavailableError(absl::StrCat("agent ", target, " does not answer"));
}

}  // namespace

void FakeAgentPool::AddAgent(const std::string& target) {
  absl::MutexLock lock(&mu_);
  agents_[target];
}

void FakeAgentPool::SetReachable(const std::string& target, bool reachable) {
  absl::MutexLock lock(&mu_);
  agents_[target].reachable = reachable;
}

void FakeAgentPool::RefusePrepares(const std::string& target, absl::Status status) {
  absl::MutexLock lock(&mu_);
  agents_[target].refuse_prepares = std::move(status);
}

void FakeAgentPool::RefuseStarts(const std::string& target, absl::Status status) {
  absl::MutexLock lock(&mu_);
  agents_[target].refuse_starts = std::move(status);
}

std::map<std::pair<std::string, int>, FakeAgentPool::Entry> FakeAgentPool::Ledger(const std::string& target) const {
  absl::MutexLock lock(&mu_);
  auto it = agents_.find(target);
  return it == agents_.end() ? std::map<std::pair<std::string, int>, Entry>{} : it->second.ledger;
}

std::map<WorkerId, FakeAgentPool::FakeWorker> FakeAgentPool::Workers(const std::string& target) const {
  absl::MutexLock lock(&mu_);
  auto it = agents_.find(target);
  return it == agents_.end() ? std::map<WorkerId, FakeWorker>{} : it->second.workers;
}

void FakeAgentPool::EndWorker(const std::string& target, const WorkerId& worker) {
  absl::MutexLock lock(&mu_);
  auto agent = agents_.find(target);
  if (agent == agents_.end()) return;
  auto w = agent->second.workers.find(worker);
  if (w != agent->second.workers.end()) w->second.running = false;
}

int FakeAgentPool::prepare_calls() const {
  absl::MutexLock lock(&mu_);
  return prepare_calls_;
}

int FakeAgentPool::commit_calls() const {
  absl::MutexLock lock(&mu_);
  return commit_calls_;
}

int FakeAgentPool::start_calls() const {
  absl::MutexLock lock(&mu_);
  return start_calls_;
}

FakeAgentPool::Agent* FakeAgentPool::Reachable(const std::string& target) {
  auto it = agents_.find(target);
  if (it == agents_.end() || !it->second.reachable) return nullptr;
  return &it->second;
}

std::vector<absl::Status> FakeAgentPool::Prepare(const std::vector<AgentBundles>& entries, int64_t ttl_ms) {
  absl::MutexLock lock(&mu_);
  std::vector<absl::Status> out;
  for (const AgentBundles& e : entries) {
    ++prepare_calls_;
    Agent* agent = Reachable(e.target);
    if (agent == nullptr) {
      out.push_back(Unreachable(e.target));
      continue;
    }
    if (!agent->refuse_prepares.ok()) {
      out.push_back(agent->refuse_prepares);
      continue;
    }
    absl::Status s;
    for (const HeldBundle& b : e.bundles) {
      auto it = agent->ledger.find({e.ledger_group, b.ledger_index});
      if (it != agent->ledger.end() && it->second.attempt != e.attempt) {
        s = absl::AlreadyExistsError(
            absl::StrCat("bundle ", b.ledger_index, " of group ", e.ledger_group, " is already held by another attempt"));
      }
    }
    if (s.ok()) {
      for (const HeldBundle& b : e.bundles) {
        agent->ledger[{e.ledger_group, b.ledger_index}] = {e.attempt, e.commit_at_once, b};
      }
    }
    out.push_back(s);
  }
  return out;
}

std::vector<absl::Status> FakeAgentPool::Commit(const std::vector<AgentBundles>& entries) {
  absl::MutexLock lock(&mu_);
  std::vector<absl::Status> out;
  for (const AgentBundles& e : entries) {
    ++commit_calls_;
    Agent* agent = Reachable(e.target);
    if (agent == nullptr) {
      out.push_back(Unreachable(e.target));
      continue;
    }
    int found = 0;
    for (auto& [key, entry] : agent->ledger) {
      if (key.first == e.ledger_group && entry.attempt == e.attempt) {
        entry.committed = true;
        ++found;
      }
    }
    out.push_back(found > 0 ? absl::OkStatus()
                            : absl::NotFoundError(absl::StrCat("no prepared bundles of group ", e.ledger_group)));
  }
  return out;
}

void FakeAgentPool::Cancel(const std::vector<AgentBundles>& entries) {
  absl::MutexLock lock(&mu_);
  for (const AgentBundles& e : entries) {
    Agent* agent = Reachable(e.target);
    if (agent == nullptr) continue;
    std::erase_if(agent->ledger, [&](const auto& kv) {
      return kv.first.first == e.ledger_group && kv.second.attempt == e.attempt && !kv.second.committed;
    });
  }
}

void FakeAgentPool::Release(const std::vector<AgentBundles>& entries) {
  absl::MutexLock lock(&mu_);
  for (const AgentBundles& e : entries) {
    Agent* agent = Reachable(e.target);
    if (agent == nullptr) continue;
    for (const HeldBundle& b : e.bundles) agent->ledger.erase({e.ledger_group, b.ledger_index});
  }
}

std::vector<absl::StatusOr<int64_t>> FakeAgentPool::StartWorkers(
    const std::vector<std::pair<std::string, StartSpec>>& targets_and_specs) {
  absl::MutexLock lock(&mu_);
  std::vector<absl::StatusOr<int64_t>> out;
  for (const auto& [target, spec] : targets_and_specs) {
    ++start_calls_;
    Agent* agent = Reachable(target);
    if (agent == nullptr) {
      out.push_back(Unreachable(target));
      continue;
    }
    if (!agent->refuse_starts.ok()) {
      out.push_back(agent->refuse_starts);
      continue;
    }
    if (spec.bundle >= 0) {
      auto it = agent->ledger.find({spec.ledger_group, spec.bundle});
      if (it == agent->ledger.end() || !it->second.committed) {
        out.push_back(absl::FailedPreconditionError(
            absl::StrCat("bundle ", spec.bundle, " of group ", spec.ledger_group, " is not committed here")));
        continue;
      }
    }
    if (auto w = agent->workers.find(spec.id); w != agent->workers.end() && spec.only_if_new) {
      out.push_back(absl::AlreadyExistsError(absl::StrCat("worker ", spec.id.str(), " has run here already")));
      continue;
    }
    if (auto w = agent->workers.find(spec.id); w != agent->workers.end() && w->second.running) {
      out.push_back(absl::AlreadyExistsError(absl::StrCat("worker ", spec.id.str(), " is running")));
      continue;
    }
    const int64_t pid = next_pid_++;
    agent->workers[spec.id] = FakeWorker{spec, pid, true, false};
    out.push_back(pid);
  }
  return out;
}

void FakeAgentPool::StopWorkers(const std::vector<std::pair<std::string, WorkerId>>& targets_and_workers,
                                int64_t grace_ms) {
  absl::MutexLock lock(&mu_);
  for (const auto& [target, worker] : targets_and_workers) {
    Agent* agent = Reachable(target);
    if (agent == nullptr) continue;
    auto w = agent->workers.find(worker);
    if (w != agent->workers.end()) w->second.stop_requested = true;
  }
}

std::vector<absl::StatusOr<LogChunk>> FakeAgentPool::ReadWorkerLogs(const std::vector<LogRead>& reads) {
  std::vector<absl::StatusOr<LogChunk>> out;
  for (const LogRead& r : reads) out.push_back(ReadOneLog(r.target, r.worker, r.offset));
  return out;
}

absl::StatusOr<LogChunk> FakeAgentPool::ReadOneLog(const std::string& target, const WorkerId& worker, int64_t offset) {
  absl::MutexLock lock(&mu_);
  Agent* agent = Reachable(target);
  if (agent == nullptr) return Unreachable(target);
  auto w = agent->workers.find(worker);
  if (w == agent->workers.end()) return absl::NotFoundError(absl::StrCat("no worker ", worker.str()));
  const std::string log = absl::StrCat("log of ", worker.str(), "\n");
  const int64_t start = std::min<int64_t>(offset, static_cast<int64_t>(log.size()));
  return LogChunk{log.substr(static_cast<size_t>(start)), static_cast<int64_t>(log.size()), !w->second.running};
}

absl::StatusOr<int> FakeAgentPool::FreePort(const std::string& target) {
  absl::MutexLock lock(&mu_);
  if (Reachable(target) == nullptr) return Unreachable(target);
  return next_port_++;
}

absl::StatusOr<rpc::ListLogsReply> FakeAgentPool::ListLogs(const std::string& target) {
  absl::MutexLock lock(&mu_);
  if (Reachable(target) == nullptr) return Unreachable(target);
  return rpc::ListLogsReply();
}

absl::StatusOr<rpc::ReadLogReply> FakeAgentPool::ReadLog(const std::string& target,
                                                         const rpc::ReadLogRequest& request) {
  absl::MutexLock lock(&mu_);
  if (Reachable(target) == nullptr) return Unreachable(target);
  return absl::NotFoundError(absl::StrCat("name '", request.name(), "': no such log"));
}

}  // namespace torus::head
