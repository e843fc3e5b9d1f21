// NodeServiceImpl: the agent's gRPC handlers over its BundleLedger (prepare / commit / cancel / release, and the
// ledger view), its WorkerSupervisor (start / stop / logs / list workers, and free ports for them) and its LogFiles
// (list and read the host's log files). Each checks the cluster token and converts proto to domain types.
//
// Thread-safety: thread-safe; handlers run on gRPC's callback threads; the ledger and the supervisor have their own
// locks.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "torus/node.grpc.pb.h"
#include "torus/node/bundle_ledger.h"
#include "torus/node/log_files.h"
#include "torus/node/worker_supervisor.h"

namespace torus::node {

class NodeServiceImpl final : public rpc::NodeService::CallbackService {
 public:
  // `ledger` and `workers` are owned by the caller; `node_ip` is the address workers' ports are picked on.
  // `on_change` is called after every change of the ledger, e.g. to send availability with the next heartbeat.
  // `logs` (owned by the caller; null = none served) backs ListLogs and ReadLog.
  NodeServiceImpl(BundleLedger* ledger, WorkerSupervisor* workers, std::string node_ip, std::string token,
                  std::function<void()> on_change, const LogFiles* logs = nullptr);

  grpc::ServerUnaryReactor* PrepareBundles(grpc::CallbackServerContext* ctx, const rpc::PrepareBundlesRequest* request,
                                           rpc::PrepareBundlesReply* reply) override;
  grpc::ServerUnaryReactor* CommitBundles(grpc::CallbackServerContext* ctx, const rpc::CommitBundlesRequest* request,
                                          rpc::CommitBundlesReply* reply) override;
  grpc::ServerUnaryReactor* CancelBundles(grpc::CallbackServerContext* ctx, const rpc::CancelBundlesRequest* request,
                                          rpc::CancelBundlesReply* reply) override;
  grpc::ServerUnaryReactor* ReleaseBundles(grpc::CallbackServerContext* ctx, const rpc::ReleaseBundlesRequest* request,
                                           rpc::ReleaseBundlesReply* reply) override;
  grpc::ServerUnaryReactor* GetLedger(grpc::CallbackServerContext* ctx, const rpc::GetLedgerRequest* request,
                                      rpc::LedgerView* reply) override;

  grpc::ServerUnaryReactor* StartWorker(grpc::CallbackServerContext* ctx, const rpc::StartWorkerRequest* request,
                                        rpc::StartWorkerReply* reply) override;
  grpc::ServerUnaryReactor* StopWorker(grpc::CallbackServerContext* ctx, const rpc::StopWorkerRequest* request,
                                       rpc::StopWorkerReply* reply) override;
  grpc::ServerUnaryReactor* StopOwner(grpc::CallbackServerContext* ctx, const rpc::StopOwnerRequest* request,
                                      rpc::StopOwnerReply* reply) override;
  grpc::ServerUnaryReactor* ReadWorkerLog(grpc::CallbackServerContext* ctx, const rpc::ReadWorkerLogRequest* request,
                                          rpc::ReadWorkerLogReply* reply) override;
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* ctx, const rpc::ListWorkersRequest* request,
                                        rpc::ListWorkersReply* reply) override;
  grpc::ServerUnaryReactor* FreePort(grpc::CallbackServerContext* ctx, const rpc::FreePortRequest* request,
                                     rpc::FreePortReply* reply) override;
  grpc::ServerUnaryReactor* ListLogs(grpc::CallbackServerContext* ctx, const rpc::ListLogsRequest* request,
                                     rpc::ListLogsReply* reply) override;
  grpc::ServerUnaryReactor* ReadLog(grpc::CallbackServerContext* ctx, const rpc::ReadLogRequest* request,
                                    rpc::ReadLogReply* reply) override;

 private:
  BundleLedger* ledger_;
  WorkerSupervisor* workers_;
  const std::string node_ip_;
  const std::string token_;
  const std::function<void()> on_change_;
  const LogFiles* logs_;
};

// A TCP port that was free on every address of this host a moment ago (the kernel's pick for the wildcard address;
// frameworks bind their rendezvous there), never one of the ports the TPU runtime and megascale use (8431-8438,
// 8471-8479, 8081). `ip` only names the host in errors.
absl::StatusOr<int> PickFreePort(const std::string& ip);
bool IsReservedPort(int port);

}  // namespace torus::node
