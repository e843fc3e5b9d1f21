// ObjectStore: a node's store of large objects in shared memory. Each object is a file in the store's directory (on
// a tmpfs such as /dev/shm) that processes of this host map: a writer fills it once, then readers map it read-only,
// so a value is held once per node however many processes read it.
//
// Objects are primary (written here by their creator) or copies (pulled from another node's store). The sizes of
// all of them count against `capacity`; a creation that does not fit first evicts sealed copies, least recently
// read first (they can be pulled again), and is refused when that is not enough. Primary objects leave only when
// freed (Delete: their owner holds no reference; DeleteOwnedBy: their owner is gone). A file that is unlinked while
// a reader still maps it stays readable to that reader until it unmaps it.
//
// Thread-safety: thread-safe. Get blocks the calling thread while it waits for an object being created.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "torus/node/metrics_sampler.h"

namespace torus::node {

// The process that owns an object: its core worker's address, and its pid on the machine with `boot_id`.
struct StoreOwner {
  std::string address;
  pid_t pid = 0;
  std::string boot_id;
};

struct StoredObject {
  std::string path;
  uint64_t size = 0;
  bool primary = false;
  StoreOwner owner;
};

struct StoreStats {
  uint64_t capacity = 0;
  uint64_t used = 0;           // bytes of every object here, sealed or being written
  uint64_t objects = 0;
  uint64_t primary_bytes = 0;
  uint64_t evicted = 0;        // copies evicted to make room, since the start
};

class ObjectStore {
 public:
  // A store in `dir` (created; what an earlier store left there is removed) holding at most `capacity` bytes.
  static absl::StatusOr<std::unique_ptr<ObjectStore>> Open(std::string dir, uint64_t capacity);
  // Removes every object and the directory.
  ~ObjectStore();
  ObjectStore(const ObjectStore&) = delete;
  ObjectStore& operator=(const ObjectStore&) = delete;

  // Room for a new object of `size` bytes: the path of its file, allocated in full (writing it cannot fail for want
  // of memory). InvalidArgument for an id that is empty or over 64 bytes; AlreadyExists when it is here;
  // ResourceExhausted ("object store full: ...", with what is held) when it does not fit even after evicting copies
  // and waiting until `room_deadline` for deletions to free enough.
  absl::StatusOr<std::string> Create(const std::string& id, uint64_t size, StoreOwner owner, bool primary,
                                     std::chrono::steady_clock::time_point room_deadline = {});
  // The object is complete. NotFound when it is not being created.
  absl::Status Seal(const std::string& id);
  // The creator gave up: the object and its room go.
  void Abort(const std::string& id);
  // A sealed object, waiting until `deadline` while it is being created. NotFound when it is not here;
  // DeadlineExceeded when it is still being written.
  absl::StatusOr<StoredObject> Get(const std::string& id, std::chrono::steady_clock::time_point deadline);
  bool Contains(const std::string& id) const;
  // The agent at `agent` pulled a copy of `id`: a deletion here is forwarded to it.
  void AddCopyHolder(const std::string& id, const std::string& agent);
  // Frees the objects (unknown ids are skipped); returns the agents that hold copies of them.
  std::set<std::string> Delete(const std::vector<std::string>& ids);
  // The distinct owners of the objects here.
  std::vector<StoreOwner> Owners() const;
  // Frees every object of the owner at `address`; returns how many went.
  size_t DeleteOwnedBy(const std::string& address);

  StoreStats stats() const;
  const std::string& dir() const { return dir_; }

 private:
  ObjectStore(std::string dir, uint64_t capacity) : dir_(std::move(dir)), capacity_(capacity) {}
  struct Entry {
    StoredObject object;
    bool sealed = false;
    uint64_t last_used = 0;          // a counter: the larger, the more recent
    std::set<std::string> copy_holders;
  };
  std::string PathOf(const std::string& id) const;
  // Evicts sealed copies, least recently used first, until `size` more bytes fit; whether they do. REQUIRES: mu_.
  bool MakeRoomLocked(uint64_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(std::map<std::string, Entry>::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const uint64_t capacity_;
  mutable absl::Mutex mu_;
  absl::CondVar sealed_;  // an object was sealed or removed
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t evicted_ ABSL_GUARDED_BY(mu_) = 0;
};

// For /metrics: torus_node_object_store_bytes{kind="primary"|"copies"}, torus_node_object_store_capacity_bytes,
// torus_node_object_store_objects and torus_node_object_store_evictions_total.
std::vector<AgentSample> StoreSamples(const StoreStats& stats);

// Hex of an object id (its file name).
std::string ObjectFileName(const std::string& id);

// Removes the store directories in `parent` named `<prefix><anything>-<pid>` whose pid is not a live process (what
// agents that died left in /dev/shm); returns how many.
int RemoveLeftoverStores(const std::string& parent, const std::string& prefix);

}  // namespace torus::node
