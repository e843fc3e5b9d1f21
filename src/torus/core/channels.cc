#include "torus/core/channels.h"

#include <cstdlib>

#include "torus/common/head_target.h"
#include "torus/tls/credentials.h"
#include "torus/tls/pki.h"

namespace torus::core {

std::string Channels::TlsCaFromEnvironment() {
  const char* ca = std::getenv("TORUS_TLS_CA");
  return ca == nullptr ? "" : ca;
}

std::shared_ptr<grpc::Channel> Channels::Head(const std::string& address) {
  absl::MutexLock lock(&mu_);
  return GetLocked(address, tls::kHeadIdentity);
}

std::shared_ptr<grpc::Channel> Channels::Agent(const std::string& address) {
  absl::MutexLock lock(&mu_);
  return GetLocked(address, tls::kNodeIdentityPrefix);
}

LeaseService::Stub* Channels::Leases(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto& stub = lease_stubs_[address];
  if (!stub) stub = LeaseService::NewStub(GetLocked(address, tls::kNodeIdentityPrefix));
  return stub.get();
}

CoreWorkerService::Stub* Channels::Worker(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto& stub = worker_stubs_[address];
  if (!stub) stub = CoreWorkerService::NewStub(GetLocked(address, ""));  // an owner: a core worker or the head
  return stub.get();
}

ObjectStoreService::Stub* Channels::Store(const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto& stub = store_stubs_[address];
  if (!stub) stub = ObjectStoreService::NewStub(GetLocked(address, tls::kNodeIdentityPrefix));
  return stub.get();
}

std::shared_ptr<grpc::Channel> Channels::GetLocked(const std::string& address, const std::string& identity) {
  const bool tls = !tls_ca_.empty();
  auto& channel = channels_[{address, tls ? identity : ""}];
  if (!channel) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, -1);
    args.SetInt(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, -1);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, torus::kHeadConnectTimeoutMs);
    if (tls) tls::NameMembersByIdentity(&args);  // members are dialled by address; their certificates name none
    channel = grpc::CreateCustomChannel(HeadTarget(address),
                                        tls ? tls::ChannelCredentials({.ca = tls_ca_}, identity)
                                            : grpc::InsecureChannelCredentials(),
                                        args);
  }
  return channel;
}

void Channels::Authorize(grpc::ClientContext& ctx) const { ctx.AddMetadata("authorization", "Bearer " + token_); }

}  // namespace torus::core
