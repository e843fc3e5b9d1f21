// NodeServiceImpl: the agent's gRPC handlers over its BundleLedger (prepare / commit / cancel / release, and the
// ledger view), its WorkerSupervisor (start / stop / logs / list workers, and free ports for them) and its LogFiles
// (list and read the host's log files). Each checks the cluster token and converts proto to domain types.
//
// Thread-safety: thread-safe; handlers run on gRPC's callback threads; the ledger and the supervisor have their own
// locks.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "torus/common/tpu_shape.h"
#include "torus/node.grpc.pb.h"
#include "torus/common/device_env.h"
#include "torus/node/bundle_ledger.h"
#include "torus/node/log_files.h"
#include "torus/node/package_cache.h"
#include "torus/node/worker_supervisor.h"

namespace torus::node {

// This host's devices, for the isolation environment of workers started on bundles.
struct HostDevices {
  std::optional<TpuGeneration> tpu_generation;  // set on a TPU host
  int chips = 0;
  int gpus = 0;
  std::map<std::string, std::string> base_env;  // what workers inherit (the agent's environment)
};

// The environment change that gives a worker exactly its bundle's devices, over `inherited` (base env with the
// worker's own env applied): TPU_VISIBLE_CHIPS and bounds (or, holding no chip on a TPU host, the CPU guard of
// TpuIsolationEnv, except for keys the worker sets itself), and CUDA_VISIBLE_DEVICES on a GPU host.
// FailedPrecondition when its chips cannot be isolated (a count other than 1, 2, 4, 8 or the host).
absl::StatusOr<EnvChange> BundleDeviceEnv(const HostDevices& host, const std::vector<int>& chips,
                                          const std::vector<int>& gpus,
                                          const std::map<std::string, std::string>& worker_env,
                                          const std::map<std::string, std::string>& inherited);

// Proto forms the agent reports.
void ToProto(const WorkerInfo& info, rpc::WorkerView* view);
void ToProto(const LedgerEntry& entry, rpc::LedgerEntryView* view);

class NodeServiceImpl final : public rpc::NodeService::CallbackService {
 public:
  // `ledger` and `workers` are owned by the caller; `node_ip` is the address workers' ports are picked on.
  // `on_change` is called after every change of the ledger, e.g. to send availability with the next heartbeat.
  // `logs` (owned by the caller; null = none served) backs ListLogs and ReadLog. A worker started on a bundle gets
  // the bundle's devices of `devices`; ReleaseBundles stops a released bundle's workers after `release_grace_ms`.
  NodeServiceImpl(BundleLedger* ledger, WorkerSupervisor* workers, std::string node_ip, std::string token,
                  std::function<void()> on_change, const LogFiles* logs = nullptr, HostDevices devices = {},
                  int64_t release_grace_ms = 3000);
  // Ends the log reads that wait (each answers with what it has) and waits for them.
  ~NodeServiceImpl() override;

  // With TLS: the calls that reserve bundles or start and stop workers (prepare, commit, cancel, release, start,
  // stop, stop owner, free port) are the head's alone — they must carry the head's certificate, not just the token;
  // reads (ledger, workers, logs) still need only the token. Call before serving.
  void RequireHeadForControl(bool head_only) { head_only_control_ = head_only; }

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

  // A worker that names packages starts once they are in the package cache (set by SetPackageCache; without one,
  // FAILED_PRECONDITION): at once when they are, else after a fetch on a thread of its own.
  grpc::ServerUnaryReactor* StartWorker(grpc::CallbackServerContext* ctx, const rpc::StartWorkerRequest* request,
                                        rpc::StartWorkerReply* reply) override;
  grpc::ServerUnaryReactor* StopWorker(grpc::CallbackServerContext* ctx, const rpc::StopWorkerRequest* request,
                                       rpc::StopWorkerReply* reply) override;
  grpc::ServerUnaryReactor* StopOwner(grpc::CallbackServerContext* ctx, const rpc::StopOwnerRequest* request,
                                      rpc::StopOwnerReply* reply) override;
  grpc::ServerUnaryReactor* ReadWorkerLog(grpc::CallbackServerContext* ctx, const rpc::ReadWorkerLogRequest* request,
                                          rpc::ReadWorkerLogReply* reply) override;
  // Each read answered on its own (a bad or unknown one gets its error in its result); with wait_ms, one wait for
  // any of them, on one thread.
  grpc::ServerUnaryReactor* ReadWorkerLogs(grpc::CallbackServerContext* ctx, const rpc::ReadWorkerLogsRequest* request,
                                           rpc::ReadWorkerLogsReply* reply) override;
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* ctx, const rpc::ListWorkersRequest* request,
                                        rpc::ListWorkersReply* reply) override;
  grpc::ServerUnaryReactor* FreePort(grpc::CallbackServerContext* ctx, const rpc::FreePortRequest* request,
                                     rpc::FreePortReply* reply) override;
  grpc::ServerUnaryReactor* ListLogs(grpc::CallbackServerContext* ctx, const rpc::ListLogsRequest* request,
                                     rpc::ListLogsReply* reply) override;
  grpc::ServerUnaryReactor* ReadLog(grpc::CallbackServerContext* ctx, const rpc::ReadLogRequest* request,
                                    rpc::ReadLogReply* reply) override;

  // Where packages come from; set before serving.
  void SetPackageCache(PackageCache* packages) { packages_ = packages; }
  // From now on a start that waits for its packages gives up once they arrive (the agent is shutting down).
  void StopStarting() { stopping_ = true; }
  // A worker exited: the packages it ran in are no longer in use by it.
  void OnWorkerExited(const std::string& worker_id);

 private:
  // Where a worker runs and what goes first on its PYTHONPATH, from its packages.
  struct Locations {
    std::string cwd;                       // empty: the request's cwd
    std::vector<std::string> python_path;
  };
  // `abandoned` is asked once the packages are in place: true, and the worker is not started.
  grpc::Status StartWithPackages(const rpc::StartWorkerRequest& request, rpc::StartWorkerReply* reply,
                                 const std::function<bool()>& abandoned);
  grpc::Status StartNow(const rpc::StartWorkerRequest& request, const Locations& where, rpc::StartWorkerReply* reply);

  BundleLedger* ledger_;
  PackageCache* packages_ = nullptr;
  absl::Mutex package_users_mu_;
  std::map<std::string, std::vector<std::string>> package_users_
      ABSL_GUARDED_BY(package_users_mu_);  // worker id -> sha256s it holds
  WorkerSupervisor* workers_;
  const std::string node_ip_;
  // The token, and with RequireHeadForControl the head's certificate.
  grpc::Status CheckControl(const grpc::CallbackServerContext* ctx) const;

  const std::string token_;
  bool head_only_control_ = false;
  const std::function<void()> on_change_;
  const LogFiles* logs_;
  const HostDevices devices_;
  const int64_t release_grace_ms_;

  // Log reads that wait run on threads of their own, at most kMaxLogWaits at once (more answer at once).
  static constexpr int kMaxLogWaits = 64;
  std::atomic<bool> stopping_{false};
  absl::Mutex waits_mu_;
  absl::CondVar waits_cv_;
  int waits_ ABSL_GUARDED_BY(waits_mu_) = 0;
};

// A TCP port that was free on every address of this host a moment ago (the kernel's pick for the wildcard address;
// frameworks bind their rendezvous there), never one of the ports the TPU runtime and megascale use (8431-8438,
// 8471-8479, 8081). `ip` only names the host in errors.
absl::StatusOr<int> PickFreePort(const std::string& ip);
bool IsReservedPort(int port);

}  // namespace torus::node
