// StateStore: the one owner of the head's ClusterState. Every change is a transaction of typed records: each record
// is applied at once (later logic in the transaction sees it), all of them are appended to the journal together
// before Update returns — so nothing is acknowledged that a restart would forget — and only then published, in
// commit order, to subscribers on the store's dispatch thread (so no agent is asked to act on a change a restart
// would not find).
//
// Group commit: the journal is written outside the state's lock. Transactions that commit while a write is under
// way are written together, in one journal transaction, by whichever of their threads gets there first; each
// Update returns once its own records are in. (A Read may meanwhile see a change whose Update has not returned.)
//
// Open() replays the journal (snapshot, then records) and begins a new epoch (a HeadStarted record). Once the
// journal holds `compact_after` records past its snapshot, a compaction thread takes a copy of the state (commits
// pause for the copy), encodes it without any lock, and writes it as the new snapshot in place of the records it
// covers (journal writes pause for that write); records committed meanwhile stay in the journal after it.
//
// A journal that cannot be written is fatal: the head aborts with the journal's error rather than serve a state
// that a restart would not find. (Reads never touch the journal.) A journal that cannot write *for now* (etcd without
// a quorum) makes its Append wait instead; Writable() tells callers so that they can refuse new changes meanwhile.
//
// Thread-safety: thread-safe. Read and Update hold the store's mutex for the duration of their function, which must
// not block (no RPC, no file I/O beyond the journal's); subscribers run on the dispatch thread, one batch at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "torus/head/state/cluster_state.h"
#include "torus/head/state/journal.h"
#include "torus/head/state/records.h"

namespace torus::head {

class StateStore;

// One transaction: the state as it is now, and the records applied so far.
class Txn {
 public:
  const ClusterState& state() const { return state_; }
  // Applies `record` to the state and keeps it for the journal. An error (the record does not fit the state) leaves
  // both unchanged and is logged: it means a bug in the caller's logic. A record holding text that is not UTF-8 is
  // applied as the journal will hold it (each bad byte as U+FFFD), so that a replay gives the same state.
  absl::Status Apply(Record record);
  const std::vector<Record>& records() const { return records_; }

 private:
  friend class StateStore;
  explicit Txn(ClusterState& state) : state_(state) {}
  ClusterState& state_;
  std::vector<Record> records_;
  std::vector<std::string> encoded_;  // records_, as the journal writes them
};

class StateStore {
 public:
  struct Options {
    uint64_t compact_after = 20'000;  // records past the snapshot that trigger a new snapshot
  };
  struct Recovery {
    bool snapshot = false;   // a snapshot was loaded
    size_t records = 0;      // records replayed after it
    uint64_t epoch = 0;      // the epoch this head serves
    int64_t micros = 0;      // time to load and apply
  };
  using Subscriber = std::function<void(const std::vector<Record>&)>;

  StateStore(std::unique_ptr<Journal> journal, int64_t wall_ms_now, Options options);
  ~StateStore();  // stops dispatching

  // Replays the journal, then records HeadStarted{epoch + 1}. Errors name the record (by position) that failed to
  // decode or apply. REQUIRES: called once, before any Read or Update.
  absl::StatusOr<Recovery> Open();

  // Runs f(const ClusterState&) under the lock and returns what it returns.
  template <typename F>
  auto Read(F&& f) const -> std::invoke_result_t<F, const ClusterState&> {
    absl::MutexLock lock(&mu_);
    return f(static_cast<const ClusterState&>(state_));
  }

  // Runs f(Txn&) under the lock; journals and publishes what it applied, and returns (what f returns) once it is
  // in the journal.
  template <typename F>
  auto Update(F&& f) -> std::invoke_result_t<F, Txn&> {
    using R = std::invoke_result_t<F, Txn&>;
    uint64_t seq = 0;
    if constexpr (std::is_void_v<R>) {
      {
        absl::MutexLock lock(&mu_);
        Txn txn(state_);
        f(txn);
        seq = StageLocked(txn);
      }
      if (seq != 0) WaitDurable(seq);
    } else {
      std::optional<R> result;
      {
        absl::MutexLock lock(&mu_);
        Txn txn(state_);
        result.emplace(f(txn));
        seq = StageLocked(txn);
      }
      if (seq != 0) WaitDurable(seq);
      return *std::move(result);
    }
  }

  // Adds a subscriber; call before StartDispatch.
  void Subscribe(Subscriber subscriber);
  void StartDispatch();
  // Delivers what is queued, then stops the dispatch thread.
  void StopDispatch();
  // Blocks until every transaction committed before the call has been delivered to subscribers. Not from a
  // subscriber.
  void WaitDelivered();
  // Returns once no compaction is under way (for tests and tools).
  void WaitCompacted();

  // The whole state encoded (StateCodec), for tests and tools.
  std::string EncodedState() const;
  std::string journal_location() const;
  // Whether a change can be made durable now (Journal::Writable): services refuse changes from users while it is not,
  // rather than have them wait for the journal. Does not wait for a journal write under way.
  absl::Status Writable() const { return journal_view_->Writable(); }

 private:
  struct Staged {
    uint64_t seq = 0;
    std::vector<std::string> encoded;
    std::vector<Record> records;
  };

  // Queues a transaction's records for the journal; returns its sequence number (0: it applied nothing).
  uint64_t StageLocked(Txn& txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns once transaction `seq` is in the journal, writing what is staged itself when no other thread is.
  void WaitDurable(uint64_t seq);
  // Writes everything staged in one journal transaction and publishes it. REQUIRES: io_mu_ held.
  void FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  // Starts a compaction on its own thread unless one is under way.
  void StartCompaction();
  // A new snapshot in place of the records: the state is copied with nothing staged (so that it covers exactly
  // what the journal holds up to its position), then encoded and written without holding mu_.
  void Compact();
  void DispatchLoop();

  const Options options_;
  const int64_t start_wall_ms_;
  std::vector<Subscriber> subscribers_;  // set before StartDispatch

  // Lock order: mu_, then io_mu_, then stage_mu_, then queue_mu_.
  mutable absl::Mutex mu_;
  ClusterState state_ ABSL_GUARDED_BY(mu_);

  mutable absl::Mutex io_mu_;  // held while the journal is read or written
  std::unique_ptr<Journal> journal_ ABSL_GUARDED_BY(io_mu_);
  const Journal* const journal_view_;  // journal_, for Writable() alone (thread-safe)

  absl::Mutex stage_mu_;
  absl::CondVar stage_cv_;                                  // a write finished
  std::deque<Staged> staged_ ABSL_GUARDED_BY(stage_mu_);   // in sequence order
  uint64_t staged_seq_ ABSL_GUARDED_BY(stage_mu_) = 0;
  uint64_t durable_seq_ ABSL_GUARDED_BY(stage_mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(stage_mu_) = false;        // a thread is writing for everyone

  absl::Mutex compact_mu_;  // not held with any other
  absl::CondVar compact_cv_;
  bool compacting_ ABSL_GUARDED_BY(compact_mu_) = false;
  std::thread compactor_ ABSL_GUARDED_BY(compact_mu_);

  absl::Mutex queue_mu_;
  absl::CondVar queue_cv_;
  std::deque<std::vector<Record>> queue_ ABSL_GUARDED_BY(queue_mu_);
  uint64_t committed_batches_ ABSL_GUARDED_BY(queue_mu_) = 0;
  uint64_t delivered_batches_ ABSL_GUARDED_BY(queue_mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool dispatching_ ABSL_GUARDED_BY(queue_mu_) = false;
  std::thread dispatcher_;
};

}  // namespace torus::head
