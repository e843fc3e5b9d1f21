// Channels: gRPC channels and stubs of the core worker, one per address and kept, with the cluster token for each call.
// Thread-safety: thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "grpcpp/grpcpp.h"
#include "torus/core.grpc.pb.h"

namespace torus::core {

class Channels {
 public:
  explicit Channels(std::string token) : token_(std::move(token)) {}
  std::shared_ptr<grpc::Channel> Get(const std::string& address);
  LeaseService::Stub* Leases(const std::string& address);
  CoreWorkerService::Stub* Worker(const std::string& address);
  ObjectStoreService::Stub* Store(const std::string& address);
  void Authorize(grpc::ClientContext& ctx) const;

 private:
  std::shared_ptr<grpc::Channel> GetLocked(const std::string& address);
  const std::string token_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;                 // guarded by mu_
  std::map<std::string, std::unique_ptr<LeaseService::Stub>> lease_stubs_;         // guarded by mu_
  std::map<std::string, std::unique_ptr<CoreWorkerService::Stub>> worker_stubs_;  // guarded by mu_
  std::map<std::string, std::unique_ptr<ObjectStoreService::Stub>> store_stubs_;   // guarded by mu_
};

}  // namespace torus::core
