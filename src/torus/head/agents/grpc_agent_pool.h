// GrpcAgentPool: AgentPool over the agents' NodeService, with the cluster token and one deadline per call. Calls to
// many agents are issued asynchronously and awaited together.
//
// Thread-safety: thread-safe; stubs are cached per target under a mutex.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "torus/head/agents/agent_pool.h"
#include "grpcpp/security/credentials.h"
#include "torus/node.grpc.pb.h"

namespace torus::head {

class GrpcAgentPool final : public AgentPool {
 public:
  // `credentials`: how agents are reached (TLS with the head's certificate, checking the agent's; null: plaintext).
  GrpcAgentPool(std::string token, std::chrono::milliseconds rpc_timeout,
                std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

  std::vector<absl::Status> Prepare(const std::vector<AgentBundles>& entries, int64_t ttl_ms) override;
  std::vector<absl::Status> Commit(const std::vector<AgentBundles>& entries) override;
  void Cancel(const std::vector<AgentBundles>& entries) override;
  void Release(const std::vector<AgentBundles>& entries) override;
  std::vector<absl::StatusOr<int64_t>> StartWorkers(
      const std::vector<std::pair<std::string, StartSpec>>& targets_and_specs) override;
  void StopWorkers(const std::vector<std::pair<std::string, WorkerId>>& targets_and_workers,
                   int64_t grace_ms) override;
  std::vector<absl::StatusOr<LogChunk>> ReadWorkerLogs(const std::vector<LogRead>& reads) override;
  absl::StatusOr<int> FreePort(const std::string& target) override;
  absl::StatusOr<rpc::ListLogsReply> ListLogs(const std::string& target) override;
  absl::StatusOr<rpc::ReadLogReply> ReadLog(const std::string& target, const rpc::ReadLogRequest& request) override;

 private:
  rpc::NodeService::Stub* StubFor(const std::string& target);

  const std::string token_;
  const std::chrono::milliseconds rpc_timeout_;
  const bool tls_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<rpc::NodeService::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace torus::head
