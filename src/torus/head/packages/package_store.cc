#include "torus/head/packages/package_store.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/package/pack.h"
#include "torus/package/unpack.h"

namespace torus::head {

std::vector<std::string> PackageUrisOf(const JobRequest& request) {
  std::vector<std::string> uris;
  if (PackageNameOf(request.working_dir)) uris.push_back(request.working_dir);
  for (const std::string& m : request.py_modules) {
    if (PackageNameOf(m)) uris.push_back(m);
  }
  return uris;
}

std::map<std::string, PackageUse> PackageUses(const ClusterState& state) {
  std::map<std::string, PackageUse> uses;
  auto use = [&uses](const std::string& uri, bool over, int64_t end_ms) {
    auto name = PackageNameOf(uri);
    if (!name) return;
    PackageUse& u = uses[*name];
    if (!over) {
      ++u.live_users;
    } else {
      u.last_end_wall_ms = std::max(u.last_end_wall_ms, end_ms);
    }
  };
  for (const auto& [id, job] : state.jobs()) {
    for (const std::string& uri : PackageUrisOf(job.request)) use(uri, job.Terminal(), job.end_time_ms);
  }
  for (const auto& [id, run] : state.runs()) {
    use(run.spec.working_dir, run.Terminal(), run.end_time_ms);
    for (const std::string& uri : run.spec.py_modules) use(uri, run.Terminal(), run.end_time_ms);
  }
  return uses;
}

PackageStore::PackageStore(StateStore* store, const Clock* clock, std::string dir, Options options)
    : store_(store), clock_(clock), dir_(std::move(dir)), options_(options) {}

PackageStore::~PackageStore() { StopCollector(); }

void PackageStore::StartCollector(int64_t period_ms) {
  collector_ = std::thread([this, period_ms] {
    absl::MutexLock lock(&collector_mu_);
    while (!collector_mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(period_ms))) {
      collector_mu_.Unlock();
      CollectGarbage();
      collector_mu_.Lock();
    }
  });
}

void PackageStore::StopCollector() {
  {
    absl::MutexLock lock(&collector_mu_);
    stopping_ = true;
  }
  if (collector_.joinable()) collector_.join();
}

std::string PackageStore::PathOf(const std::string& name) const { return absl::StrCat(dir_, "/", name); }

absl::Status PackageStore::CheckName(const std::string& name) {
  const bool chars_ok = std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
  });
  if (name.empty() || name.size() > 128 || !chars_ok || name.front() == '.' || !name.ends_with(".zip")) {
    return absl::InvalidArgumentError(
        absl::StrCat("package name \"", name, "\" is not valid; use 1-128 of [A-Za-z0-9_.-] ending in \".zip\" ",
                     "(e.g. \"_ray_pkg_0123abcd.zip\")"));
  }
  return absl::OkStatus();
}

absl::Status PackageStore::Open() {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create package directory ", dir_, ": ", ec.message()));
  std::filesystem::permissions(dir_, std::filesystem::perms::owner_all, std::filesystem::perm_options::replace, ec);
  absl::MutexLock lock(&files_mu_);
  const auto names = store_->Read([](const ClusterState& s) {
    std::set<std::string> names;
    for (const auto& [name, p] : s.packages()) names.insert(name);
    return names;
  });
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string file = entry.path().filename().string();
    if (!names.contains(file)) {
      spdlog::info("removing {}: no package record names it (an upload that did not finish)", entry.path().string());
      std::filesystem::remove_all(entry.path(), ec);
    }
  }
  {
    // When a head starts, every package's grace starts again: clients may have found them just before.
    absl::MutexLock touched(&touched_mu_);
    for (const std::string& name : names) touched_[name] = clock_->WallMillis();
  }
  for (const std::string& name : names) {
    if (std::filesystem::is_regular_file(PathOf(name), ec)) continue;
    spdlog::warn("package {} has no file in {}; forgetting it", name, dir_);
    store_->Update([&](Txn& txn) { txn.Apply(PackageRemoved{name, clock_->WallMillis()}).IgnoreError(); });
  }
  return absl::OkStatus();
}

std::string PackageStore::NewUpload(const std::string& name) const {
  return absl::StrCat(dir_, "/.upload-", std::random_device{}(), std::random_device{}(), "-", name);
}

absl::StatusOr<PackageStore::PutOutcome> PackageStore::Put(const std::string& name, const std::string& bytes) {
  if (auto s = CheckName(name); !s.ok()) return s;
  const std::string upload = NewUpload(name);
  const int fd = ::open(upload.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", upload, ": ", std::strerror(errno)));
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(upload.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", upload, ": ", std::strerror(err)));
    }
    written += static_cast<size_t>(n);
  }
  ::close(fd);
  return PutFile(name, upload);
}

absl::StatusOr<PackageStore::PutOutcome> PackageStore::PutFile(const std::string& name, const std::string& upload) {
  struct Remove {
    std::string path;
    ~Remove() {
      if (!path.empty()) ::unlink(path.c_str());
    }
  } remove{upload};
  if (auto s = CheckName(name); !s.ok()) return s;
  const int fd = ::open(upload.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", upload, ": ", std::strerror(errno)));
  struct stat st {};
  ::fstat(fd, &st);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > options_.max_bytes) {
    ::close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("package ", name, " is ", size,
                                                     " bytes; the head takes packages of at most ",
                                                     options_.max_bytes, " bytes"));
  }
  void* mapped = size == 0 ? nullptr : ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (mapped == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("cannot map ", upload, ": ", std::strerror(err)));
  }
  const std::string_view bytes(mapped == nullptr ? "" : static_cast<const char*>(mapped), size);
  const std::string sha = package::Sha256Hex(bytes);
  absl::Status checked = absl::OkStatus();
  std::optional<Package> existing = Find(name);
  if (!existing) {
    // At most two archives are checked at once: each costs a core while it inflates.
    absl::MutexLock lock(&check_mu_, absl::Condition(
                                         +[](int* n) { return *n < 2; }, &checks_));
    ++checks_;
    check_mu_.Unlock();
    checked = package::CheckZip(bytes, package::ZipLimits{});
    check_mu_.Lock();
    --checks_;
  }
  if (mapped != nullptr) ::munmap(mapped, size);
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (existing && existing->sha256 == sha) {
    Touch(name);
    return PutOutcome::kAlreadyStored;
  }
  if (!checked.ok()) return absl::InvalidArgumentError(absl::StrCat("package ", name, ": ", checked.message()));
  absl::MutexLock lock(&files_mu_);
  if (auto now = Find(name)) {
    if (now->sha256 == sha) return PutOutcome::kAlreadyStored;
    return absl::AlreadyExistsError(absl::StrCat("package ", name, " is already stored with other contents (sha256 ",
                                                 now->sha256, "); a package's name is its contents' hash"));
  }
  // On disk, and named in its directory, before the record that names it: a journaled package always has its bytes.
  if (!synced || ::rename(upload.c_str(), PathOf(name).c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot store package ", name, " in ", dir_, ": ", std::strerror(errno)));
  }
  remove.path.clear();
  if (const int dir_fd = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  Package p{name, sha, size, clock_->WallMillis()};
  absl::Status applied = store_->Update([&](Txn& txn) { return txn.Apply(PackageStored{p}); });
  if (!applied.ok()) return applied;
  spdlog::info("package {} stored ({} bytes, sha256 {})", name, size, sha);
  return PutOutcome::kStored;
}

void PackageStore::Touch(const std::string& name) {
  absl::MutexLock lock(&touched_mu_);
  touched_[name] = clock_->WallMillis();
}

std::optional<Package> PackageStore::Find(const std::string& name) const {
  return store_->Read([&](const ClusterState& s) -> std::optional<Package> {
    const Package* p = s.FindPackage(name);
    return p == nullptr ? std::nullopt : std::optional<Package>(*p);
  });
}

absl::StatusOr<std::string> PackageStore::Read(const std::string& name, uint64_t offset, uint64_t max_bytes,
                                               Package* info) const {
  std::optional<Package> p = Find(name);
  if (!p) return absl::NotFoundError(absl::StrCat("package ", name, " is not stored on the head"));
  if (offset > p->size) {
    return absl::OutOfRangeError(absl::StrCat("offset ", offset, " is past the end of package ", name, " (",
                                              p->size, " bytes)"));
  }
  const int fd = ::open(PathOf(name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("package ", name, ": ", std::strerror(errno)));
  std::string out(std::min<uint64_t>(max_bytes, p->size - offset), '\0');
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got != out.size()) return absl::DataLossError(absl::StrCat("package ", name, ": its file is shorter than recorded"));
  if (info != nullptr) *info = *p;
  return out;
}

std::vector<std::string> PackageStore::CollectGarbage() {
  absl::MutexLock lock(&files_mu_);
  const int64_t now = clock_->WallMillis();
  std::map<std::string, int64_t> touched;
  {
    absl::MutexLock t(&touched_mu_);
    touched = touched_;
  }
  std::vector<std::string> removed = store_->Update([&](Txn& txn) {
    std::vector<std::string> names;
    const std::map<std::string, PackageUse> uses = PackageUses(txn.state());
    std::vector<std::pair<std::string, int64_t>> idle;
    for (const auto& [name, p] : txn.state().packages()) {
      auto u = uses.find(name);
      if (u != uses.end() && u->second.live_users > 0) continue;
      auto t = touched.find(name);
      const int64_t since = std::max({p.stored_wall_ms, u == uses.end() ? int64_t{0} : u->second.last_end_wall_ms,
                                      t == touched.end() ? int64_t{0} : t->second});
      if (now - since >= options_.unused_grace_ms) names.push_back(name);
    }
    for (const std::string& name : names) txn.Apply(PackageRemoved{name, now}).IgnoreError();
    return names;
  });
  for (const std::string& name : removed) {
    std::error_code ec;
    std::filesystem::remove(PathOf(name), ec);
    absl::MutexLock t(&touched_mu_);
    touched_.erase(name);
    spdlog::info("package {} removed: unused for {} s", name, options_.unused_grace_ms / 1000);
  }
  return removed;
}

}  // namespace torus::head
