// Channels: gRPC channels and stubs of the core worker, one per address and kept, with the cluster token for each call.
//
// On a cluster with TLS (`tls_ca`, by default the file TORUS_TLS_CA names: agents give it to their workers) every
// address is reached over TLS, checked against the cluster CA and the identity its role must have: the head
// ("torus-head"), agents ("torus-node:..."), and other core workers — owners, which may be core workers
// ("torus-worker:...", worker_certificate.h) or the head (detached actors): any member.
//
// Thread-safety: thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "torus/core.grpc.pb.h"

namespace torus::core {

class Channels {
 public:
  explicit Channels(std::string token, std::string tls_ca = TlsCaFromEnvironment())
      : token_(std::move(token)), tls_ca_(std::move(tls_ca)) {}
  // $TORUS_TLS_CA, or "".
  static std::string TlsCaFromEnvironment();
  const std::string& tls_ca() const { return tls_ca_; }
  // The head at `address` (HOST:PORT, or several "A,B").
  std::shared_ptr<grpc::Channel> Head(const std::string& address);
  // An agent's port.
  std::shared_ptr<grpc::Channel> Agent(const std::string& address);
  LeaseService::Stub* Leases(const std::string& address);
  CoreWorkerService::Stub* Worker(const std::string& address);
  ObjectStoreService::Stub* Store(const std::string& address);
  void Authorize(grpc::ClientContext& ctx) const;

 private:
  // A channel to `address`: over TLS with a CA (the peer's identity `identity`, or with `identity` ending in ':' that
  // prefix, or "" any member), plaintext otherwise.
  std::shared_ptr<grpc::Channel> GetLocked(const std::string& address, const std::string& identity)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const std::string token_;
  const std::string tls_ca_;
  absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<grpc::Channel>> channels_
      ABSL_GUARDED_BY(mu_);  // by address, identity
  std::map<std::string, std::unique_ptr<LeaseService::Stub>> lease_stubs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<CoreWorkerService::Stub>> worker_stubs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<ObjectStoreService::Stub>> store_stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace torus::core
