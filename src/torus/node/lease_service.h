// LeaseServiceImpl: WorkerLeases over gRPC (core.proto's LeaseService), with the cluster token checked on every
// call. A synchronous service: a lease request blocks its thread while it waits for resources or a worker's start.
// Thread-safety: thread-safe.
#pragma once

#include <atomic>
#include <string>

#include "torus/core.grpc.pb.h"
#include "torus/node/worker_leases.h"

namespace torus::node {

class LeaseServiceImpl final : public core::LeaseService::Service {
 public:
  // `node_id` is reported in grants. Every call answers UNAVAILABLE until Attach.
  LeaseServiceImpl(std::string token, std::string node_id);
  // `leases` (owned by the caller) serves the calls from now on.
  void Attach(WorkerLeases* leases) { leases_.store(leases); }

  grpc::Status RequestWorkerLease(grpc::ServerContext* ctx, const core::LeaseRequest* request,
                                  core::LeaseReply* reply) override;
  grpc::Status ReturnWorkerLease(grpc::ServerContext* ctx, const core::ReturnLeaseRequest* request,
                                 core::ReturnLeaseReply* reply) override;
  grpc::Status AnnounceWorker(grpc::ServerContext* ctx, const core::AnnounceWorkerRequest* request,
                              core::AnnounceWorkerReply* reply) override;
  grpc::Status WaitLeaseEnd(grpc::ServerContext* ctx, const core::WaitLeaseEndRequest* request,
                            core::WaitLeaseEndReply* reply) override;
  grpc::Status NotifyWorkerBlocked(grpc::ServerContext* ctx, const core::WorkerBlockedRequest* request,
                                   core::WorkerBlockedReply* reply) override;
  grpc::Status ListLeases(grpc::ServerContext* ctx, const core::ListLeasesRequest* request,
                          core::ListLeasesReply* reply) override;

 private:
  std::atomic<WorkerLeases*> leases_{nullptr};
  const std::string token_;
  const std::string node_id_;
};

}  // namespace torus::node
