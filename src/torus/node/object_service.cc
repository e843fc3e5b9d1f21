#include "torus/node/object_service.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/rpc/convert.h"
#include "torus/rpc/server_auth.h"

namespace torus::node {
namespace {

constexpr int64_t kMaxWaitMs = 60'000;
constexpr int kProbesBeforeGone = 2;
// A creation that does not fit waits this long for deletions under way (an owner's freed objects) to make room.
constexpr std::chrono::milliseconds kRoomWait(1000);

StoreOwner OwnerFrom(const core::ObjectOwner& o) {
  return StoreOwner{.address = o.address(), .pid = static_cast<pid_t>(o.pid()), .boot_id = o.boot_id()};
}

grpc::Status Invalid(const std::string& message) { return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message); }

grpc::Status Starting() { return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the agent is starting"); }

}  // namespace

ObjectStoreServiceImpl::ObjectStoreServiceImpl(ObjectStore* store, std::string token, std::string boot_id)
    : store_(store), token_(std::move(token)), boot_id_(std::move(boot_id)) {}

void ObjectStoreServiceImpl::Start(std::string self_address) {
  self_ = std::move(self_address);
  started_.store(true);
  watch_ = std::thread([this] { WatchLoop(); });
}

ObjectStoreServiceImpl::~ObjectStoreServiceImpl() { Stop(); }

void ObjectStoreServiceImpl::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (watch_.joinable()) watch_.join();
}

void ObjectStoreServiceImpl::Authorize(grpc::ClientContext& ctx) const {
  ctx.AddMetadata("authorization", "Bearer " + token_);
}

std::shared_ptr<grpc::Channel> ObjectStoreServiceImpl::ChannelTo(const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& channel = channels_[address];
  if (!channel) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  return channel;
}

grpc::Status ObjectStoreServiceImpl::CreateObject(grpc::ServerContext* ctx, const core::CreateObjectRequest* request,
                                                  core::CreateObjectReply* reply) {
  if (grpc::Status s = rpc::CheckToken(ctx, token_); !s.ok()) return s;
  if (!started_.load()) return Starting();
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
  if (!started_.load()) return Starting();
  if (request->abort()) {
    store_->Abort(request->object_id());
    return grpc::Status::OK;
  }
  return rpc::ToGrpc(store_->Seal(request->object_id()));
}

grpc::Status ObjectStoreServiceImpl::PullObject(grpc::ServerContext* ctx, const core::PullObjectRequest* request,
                                                core::PullObjectReply* reply) {
  if (grpc::Status s = rpc::CheckToken(ctx, token_); !s.ok()) return s;
  if (!started_.load()) return Starting();
  const std::string& id = request->object_id();
  if (id.empty()) return Invalid("object_id: required");
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(request->wait_ms(), 0, kMaxWaitMs));
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
  grpc::ClientContext ctx;
  Authorize(ctx);
  core::ReadObjectRequest request;
  request.set_object_id(id);
  request.set_reader(self_);
  auto stub = core::ObjectStoreService::NewStub(ChannelTo(source));
  auto reader = stub->ReadObject(&ctx, request);
  core::ObjectChunk chunk;
  if (!reader->Read(&chunk)) {
    grpc::Status s = reader->Finish();
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("pulling object ", ObjectFileName(id), " from ", source, ": ", s.error_message()));
  }
  const uint64_t size = static_cast<uint64_t>(chunk.size());
  auto path = store_->Create(id, size, owner, /*primary=*/false, std::chrono::steady_clock::now() + kRoomWait);
  if (!path.ok()) {
    ctx.TryCancel();
    reader->Finish();
    return path.status();  // AlreadyExists: another pull of it is under way; the caller waits for it
  }
  int fd = open(path->c_str(), O_WRONLY | O_CLOEXEC);
  uint64_t offset = 0;
  absl::Status failed;
  if (fd < 0) failed = absl::InternalError(absl::StrCat("cannot open ", *path, ": ", std::strerror(errno)));
  do {
    if (!failed.ok()) break;
    const std::string& data = chunk.data();
    if (offset + data.size() > size) {
      failed = absl::DataLossError(absl::StrCat("pulling object ", ObjectFileName(id), " from ", source,
                                                ": more bytes than its size (", size, ")"));
      break;
    }
    for (size_t done = 0; done < data.size();) {
      ssize_t n = pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        failed = absl::InternalError(absl::StrCat("cannot write ", *path, ": ", std::strerror(errno)));
        break;
      }
      done += static_cast<size_t>(n);
    }
    offset += data.size();
  } while (reader->Read(&chunk));
  if (fd >= 0) close(fd);
  if (!failed.ok()) ctx.TryCancel();
  grpc::Status finished = reader->Finish();
  if (failed.ok() && !finished.ok()) {
    failed = absl::UnavailableError(
        absl::StrCat("pulling object ", ObjectFileName(id), " from ", source, ": ", finished.error_message()));
  }
  if (failed.ok() && offset != size) {
    failed = absl::DataLossError(absl::StrCat("pulling object ", ObjectFileName(id), " from ", source, ": got ", offset,
                                              " of ", size, " bytes"));
  }
  if (!failed.ok()) {
    store_->Abort(id);
    return failed;
  }
  return store_->Seal(id);
}

grpc::Status ObjectStoreServiceImpl::ReadObject(grpc::ServerContext* ctx, const core::ReadObjectRequest* request,
                                                grpc::ServerWriter<core::ObjectChunk>* writer) {
  if (grpc::Status s = rpc::CheckToken(ctx, token_); !s.ok()) return s;
  if (!started_.load()) return Starting();
  auto object = store_->Get(request->object_id(), std::chrono::steady_clock::now() + std::chrono::seconds(10));
  if (!object.ok()) return rpc::ToGrpc(object.status());
  int fd = open(object->path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("object ", ObjectFileName(request->object_id()), " was freed while being read"));
  }
  if (!request->reader().empty()) store_->AddCopyHolder(request->object_id(), request->reader());
  core::ObjectChunk chunk;
  chunk.set_size(static_cast<int64_t>(object->size));
  uint64_t offset = 0;
  grpc::WriteOptions options;
  do {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, object->size - offset));
    std::string* data = chunk.mutable_data();
    data->resize(n);
    size_t got = 0;
    while (got < n) {
      ssize_t r = pread(fd, data->data() + got, n - got, static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    if (got < n) {
      close(fd);
      return grpc::Status(grpc::StatusCode::DATA_LOSS, absl::StrCat("short read of ", object->path));
    }
    offset += n;
    if (!writer->Write(chunk, options)) break;
    chunk.clear_size();
  } while (offset < object->size);
  close(fd);
  return grpc::Status::OK;
}

grpc::Status ObjectStoreServiceImpl::DeleteObjects(grpc::ServerContext* ctx, const core::DeleteObjectsRequest* request,
                                                   core::DeleteObjectsReply*) {
  if (grpc::Status s = rpc::CheckToken(ctx, token_); !s.ok()) return s;
  if (!started_.load()) return Starting();
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
    grpc::Status s = core::ObjectStoreService::NewStub(ChannelTo(holder))->DeleteObjects(&forward, copy, &ignored);
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
      grpc::Status s = core::CoreWorkerService::NewStub(ChannelTo(owner.address))->GetObject(&ctx, probe, &ignored);
      std::lock_guard<std::mutex> lock(mu_);
      int& failed = failed_probes_[owner.address];
      failed = s.error_code() == grpc::StatusCode::UNAVAILABLE ? failed + 1 : 0;
      gone = failed >= kProbesBeforeGone;
    }
    if (!gone) continue;
    size_t n = store_->DeleteOwnedBy(owner.address);
    spdlog::info("object store: freed {} object{} of owner {} (gone)", n, n == 1 ? "" : "s", owner.address);
    std::lock_guard<std::mutex> lock(mu_);
    failed_probes_.erase(owner.address);
    channels_.erase(owner.address);
  }
}

void ObjectStoreServiceImpl::WatchLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (stop_cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) break;
    lock.unlock();
    SweepOwners();
    lock.lock();
  }
}

}  // namespace torus::node
