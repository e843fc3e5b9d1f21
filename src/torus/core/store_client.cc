#include "torus/core/store_client.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "torus/core/ids.h"

namespace torus::core {
namespace {

constexpr char kMagic[8] = {'T', 'O', 'R', 'U', 'S', 'O', 'B', '1'};
constexpr uint64_t kAlign = 64;
constexpr uint32_t kMaxBuffers = 1 << 20;

uint64_t AlignUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

template <typename T>
void Append(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
bool Read(const char* bytes, uint64_t size, uint64_t& at, T& v) {
  if (size < sizeof(T) || at > size - sizeof(T)) return false;
  std::memcpy(&v, bytes + at, sizeof(T));
  at += sizeof(T);
  return true;
}

// Writes all of `data` at `offset`.
absl::Status WriteAt(int fd, std::string_view data, uint64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), absl::StrCat(what, s.error_message()));
}

}  // namespace

uint64_t PartsSize(const ValueParts& parts) {
  uint64_t n = parts.data.size();
  for (std::string_view b : parts.buffers) n += b.size();
  return n;
}

StoredLayout LayoutOf(const ValueParts& parts) {
  StoredLayout layout;
  layout.format = std::string(parts.format);
  uint64_t at = AlignUp(sizeof(kMagic) + 4 + 4 + 8 + 8 * parts.buffers.size() + parts.format.size());
  layout.data = {at, parts.data.size()};
  at = AlignUp(at + parts.data.size());
  for (std::string_view b : parts.buffers) {
    layout.buffers.push_back({at, b.size()});
    at = AlignUp(at + b.size());
  }
  layout.total = at;
  return layout;
}

std::string EncodeHeader(const StoredLayout& layout) {
  std::string out(kMagic, sizeof(kMagic));
  Append<uint32_t>(out, static_cast<uint32_t>(layout.format.size()));
  Append<uint32_t>(out, static_cast<uint32_t>(layout.buffers.size()));
  Append<uint64_t>(out, layout.data.size);
  for (const StoredSpan& b : layout.buffers) Append<uint64_t>(out, b.size);
  out += layout.format;
  return out;
}

absl::StatusOr<StoredLayout> DecodeLayout(const char* bytes, uint64_t size) {
  auto bad = [](const char* why) { return absl::DataLossError(absl::StrCat("not a stored value: ", why)); };
  if (size < sizeof(kMagic) || std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0) return bad("no TORUSOB1 header");
  uint64_t at = sizeof(kMagic);
  uint32_t format_len = 0, count = 0;
  uint64_t data_len = 0;
  if (!Read(bytes, size, at, format_len) || !Read(bytes, size, at, count) || !Read(bytes, size, at, data_len)) {
    return bad("a short header");
  }
  if (count > kMaxBuffers || format_len > 256) return bad("a header out of range");
  ValueParts shape;
  std::vector<uint64_t> lens(count);
  for (uint64_t& len : lens) {
    if (!Read(bytes, size, at, len)) return bad("a short header");
  }
  if (at + format_len > size) return bad("a short header");
  // Lay the parts out as a writer would, then check that they fit.
  std::string format(bytes + at, format_len);
  StoredLayout layout;
  layout.format = format;
  uint64_t offset = AlignUp(at + format_len);
  auto place = [&](uint64_t len, StoredSpan& span) {
    if (offset > size || len > size - offset) return false;
    span = {offset, len};
    offset = AlignUp(offset + len);
    return true;
  };
  if (!place(data_len, layout.data)) return bad("its data runs past its end");
  layout.buffers.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    if (!place(lens[i], layout.buffers[i])) return bad("a buffer runs past its end");
  }
  layout.total = std::min(offset, size);
  return layout;
}

absl::StatusOr<std::shared_ptr<MappedObject>> MappedObject::Map(const std::string& path, uint64_t size) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, " is gone (the object was freed)"));
    return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
  }
  void* p = size == 0 ? MAP_FAILED : mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) return absl::InternalError(absl::StrCat("cannot map ", path, ": ", std::strerror(err)));
  std::shared_ptr<MappedObject> mapped(new MappedObject(static_cast<const char*>(p), size));
  auto layout = DecodeLayout(mapped->data_, size);
  if (!layout.ok()) return absl::DataLossError(absl::StrCat(path, ": ", layout.status().message()));
  mapped->layout_ = *std::move(layout);
  return mapped;
}

MappedObject::~MappedObject() { munmap(const_cast<char*>(data_), size_); }

StoreClient::StoreClient(Channels* channels, std::string local_agent, OwnerIdentity self)
    : channels_(channels), local_agent_(std::move(local_agent)), self_(std::move(self)) {
  sender_ = std::thread([this] { DeleteLoop(); });
}

StoreClient::~StoreClient() { Flush(0); }

absl::StatusOr<std::string> StoreClient::Create(const std::string& id, uint64_t size, const OwnerIdentity& owner) {
  CreateObjectRequest request;
  request.set_object_id(id);
  request.set_size(static_cast<int64_t>(size));
  request.mutable_owner()->set_address(owner.address);
  request.mutable_owner()->set_pid(owner.pid);
  request.mutable_owner()->set_boot_id(owner.boot_id);
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext ctx;
    channels_->Authorize(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    CreateObjectReply reply;
    grpc::Status s = channels_->Store(local_agent_)->CreateObject(&ctx, request, &reply);
    if (s.ok()) return reply.path();
    if (s.error_code() == grpc::StatusCode::ALREADY_EXISTS && attempt == 0) {
      SendDeletes(local_agent_, {id});  // left by an earlier attempt of its task
      continue;
    }
    return FromGrpc(s, "");
  }
}

void StoreClient::Seal(const std::string& id, bool abort) {
  grpc::ClientContext ctx;
  channels_->Authorize(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  SealObjectRequest request;
  request.set_object_id(id);
  request.set_abort(abort);
  SealObjectReply reply;
  channels_->Store(local_agent_)->SealObject(&ctx, request, &reply);
}

absl::StatusOr<Value> StoreClient::Write(const std::string& id, const ValueParts& parts, const OwnerIdentity& owner) {
  const StoredLayout layout = LayoutOf(parts);
  auto path = Create(id, layout.total, owner);
  if (!path.ok()) return path.status();
  int fd = open(path->c_str(), O_WRONLY | O_CLOEXEC);
  absl::Status written = fd < 0 ? absl::InternalError(absl::StrCat("cannot open ", *path, ": ", std::strerror(errno)))
                                : WriteAt(fd, EncodeHeader(layout), 0, *path);
  if (written.ok()) written = WriteAt(fd, parts.data, layout.data.offset, *path);
  for (size_t i = 0; written.ok() && i < parts.buffers.size(); ++i) {
    written = WriteAt(fd, parts.buffers[i], layout.buffers[i].offset, *path);
  }
  if (fd >= 0) close(fd);
  Seal(id, !written.ok());
  if (!written.ok()) return written;
  if (owner.address == self_.address) {
    absl::MutexLock lock(&mu_);
    written_[id] = Written{.path = *path, .size = layout.total};
  }
  return Value{.format = std::string(parts.format), .location = local_agent_, .stored_size = layout.total};
}

absl::StatusOr<std::shared_ptr<MappedObject>> StoreClient::Map(const std::string& id, const Value& value,
                                                              const std::string& owner_address) {
  std::optional<Written> own;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = mapped_.find(id); it != mapped_.end()) {
      if (auto live = it->second.lock()) return live;
      mapped_.erase(it);
    }
    if (auto it = written_.find(id); it != written_.end()) own = it->second;
  }
  if (own.has_value()) {
    // This process wrote it here and has not freed it: a primary object stays until freed, so its file is there.
    auto mapped = MappedObject::Map(own->path, own->size);
    if (mapped.ok()) {
      absl::MutexLock lock(&mu_);
      mapped_[id] = *mapped;
      return mapped;
    }
    // Freed meanwhile: the agent says so.
  }
  // Once more if the copy was evicted between the pull and the map.
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext ctx;
    channels_->Authorize(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
    PullObjectRequest request;
    request.set_object_id(id);
    request.set_source(value.location);
    request.mutable_owner()->set_address(owner_address);
    request.set_wait_ms(60'000);
    PullObjectReply reply;
    grpc::Status s = channels_->Store(local_agent_)->PullObject(&ctx, request, &reply);
    if (!s.ok()) {
      return FromGrpc(s, absl::StrCat("object ", Hex(id), " (in the store of ", value.location, "): "));
    }
    auto mapped = MappedObject::Map(reply.path(), static_cast<uint64_t>(reply.size()));
    if (mapped.ok()) {
      absl::MutexLock lock(&mu_);
      // Forget mappings that are gone, now and then, so that the map does not grow with every object read.
      if (mapped_.size() >= 1024) std::erase_if(mapped_, [](const auto& kv) { return kv.second.expired(); });
      mapped_[id] = *mapped;
      return mapped;
    }
    if (mapped.status().code() != absl::StatusCode::kNotFound || attempt > 0) return mapped;
  }
}

void StoreClient::Delete(const std::string& location, const std::string& id) {
  absl::MutexLock lock(&mu_);
  written_.erase(id);
  if (stopping_) return;
  deletes_.emplace_back(location, id);
  cv_.SignalAll();
}

void StoreClient::SendDeletes(const std::string& location, const std::vector<std::string>& ids) {
  grpc::ClientContext ctx;
  channels_->Authorize(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  DeleteObjectsRequest request;
  for (const std::string& id : ids) request.add_object_ids(id);
  DeleteObjectsReply reply;
  channels_->Store(location)->DeleteObjects(&ctx, request, &reply);
}

void StoreClient::DeleteLoop() {
  mu_.Lock();
  while (true) {
    while (!(stopping_ || !deletes_.empty())) cv_.Wait(&mu_);
    if (deletes_.empty()) break;  // stopping, all sent
    std::map<std::string, std::vector<std::string>> batch;
    while (!deletes_.empty()) {
      batch[deletes_.front().first].push_back(std::move(deletes_.front().second));
      deletes_.pop_front();
    }
    sending_ = true;
    mu_.Unlock();
    for (const auto& [location, ids] : batch) SendDeletes(location, ids);
    mu_.Lock();
    sending_ = false;
    cv_.SignalAll();
  }
  mu_.Unlock();
}

void StoreClient::Flush(int64_t timeout_ms) {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!(deletes_.empty() && !sending_)) {
      if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
    }
  }
  if (sender_.joinable()) sender_.join();
}

}  // namespace torus::core
