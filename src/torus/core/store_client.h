// StoreClient: a core worker's side of its node's object store (the agent's ObjectStoreService). A large value is
// written straight from the language's buffers into a file of the store (one copy), and read by mapping the node's
// copy read-only (pulled first from the node that holds it, when that is another): a numpy array read back is a view
// of the store's pages, however many processes of the node read it.
//
// Layout of a stored value (little-endian): "TORUSOB1", u32 format length, u32 buffer count, u64 data length, one u64
// length per buffer, the format; then the data and each buffer, each starting at a multiple of 64 bytes.
//
// Thread-safety: thread-safe. Deletions are sent by a thread of the client's own, in order.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "torus/core/channels.h"
#include "torus/core/object_table.h"

namespace torus::core {

// Values at least this large go to the store (smaller ones travel inline, as Ray's).
inline constexpr uint64_t kInlineMaxBytes = 100 * 1024;

// A value as the language has it: views of its serialized bytes and out-of-band buffers.
struct ValueParts {
  std::string_view format;
  std::string_view data;
  std::vector<std::string_view> buffers;
};

uint64_t PartsSize(const ValueParts& parts);

struct StoredSpan {
  uint64_t offset = 0;
  uint64_t size = 0;
};
struct StoredLayout {
  std::string format;
  StoredSpan data;
  std::vector<StoredSpan> buffers;
  uint64_t total = 0;  // bytes of the whole stored value
};
// Where each part goes in a stored value.
StoredLayout LayoutOf(const ValueParts& parts);
// The header of a stored value, to write at offset 0 (its data starts at layout.data.offset).
std::string EncodeHeader(const StoredLayout& layout);
// Reads the layout of a stored value of `size` bytes; DataLoss naming what is wrong when it is not one.
absl::StatusOr<StoredLayout> DecodeLayout(const char* bytes, uint64_t size);

// A read-only mapping of a stored value, unmapped when the last holder lets go.
class MappedObject {
 public:
  static absl::StatusOr<std::shared_ptr<MappedObject>> Map(const std::string& path, uint64_t size);
  ~MappedObject();
  MappedObject(const MappedObject&) = delete;
  MappedObject& operator=(const MappedObject&) = delete;
  const char* data() const { return data_; }
  uint64_t size() const { return size_; }
  const StoredLayout& layout() const { return layout_; }

 private:
  MappedObject(const char* data, uint64_t size) : data_(data), size_(size) {}
  const char* data_;
  uint64_t size_;
  StoredLayout layout_;
};

// Who owns a stored object, as the store is told.
struct OwnerIdentity {
  std::string address;  // the owner's core worker
  pid_t pid = 0;        // 0 when not known (another process's object: a task's return)
  std::string boot_id;
};

class StoreClient {
 public:
  // `local_agent`: host:port of this host's agent. `self`: this process, the owner of what it puts.
  StoreClient(Channels* channels, std::string local_agent, OwnerIdentity self);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  const std::string& local_agent() const { return local_agent_; }
  const OwnerIdentity& self() const { return self_; }

  // Writes object `id`, owned by `owner`, into this node's store; returns the value that stands for it (format,
  // location, size). ResourceExhausted ("object store full: ...") when the store has no room; an object left by an
  // earlier attempt of the same task is replaced.
  absl::StatusOr<Value> Write(const std::string& id, const ValueParts& parts, const OwnerIdentity& owner);
  // Maps this node's copy of stored value `value` (object `id`, owned at `owner_address`), pulled first when it lies
  // on another node; a mapping of it that this process still holds is shared. NotFound when it was freed. An object
  // this process wrote for itself (and has not deleted) is mapped from its file without asking the agent.
  absl::StatusOr<std::shared_ptr<MappedObject>> Map(const std::string& id, const Value& value,
                                                    const std::string& owner_address);
  // Frees owned objects at their location (sent in the background, in order).
  void Delete(const std::string& location, const std::string& id);
  // Sends what Delete queued, waiting up to `timeout_ms`; later Deletes are dropped. Idempotent.
  void Flush(int64_t timeout_ms);

 private:
  absl::StatusOr<std::string> Create(const std::string& id, uint64_t size, const OwnerIdentity& owner);
  void Seal(const std::string& id, bool abort);
  void DeleteLoop();
  // Sends one batch of ids to `location`.
  void SendDeletes(const std::string& location, const std::vector<std::string>& ids);

  Channels* const channels_;
  const std::string local_agent_;
  const OwnerIdentity self_;

  absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::pair<std::string, std::string>> deletes_ ABSL_GUARDED_BY(mu_);  // (location, id)
  std::map<std::string, std::weak_ptr<MappedObject>> mapped_ ABSL_GUARDED_BY(mu_);  // by object id
  struct Written {
    std::string path;
    uint64_t size = 0;
  };
  // Objects this process wrote and owns, until deleted.
  std::map<std::string, Written> written_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool sending_ ABSL_GUARDED_BY(mu_) = false;  // a batch is out
  std::thread sender_;
};

}  // namespace torus::core
