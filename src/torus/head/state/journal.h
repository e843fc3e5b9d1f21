// Journal: where the head's records are made durable before a change is acknowledged, and read back at start.
//
// SqliteJournal keeps them in `<state dir>/journal.db` (SQLite in WAL mode): one row per record, numbered in
// commit order, and at most one snapshot (the encoded state as of a record number). Compacting writes a snapshot
// and deletes the rows it covers, in one transaction; rows appended after the position the snapshot was taken at
// stay.
//
// Durability. Append returns once its transaction is committed to the WAL file:
//   sync = kNormal (default): written to the operating system, not fsynced. A record survives a crash of the head
//       process (kill -9), not necessarily a crash of the machine (power loss), which may lose the last
//       transactions (never part of one: SQLite commits whole transactions or none).
//   sync = kFull: fsynced at every commit; survives power loss too, at the disk's fsync latency per change.
// The directory is locked (flock on `<state dir>/head.lock`) so that two heads never write one journal.
//
// Thread-safety: not thread-safe; StateStore calls it under its mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace torus::head {

class Journal {
 public:
  struct Contents {
    std::optional<std::string> snapshot;  // the latest snapshot, if any
    std::vector<std::string> records;     // every record after it, in commit order
  };

  virtual ~Journal() = default;
  // Everything the journal holds. Called once, before the first Append.
  virtual absl::StatusOr<Contents> Load() = 0;
  // Appends the records of one transaction, all or none, durably as the sync policy says.
  virtual absl::Status Append(const std::vector<std::string>& records) = 0;
  // Where the journal stands: a snapshot of the state taken now covers the records up to here.
  virtual uint64_t position() const = 0;
  // Replaces the records up to `through` (an earlier position()) by `snapshot`; records appended since stay.
  virtual absl::Status Compact(const std::string& snapshot, uint64_t through) = 0;
  // Records appended since the last snapshot (those Load returned included).
  virtual uint64_t records_since_snapshot() const = 0;
  // Where it keeps its data, for messages ("in memory" for the memory journal).
  virtual std::string location() const = 0;
  // OK while a change can be made durable now. Unavailable (saying why) while the journal knows it cannot — etcd
  // without a quorum; an Append meanwhile waits until it can — and FailedPrecondition once this head no longer holds
  // it. Thread-safe, unlike the rest: it is asked while an Append waits.
  virtual absl::Status Writable() const { return absl::OkStatus(); }
};

enum class JournalSync { kNormal, kFull };

// Opens (creating when missing, mode 0700 for the directory) the journal in `state_dir`. FailedPrecondition when
// another process holds the directory's lock (naming its pid); other errors name the file and SQLite's message.
absl::StatusOr<std::unique_ptr<Journal>> OpenSqliteJournal(const std::string& state_dir, JournalSync sync);

// A journal that keeps its records in memory: nothing survives the process. For tests.
std::unique_ptr<Journal> NewMemoryJournal();

// A journal that keeps nothing (it never asks for a snapshot): for a head run with the journal switched off.
std::unique_ptr<Journal> NewNullJournal();

}  // namespace torus::head
