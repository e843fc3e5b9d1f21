#include "torus/node/lease_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "torus/rpc/convert.h"
#include "torus/rpc/server_auth.h"

namespace torus::node {
namespace {

// Lease waits are bounded so that a request cannot pin a thread for long.
constexpr int64_t kMaxWaitMs = 60'000;

grpc::Status Starting() { return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the agent is starting"); }

}  // namespace

LeaseServiceImpl::LeaseServiceImpl(std::string token, std::string node_id)
    : token_(std::move(token)), node_id_(std::move(node_id)) {}

grpc::Status LeaseServiceImpl::RequestWorkerLease(grpc::ServerContext* ctx, const core::LeaseRequest* request,
                                                  core::LeaseReply* reply) {
  if (grpc::Status s = rpc::CheckToken(ctx, token_); !s.ok()) return s;
  WorkerLeases* leases = leases_.load();
  if (leases == nullptr) return Starting();
  LeaseAsk ask{.job_id = request->job_id(),
               .env = {request->env().begin(), request->env().end()},
               .working_dir = request->working_dir(),
               .holder_pid = static_cast<pid_t>(request->holder_pid()),
               .holder_boot_id = request->holder_boot_id(),
               .wait_ms = std::clamp<int64_t>(request->wait_ms(), 0, kMaxWaitMs),
               .group_id = request->group_id(),
               .bundle_index = request->bundle_index()};
  for (const auto& [name, amount] : request->resources()) {
    if (amount < 0) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("resources.", name, ": a negative amount (", amount, ")"));
    }
    if (absl::Status s = ValidateResourceName(name); !s.ok()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("resources: ", s.message()));
    }
    ask.resources.SetFixed(name, amount);
  }
  auto grant = leases->Request(ask);
  if (!grant.ok()) return rpc::ToGrpc(grant.status());
  reply->set_lease_id(grant->lease_id);
  reply->set_worker_id(grant->worker_id);
  reply->set_worker_address(grant->worker_address);
  reply->set_worker_pid(grant->worker_pid);
  for (int c : grant->chips) reply->add_chips(c);
  for (int g : grant->gpus) reply->add_gpus(g);
  reply->set_node_id(node_id_);
  return grpc::Status::OK;
}

grpc::Status LeaseServiceImpl::ReturnWorkerLease(grpc::ServerContext* ctx, const core::ReturnLeaseRequest* request,
                                                 core::ReturnLeaseReply*) {
  if (grpc::Status s = rpc::CheckToken(ctx, token_); !s.ok()) return s;
  WorkerLeases* leases = leases_.load();
  if (leases == nullptr) return Starting();
  return rpc::ToGrpc(leases->Return(request->lease_id(), request->kill_worker()));
}

grpc::Status LeaseServiceImpl::AnnounceWorker(grpc::ServerContext* ctx, const core::AnnounceWorkerRequest* request,
                                              core::AnnounceWorkerReply*) {
  if (grpc::Status s = rpc::CheckToken(ctx, token_); !s.ok()) return s;
  WorkerLeases* leases = leases_.load();
  if (leases == nullptr) return Starting();
  return rpc::ToGrpc(leases->Announce(request->worker_id(), request->port(), static_cast<pid_t>(request->pid())));
}

grpc::Status LeaseServiceImpl::WaitLeaseEnd(grpc::ServerContext* ctx, const core::WaitLeaseEndRequest* request,
                                            core::WaitLeaseEndReply* reply) {
  if (grpc::Status s = rpc::CheckToken(ctx, token_); !s.ok()) return s;
  WorkerLeases* leases = leases_.load();
  if (leases == nullptr) return Starting();
  auto how = leases->WaitEnd(request->lease_id(), std::clamp<int64_t>(request->wait_ms(), 0, kMaxWaitMs));
  if (!how.ok()) return rpc::ToGrpc(how.status());
  reply->set_ended(how->has_value());
  if (how->has_value()) reply->set_how(**how);
  return grpc::Status::OK;
}

grpc::Status LeaseServiceImpl::NotifyWorkerBlocked(grpc::ServerContext* ctx, const core::WorkerBlockedRequest* request,
                                                   core::WorkerBlockedReply*) {
  if (grpc::Status s = rpc::CheckToken(ctx, token_); !s.ok()) return s;
  WorkerLeases* leases = leases_.load();
  if (leases == nullptr) return Starting();
  return rpc::ToGrpc(leases->SetWorkerBlocked(request->worker_id(), request->blocked()));
}

grpc::Status LeaseServiceImpl::ListLeases(grpc::ServerContext* ctx, const core::ListLeasesRequest*,
                                          core::ListLeasesReply* reply) {
  if (grpc::Status s = rpc::CheckToken(ctx, token_); !s.ok()) return s;
  WorkerLeases* leases = leases_.load();
  if (leases == nullptr) return Starting();
  for (const LeaseInfo& l : leases->Leases()) {
    core::LeaseView* v = reply->add_leases();
    v->set_lease_id(l.lease_id);
    v->set_job_id(l.job_id);
    v->set_worker_id(l.worker_id);
    v->set_worker_pid(l.worker_pid);
    for (const auto& [name, amount] : l.resources.amounts()) (*v->mutable_resources())[name] = amount;
    for (int c : l.chips) v->add_chips(c);
    v->set_holder_pid(l.holder_pid);
    v->set_granted_ms(l.granted_ms);
    v->set_blocked(l.blocked);
    for (const auto& [name, amount] : l.lent.amounts()) (*v->mutable_lent())[name] = amount;
  }
  reply->set_idle_workers(leases->IdleWorkers());
  reply->set_waiting_requests(leases->WaitingRequests());
  return grpc::Status::OK;
}

}  // namespace torus::node
