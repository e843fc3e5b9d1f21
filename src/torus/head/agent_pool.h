// AgentPool: the head's calls to agents for two-phase bundle reservation. Calls to many agents run in parallel and
// each method returns once every agent answered or the deadline passed.
//
// Thread-safety: thread-safe; stubs are cached per target under a mutex.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "torus/node.grpc.pb.h"

namespace torus::head {

// The bundles one agent is asked to hold for one ledger group.
struct AgentBundles {
  std::string node_id;
  std::string target;        // "address:agent_port"
  std::string ledger_group;  // the agent-side group id
  std::vector<rpc::BundleSpec> bundles;
  uint64_t attempt = 0;      // the group's placement attempt (prepare, commit, cancel)
};

class AgentPool {
 public:
  AgentPool(std::string token, std::chrono::milliseconds rpc_timeout);

  // Prepares every entry; one status per entry, in order (DEADLINE_EXCEEDED for an agent that did not answer).
  std::vector<absl::Status> Prepare(const std::vector<AgentBundles>& entries, std::chrono::milliseconds ttl);
  std::vector<absl::Status> Commit(const std::vector<AgentBundles>& entries);
  // Cancels each entry's prepares of its attempt; errors are ignored (agents drop stale prepares on their own).
  void Cancel(const std::vector<AgentBundles>& entries);
  // Releases the listed bundles (by index) of each entry's ledger group; errors are ignored (a dead agent holds
  // nothing any more).
  void Release(const std::vector<AgentBundles>& entries);

  // Worker control on one agent (blocking, with the pool's deadline).
  absl::StatusOr<rpc::StartWorkerReply> StartWorker(const std::string& target, const rpc::StartWorkerRequest& request);
  // Starts many workers in parallel; one result per request, in order.
  std::vector<absl::StatusOr<rpc::StartWorkerReply>> StartWorkers(
      const std::vector<std::pair<std::string, rpc::StartWorkerRequest>>& targets_and_requests);
  absl::Status StopWorker(const std::string& target, const std::string& worker_id, int64_t grace_ms);
  // Stops every worker of `owner` on each target, in parallel.
  void StopOwner(const std::vector<std::string>& targets, const std::string& owner, int64_t grace_ms);
  absl::StatusOr<rpc::ReadWorkerLogReply> ReadWorkerLog(const std::string& target, const std::string& worker_id,
                                                        int64_t offset, int64_t max_bytes);
  absl::StatusOr<int> FreePort(const std::string& target);
  // The host's log files (agent, libtpu, workers) and a piece of one.
  absl::StatusOr<rpc::ListLogsReply> ListLogs(const std::string& target);
  absl::StatusOr<rpc::ReadLogReply> ReadLog(const std::string& target, const rpc::ReadLogRequest& request);

 private:
  rpc::NodeService::Stub* StubFor(const std::string& target);

  const std::string token_;
  const std::chrono::milliseconds rpc_timeout_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<rpc::NodeService::Stub>> stubs_;  // guarded by mu_
};

}  // namespace torus::head
