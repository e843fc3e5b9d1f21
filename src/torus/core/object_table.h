// ObjectTable: the values a core worker holds — the objects it owns (its `put`s and the returns of tasks it
// submitted) and copies of objects it borrowed and fetched from their owners.
//
// Values held here count their bytes; a stored value (in a node's object store) counts nothing here.
//
// An owned object is pending until its task finishes, then ready; it is freed when no reference to it is left: no
// handle of the language in this process (AddRef/RemoveRef), no owned value that contains it, and no borrower (another
// process that registered a handle on it, AddBorrower) — unless it escaped (a ref pickled outside torus's own
// serialization, which nothing tracks): escaped objects live until the table goes (its job ends).
//
// A borrowed object (another process owns it) is held here while this process has a handle on it, or an owned value
// here contains it; once this process had told the owner that it borrows it (MarkBorrowing, or a task's return that
// came with it registered), letting go of it calls OnBorrowReleased so that the owner is told.
//
// Bounded: with `max_bytes` (0: no bound) the ready values held never add up to more. A put that does not fit is
// refused (TryPut: ResourceExhausted, nothing stored); a task's return or a fetched copy that does not fit is stored
// as an "object_store_full" failure in its place, so that reading it raises the store-full error.
//
// Thread-safety: thread-safe. Waits block the calling thread; callbacks run on the thread that makes the object ready
// (outside the lock).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace torus::core {

struct Value {
  std::string data;
  std::string format;  // "pickle5", "error", "raw", or a failure the core made: "worker_crashed", "unschedulable"
  std::vector<std::string> buffers;
  // A large value lies in a node's object store instead (data and buffers empty): that node's agent, and its size.
  std::string location;
  uint64_t stored_size = 0;
  // The object refs inside the value, (id, owner): an owned value holds them for as long as it lives.
  std::vector<std::pair<std::string, std::string>> contained;
  bool stored() const { return !location.empty(); }
};

enum class ObjectState { kUnknown, kPending, kReady, kFreed };

class ObjectTable {
 public:
  explicit ObjectTable(size_t max_bytes = 0) : max_bytes_(max_bytes) {}

  // An owned object whose value is still to come.
  void AddPending(const std::string& id);
  // A pending owned object that will never come (a generator's item past the end of its stream) is forgotten;
  // nothing for one that is ready or that a handle holds.
  void RemovePending(const std::string& id);
  // Its value: ready now (wakes waiters, runs OnReady callbacks). A value for an id never added is kept too (a
  // borrowed object fetched from its owner, or a put).
  void Put(const std::string& id, Value value);
  // A new object's value, only if it fits the bound; ResourceExhausted (saying how much is held of how much) if not.
  absl::Status TryPut(const std::string& id, Value value);
  ObjectState State(const std::string& id) const;
  // The value when ready.
  std::optional<Value> Get(const std::string& id) const;
  // Calls `callback` once `id` is ready (now, if it is); never for one that is freed first.
  void OnReady(const std::string& id, std::function<void(const Value&)> callback);
  // Waits until `id` is not pending or `deadline`; returns its state then.
  ObjectState WaitReady(const std::string& id, std::chrono::steady_clock::time_point deadline) const;
  // Waits until at least `num` of `ids` are ready (or failed) or `deadline`; returns the indices of the ready ones.
  std::vector<size_t> WaitAny(const std::vector<std::string>& ids, size_t num,
                              std::chrono::steady_clock::time_point deadline) const;

  // Called with each owned stored value as it is freed (with the table's lock held: it must not call back into the
  // table), so that the node's store frees it too.
  void SetOnFreeStored(std::function<void(const std::string& id, const Value& value)> on_free);
  // The owned stored values (id, value) still held (to free at shutdown).
  std::vector<std::pair<std::string, Value>> OwnedStored() const;

  // Reference counting by the language's handles.
  void AddRef(const std::string& id);
  void RemoveRef(const std::string& id);
  // The object was handed to another process by a way nothing tracks: kept until the table goes.
  void MarkEscaped(const std::string& id);

  // Borrowers of owned objects, by their core worker's address. AddBorrower is false when `id` is not an owned
  // object held here (never, or freed already).
  bool AddBorrower(const std::string& id, const std::string& borrower);
  void RemoveBorrower(const std::string& id, const std::string& borrower);
  // Forgets `borrower` everywhere (it is gone); returns how many objects it held.
  int DropBorrower(const std::string& borrower);
  // Every borrower registered now.
  std::set<std::string> Borrowers() const;
  // The borrowed objects this process told their owners it holds: (owner, id).
  std::vector<std::pair<std::string, std::string>> Borrowing() const;
  // This process holds borrowed `id` (of `owner`) and tells the owner so: true when it had not told it yet (since
  // it last let go). Nothing for an object this process owns (false).
  bool MarkBorrowing(const std::string& id, const std::string& owner);
  // Called with (owner, id) when this process lets go of a borrowed object it had told its owner of (the table's
  // lock held: it must not call back into the table or block).
  void SetOnBorrowReleased(std::function<void(const std::string& owner, const std::string& id)> on_release);

  size_t size() const;
  size_t bytes() const;
  size_t max_bytes() const { return max_bytes_; }

 private:
  struct Entry {
    ObjectState state = ObjectState::kPending;
    Value value;
    int refs = 0;        // handles, and owned values here that contain it
    bool escaped = false;
    bool owned = false;  // AddPending or TryPut made it (not a copy of a borrowed object)
    std::set<std::string> borrowers;  // owned: processes that told this one they hold it
    std::string owner;                // borrowed: its owner's address
    bool borrowing = false;           // borrowed: the owner was told this process holds it
    std::vector<std::function<void(const Value&)>> on_ready;
  };
  void MaybeFreeLocked(const std::string& id, Entry& entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Holds the refs an owned value contains (a borrowed one among them as told to its owner: a task's return comes
  // with its caller registered).
  void PinContainedLocked(const Value& value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Put and TryPut: `refuse` a value that does not fit (else store the failure in its place); `owned`: TryPut's.
  absl::Status Store(const std::string& id, Value value, bool refuse, bool owned);
  // Why a value of `size` bytes does not fit now; empty when it does. REQUIRES: mu_ held.
  std::string NoRoomLocked(size_t size) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  mutable absl::CondVar ready_;
  // By id; hashed (a wait or get over 10,000 refs looks each up), nodes stable under inserts.
  absl::node_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  const size_t max_bytes_;
  std::function<void(const std::string&, const Value&)> on_free_stored_ ABSL_GUARDED_BY(mu_);
  std::function<void(const std::string&, const std::string&)> on_borrow_released_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // of ready values
};

}  // namespace torus::core
