#include "torus/node/object_service.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"
#include "torus/rpc/convert.h"
#include "torus/rpc/server_auth.h"
#include "torus/tls/pki.h"

namespace torus::node {
namespace {

constexpr int64_t kMaxPullWaitMs = 60'000;
constexpr int kProbesBeforeGone = 2;
// A creation that does not fit waits this long for deletions under way (an owner's freed objects) to make room.
constexpr std::chrono::milliseconds kRoomWait(1000);

StoreOwner OwnerFrom(const core::ObjectOwner& o) {
  return StoreOwner{.address = o.address(), .pid = static_cast<pid_t>(o.pid()), .boot_id = o.boot_id()};
}

grpc::Status Invalid(const std::string& message) { return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message); }

grpc::Status StoreStarting() { return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the agent is starting"); }

}  // namespace

ObjectStoreServiceImpl::ObjectStoreServiceImpl(ObjectStore* store, std::string token, std::string boot_id)
    : store_(store), token_(std::move(token)), boot_id_(std::move(boot_id)) {}

void ObjectStoreServiceImpl::SetTls(tls::TlsFiles files) {
  agent_credentials_ = tls::ChannelCredentials(files, tls::kNodeIdentityPrefix);
  owner_credentials_ = tls::ChannelCredentials({.ca = files.ca}, "");
  tls_ = std::move(files);
}

absl::Status ObjectStoreServiceImpl::Start(std::string self_address) {
  auto transfer = TransferServer::Start(self_address.substr(0, self_address.rfind(':')), tls_ ? &*tls_ : nullptr);
  if (!transfer.ok()) return transfer.status();
  transfer_ = *std::move(transfer);
  self_ = std::move(self_address);
  started_.store(true);
  watch_ = std::thread([this] { WatchLoop(); });
  return absl::OkStatus();
}

ObjectStoreServiceImpl::~ObjectStoreServiceImpl() { Stop(); }

void ObjectStoreServiceImpl::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  stop_cv_.SignalAll();
  if (watch_.joinable()) watch_.join();
  if (transfer_) transfer_->Stop();
}

void ObjectStoreServiceImpl::Authorize(grpc::ClientContext& ctx) const {
  ctx.AddMetadata("authorization", "Bearer " + token_);
}

std::shared_ptr<grpc::Channel> ObjectStoreServiceImpl::ChannelTo(const std::string& address, bool agent) {
  absl::MutexLock lock(&mu_);
  auto& channel = channels_[{address, agent}];
  if (!channel) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    std::shared_ptr<grpc::ChannelCredentials> credentials = agent ? agent_credentials_ : owner_credentials_;
    if (credentials) tls::NameMembersByIdentity(&args);  // members are dialled by address
    channel = grpc::CreateCustomChannel(address, credentials ? credentials : grpc::InsecureChannelCredentials(), args);
  }
  return channel;
}

grpc::Status ObjectStoreServiceImpl::CreateObject(grpc::ServerContext* ctx, const core::CreateObjectRequest* request,
                                                  core::CreateObjectReply* reply) {
  if (grpc::Status s = rpc::CheckToken(ctx, token_); !s.ok()) return s;
  if (!started_.load()) return StoreStarting();
  if (request->size() < 0) return Invalid(absl::StrCat("size: must be >= 0, got ", request->size()));
  if (request->owner().address().empty()) return Invalid("owner.address: required (the owner's host:port)");
  auto path = store_->Create(request->object_id(), static_cast<uint64_t>(request->size()), OwnerFrom(request->owner()),
                             /*primary=*/true, std::chrono::steady_clock::now() + kRoomWait);
  if (!path.ok()) return rpc::ToGrpc(path.status());
  reply->set_path(*path);
  return grpc::Status::OK;
}

grpc::Status ObjectStoreServiceImpl::SealObject(grpc::ServerContext* ctx, const core::SealObjectRequest* request,
                                                core::SealObjectReply*) {
  if (grpc::Status s = rpc::CheckToken(ctx, token_); !s.ok()) return s;
  if (!started_.load()) return StoreStarting();
  if (request->abort()) {
    store_->Abort(request->object_id());
    return grpc::Status::OK;
  }
  return rpc::ToGrpc(store_->Seal(request->object_id()));
}

grpc::Status ObjectStoreServiceImpl::PullObject(grpc::ServerContext* ctx, const core::PullObjectRequest* request,
                                                core::PullObjectReply* reply) {
  if (grpc::Status s = rpc::CheckToken(ctx, token_); !s.ok()) return s;
  if (!started_.load()) return StoreStarting();
  const std::string& id = request->object_id();
  if (id.empty()) return Invalid("object_id: required");
  if (request->owner().address().empty()) return Invalid("owner.address: required (the owner's host:port)");
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(request->wait_ms(), 0, kMaxPullWaitMs));
  if (!store_->Contains(id)) {
    if (request->source().empty() || request->source() == self_) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("object ", ObjectFileName(id), " is no longer in the store of node ", self_));
    }
    if (absl::Status s = Pull(id, request->source(), OwnerFrom(request->owner()));
        !s.ok() && s.code() != absl::StatusCode::kAlreadyExists) {
      return rpc::ToGrpc(s);
    }
  }
  auto object = store_->Get(id, deadline);
  if (!object.ok()) return rpc::ToGrpc(object.status());
  reply->set_path(object->path);
  reply->set_size(static_cast<int64_t>(object->size));
  return grpc::Status::OK;
}

absl::Status ObjectStoreServiceImpl::Pull(const std::string& id, const std::string& source, const StoreOwner& owner) {
  auto fail = [&](absl::StatusCode code, const std::string& why) {
    return absl::Status(code, absl::StrCat("pulling object ", ObjectFileName(id), " from ", source, ": ", why));
  };
  grpc::ClientContext ctx;
  Authorize(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  core::OpenTransferRequest request;
  request.set_object_id(id);
  request.set_reader(self_);
  core::OpenTransferReply opened;
  grpc::Status s = core::ObjectStoreService::NewStub(ChannelTo(source, /*agent=*/true))->OpenTransfer(&ctx, request, &opened);
  if (!s.ok()) return fail(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
  if (opened.size() < 0 || opened.port() <= 0 || opened.port() > 65535 || opened.ticket().size() != kTicketBytes) {
    return fail(absl::StatusCode::kDataLoss, "a malformed transfer offer");
  }
  const uint64_t size = static_cast<uint64_t>(opened.size());
  // AlreadyExists: another pull of it is under way; the caller waits for it.
  auto path = store_->Create(id, size, owner, /*primary=*/false, std::chrono::steady_clock::now() + kRoomWait);
  if (!path.ok()) return path.status();
  int fd = open(path->c_str(), O_RDWR | O_CLOEXEC);
  absl::Status fetched = fd < 0 ? absl::InternalError(absl::StrCat("cannot open ", *path, ": ", std::strerror(errno)))
                                : FetchTransfer(source.substr(0, source.rfind(':')), opened.port(), opened.ticket(),
                                                fd, size, tls_ ? &*tls_ : nullptr);
  if (fd >= 0) close(fd);
  if (!fetched.ok()) {
    store_->Abort(id);
    return fail(fetched.code(), std::string(fetched.message()));
  }
  return store_->Seal(id);
}

grpc::Status ObjectStoreServiceImpl::OpenTransfer(grpc::ServerContext* ctx, const core::OpenTransferRequest* request,
                                                  core::OpenTransferReply* reply) {
  if (grpc::Status s = rpc::CheckToken(ctx, token_); !s.ok()) return s;
  if (!started_.load()) return StoreStarting();
  auto object = store_->Get(request->object_id(), std::chrono::steady_clock::now() + std::chrono::seconds(10));
  if (!object.ok()) return rpc::ToGrpc(object.status());
  if (!request->reader().empty()) store_->AddCopyHolder(request->object_id(), request->reader());
  reply->set_size(static_cast<int64_t>(object->size));
  reply->set_port(transfer_->port());
  reply->set_ticket(transfer_->Issue(object->path, object->size));
  return grpc::Status::OK;
}

grpc::Status ObjectStoreServiceImpl::DeleteObjects(grpc::ServerContext* ctx, const core::DeleteObjectsRequest* request,
                                                   core::DeleteObjectsReply*) {
  if (grpc::Status s = rpc::CheckToken(ctx, token_); !s.ok()) return s;
  if (!started_.load()) return StoreStarting();
  std::vector<std::string> ids(request->object_ids().begin(), request->object_ids().end());
  std::set<std::string> holders = store_->Delete(ids);
  if (request->forwarded()) return grpc::Status::OK;
  for (const std::string& holder : holders) {
    if (holder == self_) continue;
    grpc::ClientContext forward;
    Authorize(forward);
    forward.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    core::DeleteObjectsRequest copy = *request;
    copy.set_forwarded(true);
    core::DeleteObjectsReply ignored;
    grpc::Status s = core::ObjectStoreService::NewStub(ChannelTo(holder, /*agent=*/true))->DeleteObjects(&forward, copy, &ignored);
    if (!s.ok()) spdlog::warn("object store: cannot forward a deletion to {}: {}", holder, s.error_message());
  }
  return grpc::Status::OK;
}

void ObjectStoreServiceImpl::SweepOwners() {
  for (const StoreOwner& owner : store_->Owners()) {
    bool gone = false;
    if (!owner.boot_id.empty() && owner.boot_id == boot_id_ && owner.pid > 0) {
      gone = kill(owner.pid, 0) != 0 && errno == ESRCH;
    } else {
      grpc::ClientContext ctx;
      Authorize(ctx);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      core::GetObjectRequest probe;  // an empty id: answered at once by a live core worker
      core::GetObjectReply ignored;
      grpc::Status s = core::CoreWorkerService::NewStub(ChannelTo(owner.address, /*agent=*/false))->GetObject(&ctx, probe, &ignored);
      absl::MutexLock lock(&mu_);
      int& failed = failed_probes_[owner.address];
      failed = s.error_code() == grpc::StatusCode::UNAVAILABLE ? failed + 1 : 0;
      gone = failed >= kProbesBeforeGone;
    }
    if (!gone) continue;
    size_t n = store_->DeleteOwnedBy(owner.address);
    spdlog::info("object store: freed {} object{} of owner {} (gone)", n, n == 1 ? "" : "s", owner.address);
    absl::MutexLock lock(&mu_);
    failed_probes_.erase(owner.address);
    channels_.erase({owner.address, false});
  }
}

void ObjectStoreServiceImpl::WatchLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (!stopping_) {
      if (stop_cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
    }
    if (stopping_) break;
    mu_.Unlock();
    SweepOwners();
    mu_.Lock();
  }
}

}  // namespace torus::node
