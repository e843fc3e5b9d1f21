#include "torus/node/package_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "grpcpp/client_context.h"
#include "spdlog/spdlog.h"
#include "torus/head.grpc.pb.h"
#include "torus/rpc/auth.h"
#include "torus/rpc/convert.h"
#include "torus/package/pack.h"
#include "torus/package/unpack.h"

namespace torus::node {
namespace {

constexpr uint32_t kPieceBytes = 4u << 20;

bool IsSha256Hex(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// A read-only mapping of a whole file, unmapped on destruction.
class MappedFile {
 public:
  static absl::StatusOr<MappedFile> Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
    }
    MappedFile m;
    m.size_ = static_cast<size_t>(st.st_size);
    if (m.size_ > 0) {
      void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        return absl::InternalError(absl::StrCat("cannot map ", path, ": ", std::strerror(errno)));
      }
      m.data_ = static_cast<const char*>(p);
    }
    ::close(fd);
    return m;
  }
  MappedFile(MappedFile&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(o.size_) {}
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
  }
  std::string_view view() const { return {data_ == nullptr ? "" : data_, size_}; }

 private:
  MappedFile() = default;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

PackageCache::PackageCache(std::string dir, FetchFn fetch, Options options)
    : dir_(std::move(dir)), fetch_(std::move(fetch)), options_(options) {
  // An earlier agent's packages: its workers were killed when this agent started (leftovers.h), and what it left
  // half-done (partial fetches and unpacks) is no use either. The cache holds this agent's packages only.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) std::filesystem::remove_all(entry.path(), ec);
}

bool PackageCache::Has(const rpc::PackageRef& ref) const {
  absl::MutexLock lock(&mu_);
  return entries_.contains(ref.sha256());
}

uint64_t PackageCache::bytes() const {
  absl::MutexLock lock(&mu_);
  uint64_t total = 0;
  for (const auto& [sha, e] : entries_) total += e.bytes;
  return total;
}

absl::StatusOr<std::string> PackageCache::Acquire(const rpc::PackageRef& ref) {
  if (ref.name().empty() || !IsSha256Hex(ref.sha256())) {
    return absl::InvalidArgumentError(
        absl::StrCat("package reference \"", ref.name(), "\" needs a name and a sha256 of 64 lowercase hex digits"));
  }
  std::shared_ptr<Flight> flight;
  {
    absl::MutexLock lock(&mu_);
    // One fetch per package: callers that come while it runs wait for it and share its outcome.
    if (auto it = fetching_.find(ref.sha256()); it != fetching_.end()) {
      std::shared_ptr<Flight> other = it->second;
      while (!other->done) fetched_.Wait(&mu_);
      if (!other->status.ok()) return other->status;
    }
    if (auto it = entries_.find(ref.sha256()); it != entries_.end()) {
      ++it->second.users;
      it->second.last_used = ++uses_;
      return DirOf(ref);
    }
    flight = std::make_shared<Flight>();
    fetching_[ref.sha256()] = flight;
  }
  absl::StatusOr<uint64_t> unpacked = FetchAndUnpack(ref);
  std::vector<std::string> evicted;
  {
    absl::MutexLock lock(&mu_);
    flight->done = true;
    flight->status = unpacked.status();
    fetching_.erase(ref.sha256());
    fetched_.SignalAll();
    if (!unpacked.ok()) return unpacked.status();
    entries_[ref.sha256()] = Entry{*unpacked, 1, ++uses_};
    evicted = EvictLocked();
  }
  for (const std::string& path : evicted) {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  return DirOf(ref);
}

void PackageCache::Release(const std::string& sha256) {
  std::vector<std::string> evicted;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(sha256);
    if (it == entries_.end() || it->second.users == 0) return;
    --it->second.users;
    evicted = EvictLocked();
  }
  for (const std::string& path : evicted) {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
}

std::vector<std::string> PackageCache::EvictLocked() {
  uint64_t total = 0;
  for (const auto& [sha, e] : entries_) total += e.bytes;
  std::vector<std::string> evicted;
  while (total > options_.max_bytes) {
    // The least recently used package no worker runs in.
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->second.users == 0 && (victim == entries_.end() || it->second.last_used < victim->second.last_used)) {
        victim = it;
      }
    }
    if (victim == entries_.end()) break;  // everything left is in use
    // Moved aside at once (a new fetch of it may begin), removed by the caller outside the lock.
    const std::string from = absl::StrCat(dir_, "/", victim->first);
    const std::string aside = absl::StrCat(dir_, "/.tmp-evicted-", ++uses_, "-", victim->first);
    if (::rename(from.c_str(), aside.c_str()) == 0) evicted.push_back(aside);
    spdlog::info("package {} ({} bytes unpacked) evicted: the cache keeps at most {} bytes of unused packages",
                 victim->first, victim->second.bytes, options_.max_bytes);
    total -= victim->second.bytes;
    entries_.erase(victim);
  }
  return evicted;
}

absl::StatusOr<uint64_t> PackageCache::FetchAndUnpack(const rpc::PackageRef& ref) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create package cache ", dir_, ": ", ec.message()));
  const std::string zip = absl::StrCat(dir_, "/.fetch-", std::random_device{}(), "-", ref.sha256(), ".zip");
  const int fd = ::open(zip.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", zip, ": ", std::strerror(errno)));
  auto fail = [&](absl::Status s) {
    ::close(fd);
    ::unlink(zip.c_str());
    return s;
  };
  uint64_t offset = 0;
  while (offset < ref.size() || offset == 0) {
    auto piece = fetch_(ref.name(), offset, kPieceBytes);
    if (!piece.ok()) {
      return fail(absl::Status(piece.status().code(), absl::StrCat("package ", ref.name(), ": cannot fetch from the head: ",
                                                                   piece.status().message())));
    }
    if (piece->sha256 != ref.sha256() || piece->size != ref.size()) {
      return fail(absl::FailedPreconditionError(
          absl::StrCat("package ", ref.name(), ": the head holds other bytes (sha256 ", piece->sha256, ", ",
                       piece->size, " bytes) than the worker was started with (sha256 ", ref.sha256(), ")")));
    }
    if (piece->data.empty()) break;
    if (::write(fd, piece->data.data(), piece->data.size()) != static_cast<ssize_t>(piece->data.size())) {
      return fail(absl::InternalError(absl::StrCat("cannot write ", zip, ": ", std::strerror(errno))));
    }
    offset += piece->data.size();
  }
  ::close(fd);
  auto remove_zip = [&zip] { ::unlink(zip.c_str()); };
  auto mapped = MappedFile::Open(zip);
  if (!mapped.ok()) {
    remove_zip();
    return mapped.status();
  }
  const std::string sha = package::Sha256Hex(mapped->view());
  if (mapped->view().size() != ref.size() || sha != ref.sha256()) {
    remove_zip();
    return absl::FailedPreconditionError(absl::StrCat("package ", ref.name(), ": fetched ", mapped->view().size(),
                                                      " bytes with sha256 ", sha, "; expected ", ref.size(),
                                                      " bytes with sha256 ", ref.sha256()));
  }
  absl::Status unpacked = package::UnpackZip(mapped->view(), DirOf(ref), package::ZipLimits{});
  uint64_t bytes = 0;
  if (auto entries = package::ReadZipDirectory(mapped->view(), package::ZipLimits{}); entries.ok()) {
    for (const package::ZipEntryInfo& e : *entries) bytes += e.size;
  }
  remove_zip();
  if (!unpacked.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("package ", ref.name(), ": ", unpacked.message()));
  }
  spdlog::info("package {} ({} bytes, {} unpacked) unpacked into {}", ref.name(), ref.size(), bytes, DirOf(ref));
  return bytes;
}

PackageCache::FetchFn MakeHeadPackageFetcher(std::shared_ptr<grpc::Channel> channel, std::string token) {
  std::shared_ptr<rpc::HeadService::Stub> stub = rpc::HeadService::NewStub(channel);
  return [stub, token = std::move(token)](const std::string& name, uint64_t offset,
                                          uint32_t max_bytes) -> absl::StatusOr<PackageCache::Piece> {
    rpc::ReadPackageRequest request;
    request.set_name(name);
    request.set_offset(offset);
    request.set_max_bytes(max_bytes);
    grpc::ClientContext ctx;
    ctx.AddMetadata(rpc::kAuthMetadataKey, absl::StrCat("Bearer ", token));
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    rpc::ReadPackageReply reply;
    grpc::Status status = stub->ReadPackage(&ctx, request, &reply);
    if (!status.ok()) return rpc::FromGrpc(status);
    return PackageCache::Piece{std::move(*reply.mutable_data()), reply.size(), reply.sha256()};
  };
}

}  // namespace torus::node
