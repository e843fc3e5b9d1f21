#include "torus/head/state/journal.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace torus::head {
namespace {

constexpr int kSchemaVersion = 1;

class SqliteJournal final : public Journal {
 public:
  SqliteJournal(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  ~SqliteJournal() override {
    for (sqlite3_stmt* s : {insert_, begin_, commit_, rollback_}) sqlite3_finalize(s);
    if (db_ != nullptr) sqlite3_close(db_);
    if (lock_fd_ >= 0) close(lock_fd_);  // releases the flock
  }

  absl::Status Open(JournalSync sync) {
    if (sqlite3_open_v2(path_.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        nullptr) != SQLITE_OK) {
      return Error("open");
    }
    sqlite3_busy_timeout(db_, 5000);
    const std::string setup = absl::StrCat(
        "PRAGMA journal_mode=WAL;"
        "PRAGMA synchronous=", sync == JournalSync::kFull ? "FULL" : "NORMAL", ";"
        // No checkpoints in the middle of commits (each one fsyncs the database): the WAL is folded in when a
        // snapshot is written (Compact), which bounds it to `compact_after` records.
        "PRAGMA wal_autocheckpoint=0;"
        // Only this head uses the file (head.lock says so): no shared-memory index to keep in step per commit.
        "PRAGMA locking_mode=EXCLUSIVE;"
        "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE IF NOT EXISTS records(seq INTEGER PRIMARY KEY, body TEXT NOT NULL);"
        "CREATE TABLE IF NOT EXISTS snapshot(id INTEGER PRIMARY KEY CHECK (id = 1), body TEXT NOT NULL);"
        "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', '", kSchemaVersion, "');");
    if (sqlite3_exec(db_, setup.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) return Error("set up");
    // A journal written by a newer torus cannot be read safely.
    sqlite3_stmt* schema = nullptr;
    if (sqlite3_prepare_v2(db_, "SELECT value FROM meta WHERE key = 'schema'", -1, &schema, nullptr) != SQLITE_OK) {
      return Error("read the schema version of");
    }
    int version = 0;
    if (sqlite3_step(schema) == SQLITE_ROW) version = atoi(reinterpret_cast<const char*>(sqlite3_column_text(schema, 0)));
    sqlite3_finalize(schema);
    if (version != kSchemaVersion) {
      return absl::FailedPreconditionError(
          absl::StrCat(path_, ": journal schema ", version, " is not ", kSchemaVersion, " (written by another torus?)"));
    }
    if (Prepare("INSERT INTO records(body) VALUES (?)", &insert_) != SQLITE_OK ||
        Prepare("BEGIN IMMEDIATE", &begin_) != SQLITE_OK || Prepare("COMMIT", &commit_) != SQLITE_OK ||
        Prepare("ROLLBACK", &rollback_) != SQLITE_OK) {
      return Error("prepare statements for");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Contents> Load() override {
    Contents contents;
    sqlite3_stmt* s = nullptr;
    if (Prepare("SELECT body FROM snapshot WHERE id = 1", &s) != SQLITE_OK) return Error("read the snapshot of");
    if (sqlite3_step(s) == SQLITE_ROW) contents.snapshot = ColumnText(s, 0);
    sqlite3_finalize(s);
    if (Prepare("SELECT body FROM records ORDER BY seq", &s) != SQLITE_OK) return Error("read the records of");
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) contents.records.push_back(ColumnText(s, 0));
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) return Error("read the records of");
    if (Prepare("SELECT COALESCE(MAX(seq), 0) FROM records", &s) != SQLITE_OK) return Error("read the records of");
    if (sqlite3_step(s) == SQLITE_ROW) last_seq_ = static_cast<uint64_t>(sqlite3_column_int64(s, 0));
    sqlite3_finalize(s);
    since_snapshot_ = contents.records.size();
    return contents;
  }

  absl::Status Append(const std::vector<std::string>& records) override {
    if (records.empty()) return absl::OkStatus();
    if (Step(begin_) != SQLITE_DONE) return Error("begin a transaction on");
    for (const std::string& body : records) {
      sqlite3_bind_text(insert_, 1, body.data(), static_cast<int>(body.size()), SQLITE_STATIC);
      const int rc = Step(insert_);
      sqlite3_clear_bindings(insert_);
      if (rc != SQLITE_DONE) {
        absl::Status error = Error("append to");
        Step(rollback_);
        return error;
      }
    }
    if (Step(commit_) != SQLITE_DONE) {
      absl::Status error = Error("commit to");
      Step(rollback_);
      return error;
    }
    since_snapshot_ += records.size();
    last_seq_ = static_cast<uint64_t>(sqlite3_last_insert_rowid(db_));
    return absl::OkStatus();
  }

  uint64_t position() const override { return last_seq_; }

  // Rows are numbered one past the highest present; the rows after `through` stay, so numbers only grow while
  // anything is left to cover.
  absl::Status Compact(const std::string& snapshot, uint64_t through) override {
    if (Step(begin_) != SQLITE_DONE) return Error("begin a transaction on");
    sqlite3_stmt* put = nullptr;
    bool ok = Prepare("INSERT OR REPLACE INTO snapshot(id, body) VALUES (1, ?)", &put) == SQLITE_OK;
    if (ok) {
      sqlite3_bind_text(put, 1, snapshot.data(), static_cast<int>(snapshot.size()), SQLITE_STATIC);
      ok = sqlite3_step(put) == SQLITE_DONE;
    }
    sqlite3_finalize(put);
    sqlite3_stmt* drop = nullptr;
    ok = ok && Prepare("DELETE FROM records WHERE seq <= ?", &drop) == SQLITE_OK;
    if (ok) {
      sqlite3_bind_int64(drop, 1, static_cast<sqlite3_int64>(through));
      ok = sqlite3_step(drop) == SQLITE_DONE;
    }
    sqlite3_finalize(drop);
    const uint64_t dropped = ok ? static_cast<uint64_t>(sqlite3_changes(db_)) : 0;
    if (!ok || Step(commit_) != SQLITE_DONE) {
      absl::Status error = Error("compact");
      Step(rollback_);
      return error;
    }
    since_snapshot_ -= std::min(dropped, since_snapshot_);
    // Keep the WAL file from growing without bound; a failure here loses nothing.
    sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr);
    return absl::OkStatus();
  }

  uint64_t records_since_snapshot() const override { return since_snapshot_; }
  std::string location() const override { return path_; }

 private:
  int Prepare(const char* sql, sqlite3_stmt** out) { return sqlite3_prepare_v2(db_, sql, -1, out, nullptr); }
  static int Step(sqlite3_stmt* s) {
    const int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc;
  }
  static std::string ColumnText(sqlite3_stmt* s, int column) {
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, column));
    return text == nullptr ? "" : std::string(text, static_cast<size_t>(sqlite3_column_bytes(s, column)));
  }
  absl::Status Error(const char* what) const {
    return absl::UnavailableError(
        absl::StrCat("cannot ", what, " the journal ", path_, ": ", db_ ? sqlite3_errmsg(db_) : "out of memory"));
  }

  const std::string path_;
  const int lock_fd_;
  sqlite3* db_ = nullptr;
  sqlite3_stmt* insert_ = nullptr;
  sqlite3_stmt* begin_ = nullptr;
  sqlite3_stmt* commit_ = nullptr;
  sqlite3_stmt* rollback_ = nullptr;
  uint64_t since_snapshot_ = 0;
  uint64_t last_seq_ = 0;
};

class MemoryJournal final : public Journal {
 public:
  absl::StatusOr<Contents> Load() override { return contents_; }
  absl::Status Append(const std::vector<std::string>& records) override {
    contents_.records.insert(contents_.records.end(), records.begin(), records.end());
    return absl::OkStatus();
  }
  uint64_t position() const override { return base_ + contents_.records.size(); }
  absl::Status Compact(const std::string& snapshot, uint64_t through) override {
    if (through < base_ || through > position()) {
      return absl::InvalidArgumentError(absl::StrCat("compact through ", through, ": the journal holds ", base_,
                                                     " to ", position()));
    }
    contents_.snapshot = snapshot;
    contents_.records.erase(contents_.records.begin(),
                            contents_.records.begin() + static_cast<std::ptrdiff_t>(through - base_));
    base_ = through;
    return absl::OkStatus();
  }
  uint64_t records_since_snapshot() const override { return contents_.records.size(); }
  std::string location() const override { return "in memory"; }

 private:
  Contents contents_;
  uint64_t base_ = 0;  // records before it are in the snapshot
};

class NullJournal final : public Journal {
 public:
  absl::StatusOr<Contents> Load() override { return Contents{}; }
  absl::Status Append(const std::vector<std::string>&) override { return absl::OkStatus(); }
  uint64_t position() const override { return 0; }
  absl::Status Compact(const std::string&, uint64_t) override { return absl::OkStatus(); }
  uint64_t records_since_snapshot() const override { return 0; }
  std::string location() const override { return "nowhere (the journal is off)"; }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Journal>> OpenSqliteJournal(const std::string& state_dir, JournalSync sync) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create the state directory ", state_dir, ": ", ec.message()));
  chmod(state_dir.c_str(), 0700);  // the journal holds run tokens
  const std::string lock_path = state_dir + "/head.lock";
  int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open ", lock_path, ": ", std::strerror(errno)));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {0};
    ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat("the state directory ", state_dir,
                                                      " is in use by another torus-head",
                                                      n > 0 ? absl::StrCat(" (pid ", std::string(pid, n), ")") : ""));
  }
  const std::string pid = std::to_string(getpid());
  if (ftruncate(fd, 0) == 0 && pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    // The pid is only for the message another head prints; the lock itself holds.
  }
  auto journal = std::make_unique<SqliteJournal>(state_dir + "/journal.db", fd);
  absl::Status opened = journal->Open(sync);
  if (!opened.ok()) return opened;
  return std::unique_ptr<Journal>(std::move(journal));
}

std::unique_ptr<Journal> NewNullJournal() { return std::make_unique<NullJournal>(); }

std::unique_ptr<Journal> NewMemoryJournal() { return std::make_unique<MemoryJournal>(); }

}  // namespace torus::head
