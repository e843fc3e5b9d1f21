// FakeAgentPool: agents in memory, for unit tests of the head's mechanisms. Each target keeps a ledger (prepared
// and committed bundles by ledger group and index) and its workers, with the agent's rules where they matter to the
// head: a commit needs a prepare of that attempt, a worker on a bundle needs the bundle committed, a worker id that
// runs cannot be started twice. Tests make agents refuse or vanish and make workers exit.
//
// Thread-safety: thread-safe.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "torus/head/agents/agent_pool.h"

namespace torus::head {

class FakeAgentPool final : public AgentPool {
 public:
  struct Entry {
    uint64_t attempt = 0;
    bool committed = false;
    HeldBundle bundle;
  };
  struct FakeWorker {
    StartSpec spec;
    int64_t pid = 0;
    bool running = true;
    bool stop_requested = false;
  };

  // Agents answer only once added; an unknown or unreachable target answers UNAVAILABLE.
  void AddAgent(const std::string& target);
  void SetReachable(const std::string& target, bool reachable);
  // The next prepares on `target` fail with `status` (OK: stop refusing).
  void RefusePrepares(const std::string& target, absl::Status status);
  // The next starts on `target` fail with `status` (OK: stop refusing).
  void RefuseStarts(const std::string& target, absl::Status status);

  // The ledger of one agent: (ledger group, index) -> entry.
  std::map<std::pair<std::string, int>, Entry> Ledger(const std::string& target) const;
  std::map<WorkerId, FakeWorker> Workers(const std::string& target) const;
  // Marks a worker exited (as its process ending would); the test reports the exit to the head itself.
  void EndWorker(const std::string& target, const WorkerId& worker);
  int prepare_calls() const;
  int commit_calls() const;  // commit calls, one per entry
  int start_calls() const;

  std::vector<absl::Status> Prepare(const std::vector<AgentBundles>& entries, int64_t ttl_ms) override;
  std::vector<absl::Status> Commit(const std::vector<AgentBundles>& entries) override;
  void Cancel(const std::vector<AgentBundles>& entries) override;
  void Release(const std::vector<AgentBundles>& entries) override;
  std::vector<absl::StatusOr<int64_t>> StartWorkers(
      const std::vector<std::pair<std::string, StartSpec>>& targets_and_specs) override;
  void StopWorkers(const std::vector<std::pair<std::string, WorkerId>>& targets_and_workers,
                   int64_t grace_ms) override;
  // Each worker's log is "log of <worker id>\n"; waits are not simulated.
  std::vector<absl::StatusOr<LogChunk>> ReadWorkerLogs(const std::vector<LogRead>& reads) override;
  absl::StatusOr<int> FreePort(const std::string& target) override;
  absl::StatusOr<rpc::ListLogsReply> ListLogs(const std::string& target) override;
  absl::StatusOr<rpc::ReadLogReply> ReadLog(const std::string& target, const rpc::ReadLogRequest& request) override;

 private:
  absl::StatusOr<LogChunk> ReadOneLog(const std::string& target, const WorkerId& worker, int64_t offset);
  struct Agent {
    bool reachable = true;
    absl::Status refuse_prepares;
    absl::Status refuse_starts;
    std::map<std::pair<std::string, int>, Entry> ledger;
    std::map<WorkerId, FakeWorker> workers;
  };
  // The agent at `target` when it answers; nullptr otherwise. REQUIRES: mu_ held.
  Agent* Reachable(const std::string& target) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, Agent> agents_ ABSL_GUARDED_BY(mu_);
  int64_t next_pid_ ABSL_GUARDED_BY(mu_) = 1000;
  int next_port_ ABSL_GUARDED_BY(mu_) = 20000;
  int prepare_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int commit_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int start_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace torus::head
