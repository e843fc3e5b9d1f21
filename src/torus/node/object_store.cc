#include "torus/node/object_store.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "torus/common/status.h"
#include "torus/common/steady_wait.h"
#include "torus/common/strings.h"

namespace torus::node {

std::string ObjectFileName(const std::string& id) { return absl::BytesToHexString(id); }

std::vector<AgentSample> StoreSamples(const StoreStats& s) {
  return {{.name = "torus_node_object_store_bytes",
           .value = static_cast<double>(s.primary_bytes),
           .labels = {{"kind", "primary"}}},
          {.name = "torus_node_object_store_bytes",
           .value = static_cast<double>(s.used - s.primary_bytes),
           .labels = {{"kind", "copies"}}},
          {.name = "torus_node_object_store_capacity_bytes", .value = static_cast<double>(s.capacity)},
          {.name = "torus_node_object_store_objects", .value = static_cast<double>(s.objects)},
          {.name = "torus_node_object_store_evictions_total", .value = static_cast<double>(s.evicted)}};
}

int RemoveLeftoverStores(const std::string& parent, const std::string& prefix) {
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(prefix) || !entry.is_directory(ec)) continue;
    const size_t dash = name.rfind('-');
    pid_t pid = 0;
    if (dash == std::string::npos || !absl::SimpleAtoi(name.substr(dash + 1), &pid) || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::filesystem::remove_all(entry.path(), ec);
    if (!ec) ++removed;
  }
  return removed;
}

absl::StatusOr<std::unique_ptr<ObjectStore>> ObjectStore::Open(std::string dir, uint64_t capacity) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create the object store directory ", dir, ": ", ec.message()));
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  return std::unique_ptr<ObjectStore>(new ObjectStore(std::move(dir), capacity));
}

ObjectStore::~ObjectStore() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string ObjectStore::PathOf(const std::string& id) const { return absl::StrCat(dir_, "/", ObjectFileName(id)); }

absl::StatusOr<std::string> ObjectStore::Create(const std::string& id, uint64_t size, StoreOwner owner, bool primary,
                                                std::chrono::steady_clock::time_point room_deadline) {
  if (id.empty() || id.size() > 64) {
    return absl::InvalidArgumentError(absl::StrCat("object_id: must be 1 to 64 bytes, got ", id.size()));
  }
  absl::MutexLock lock(&mu_);
  if (entries_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("object ", ObjectFileName(id), " is already in this node's store"));
  }
  bool fits = MakeRoomLocked(size);
  while (!fits && size <= capacity_ && !WaitUntil(sealed_, mu_, room_deadline)) {
    if (entries_.contains(id)) {
      return absl::AlreadyExistsError(absl::StrCat("object ", ObjectFileName(id), " is already in this node's store"));
    }
    fits = MakeRoomLocked(size);
  }
  if (entries_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("object ", ObjectFileName(id), " is already in this node's store"));
  }
  if (!fits) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "object store full: an object of ", HumanBytes(size), " does not fit; this node's store holds ",
        HumanBytes(used_), " of ", HumanBytes(capacity_), " in ", entries_.size(),
        " objects (free objects by dropping their refs, or start the node with a larger --object-store-memory)"));
  }
  const std::string path = PathOf(id);
  int fd = open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("cannot create", path);
  if (size > 0) {
    // Allocate every page now: a tmpfs that runs out fails here, not with SIGBUS in the writer.
    if (int err = posix_fallocate(fd, 0, static_cast<off_t>(size)); err != 0) {
      close(fd);
      unlink(path.c_str());
      if (err == ENOSPC) {
        return absl::ResourceExhaustedError(absl::StrCat("object store full: the file system of ", dir_,
                                                         " has no room for ", HumanBytes(size)));
      }
      return absl::InternalError(absl::StrCat("cannot allocate ", path, ": ", std::strerror(err)));
    }
  }
  close(fd);
  Entry& e = entries_[id];
  e.object = StoredObject{.path = path, .size = size, .primary = primary, .owner = std::move(owner)};
  e.last_used = ++clock_;
  used_ += size;
  return path;
}

absl::Status ObjectStore::Seal(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("object ", ObjectFileName(id), " is not being created in this store"));
  }
  it->second.sealed = true;
  sealed_.SignalAll();
  return absl::OkStatus();
}

void ObjectStore::Abort(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.sealed) return;
  RemoveLocked(it);
  sealed_.SignalAll();
}

absl::StatusOr<StoredObject> ObjectStore::Get(const std::string& id, std::chrono::steady_clock::time_point deadline) {
  absl::MutexLock lock(&mu_);
  while (true) {
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      return absl::NotFoundError(absl::StrCat("object ", ObjectFileName(id), " is not in this node's store"));
    }
    if (it->second.sealed) {
      it->second.last_used = ++clock_;
      return it->second.object;
    }
    if (WaitUntil(sealed_, mu_, deadline)) {
      if (auto again = entries_.find(id); again != entries_.end() && again->second.sealed) continue;
      return absl::DeadlineExceededError(
          absl::StrCat("object ", ObjectFileName(id), " is still being written to this node's store"));
    }
  }
}

bool ObjectStore::Contains(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  return entries_.contains(id);
}

void ObjectStore::AddCopyHolder(const std::string& id, const std::string& agent) {
  absl::MutexLock lock(&mu_);
  if (auto it = entries_.find(id); it != entries_.end()) it->second.copy_holders.insert(agent);
}

std::set<std::string> ObjectStore::Delete(const std::vector<std::string>& ids) {
  std::set<std::string> holders;
  absl::MutexLock lock(&mu_);
  for (const std::string& id : ids) {
    auto it = entries_.find(id);
    if (it == entries_.end()) continue;
    holders.insert(it->second.copy_holders.begin(), it->second.copy_holders.end());
    RemoveLocked(it);
  }
  sealed_.SignalAll();
  return holders;
}

std::vector<StoreOwner> ObjectStore::Owners() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, StoreOwner> by_address;
  for (const auto& [id, e] : entries_) by_address.emplace(e.object.owner.address, e.object.owner);
  std::vector<StoreOwner> out;
  for (auto& [address, owner] : by_address) out.push_back(owner);
  return out;
}

size_t ObjectStore::DeleteOwnedBy(const std::string& address) {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if (it->second.object.owner.address == address) {
      RemoveLocked(it);
      ++n;
    }
    it = next;
  }
  sealed_.SignalAll();
  return n;
}

StoreStats ObjectStore::stats() const {
  absl::MutexLock lock(&mu_);
  StoreStats s{.capacity = capacity_, .used = used_, .objects = entries_.size(), .evicted = evicted_};
  for (const auto& [id, e] : entries_) {
    if (e.object.primary) s.primary_bytes += e.object.size;
  }
  return s;
}

bool ObjectStore::MakeRoomLocked(uint64_t size) {
  if (size > capacity_) return false;
  while (capacity_ - used_ < size) {
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      const Entry& e = it->second;
      if (e.object.primary || !e.sealed) continue;
      if (victim == entries_.end() || e.last_used < victim->second.last_used) victim = it;
    }
    if (victim == entries_.end()) return false;
    RemoveLocked(victim);
    ++evicted_;
  }
  return true;
}

void ObjectStore::RemoveLocked(std::map<std::string, Entry>::iterator it) {
  unlink(it->second.object.path.c_str());
  used_ -= it->second.object.size;
  entries_.erase(it);
}

}  // namespace torus::node
