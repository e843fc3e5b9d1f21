// ObjectStoreServiceImpl: the node's ObjectStore over gRPC (core.proto's ObjectStoreService), with the cluster token
// checked on every call.
//
// - CreateObject / SealObject: a process of this host writes a new object (it maps the file it is given).
// - PullObject: a process of this host wants to read an object; the answer is the path of this node's copy, pulled
//   first from the agent that holds it (OpenTransfer, then the bytes over its transfer port: object_transfer.h) when
//   there is none here. Concurrent pulls of one object share one transfer.
// - DeleteObjects: the owner freed objects; the deletion is forwarded once to the agents that pulled copies.
// - A watch thread frees the objects of owners that are gone: an owner on this machine (same boot id) when its pid
//   no longer exists, another one when its core worker refuses two probes in a row (one per second).
//
// Thread-safety: thread-safe (a synchronous service: a pull holds its RPC thread for the transfer).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "torus/core.grpc.pb.h"
#include "torus/node/object_store.h"
#include "torus/node/object_transfer.h"
#include "torus/tls/credentials.h"

namespace torus::node {

class ObjectStoreServiceImpl final : public core::ObjectStoreService::Service {
 public:
  // `store` (owned by the caller) outlives the service; `boot_id` is this machine's (ReadBootId). Every call answers
  // UNAVAILABLE until Start.
  ObjectStoreServiceImpl(ObjectStore* store, std::string token, std::string boot_id);
  ~ObjectStoreServiceImpl() override;

  // TLS with this node's certificate files: calls to other agents' stores present it (and check theirs), calls to
  // owners check theirs against the CA, and the transfer port is mutual TLS between agents. Plaintext without.
  // Call before Start.
  void SetTls(tls::TlsFiles files);
  // Serves from now on; `self_address` is this agent's host:port (what other agents pull from). Starts the transfer
  // port (on the same host) and the owner watch. Call once; Unavailable when the transfer port cannot listen.
  absl::Status Start(std::string self_address);

  grpc::Status CreateObject(grpc::ServerContext* ctx, const core::CreateObjectRequest* request,
                            core::CreateObjectReply* reply) override;
  grpc::Status SealObject(grpc::ServerContext* ctx, const core::SealObjectRequest* request,
                          core::SealObjectReply* reply) override;
  grpc::Status PullObject(grpc::ServerContext* ctx, const core::PullObjectRequest* request,
                          core::PullObjectReply* reply) override;
  grpc::Status OpenTransfer(grpc::ServerContext* ctx, const core::OpenTransferRequest* request,
                            core::OpenTransferReply* reply) override;
  grpc::Status DeleteObjects(grpc::ServerContext* ctx, const core::DeleteObjectsRequest* request,
                             core::DeleteObjectsReply* reply) override;

  // One look at the owners of the objects here (the watch thread's step; public for tests).
  void SweepOwners();
  // Stops the watch thread. Idempotent.
  void Stop();

 private:
  // Copies `id` from the agent at `source` into this store.
  absl::Status Pull(const std::string& id, const std::string& source, const StoreOwner& owner);
  // A channel to another agent's store (`agent`, with the agents' credentials) or to an owner (a core worker).
  std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address, bool agent);
  void Authorize(grpc::ClientContext& ctx) const;
  void WatchLoop();

  ObjectStore* const store_;
  const std::string token_;
  const std::string boot_id_;
  std::string self_;                  // set once by Start, before started_
  std::unique_ptr<TransferServer> transfer_;  // likewise
  std::atomic<bool> started_{false};

  absl::Mutex mu_;
  absl::CondVar stop_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::pair<std::string, bool>, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
  std::optional<tls::TlsFiles> tls_;                              // set before Start
  std::shared_ptr<grpc::ChannelCredentials> agent_credentials_;  // likewise
  std::shared_ptr<grpc::ChannelCredentials> owner_credentials_;  // likewise
  std::map<std::string, int> failed_probes_ ABSL_GUARDED_BY(mu_);  // remote owner -> probes refused in a row
  std::thread watch_;
};

}  // namespace torus::node
