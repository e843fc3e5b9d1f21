// PackageStore: the zip archives users upload for runtime_env working_dir and py_modules (Ray's
// `PUT /api/packages/gcs/<name>`). Each package is a file in the head's package directory, named by the package;
// its metadata (sha256, size, time) is a record in the journal (PackageStored), so that a restarted head knows what
// it holds. A file is written (and renamed into place) before its record; a record is removed before its file.
//
// A package is in use while a job or gang run that is not over names it (ClusterState); one unused for
// `unused_grace_ms` (counted from the latest of its upload, the end of its last user, and the last time a client
// asked for it — Touch — or this head started) is removed by CollectGarbage: the grace lets a client that found the
// package (or uploaded it) submit afterwards, as Ray's clients do.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "torus/common/clock.h"
#include "torus/head/state/state_store.h"

namespace torus::head {

// Who uses a package: live users (jobs and runs not over) and when the last user that is over ended.
struct PackageUse {
  int live_users = 0;
  int64_t last_end_wall_ms = 0;
};
// Every package URI named by a job or run of `state`, by package name (pure).
std::map<std::string, PackageUse> PackageUses(const ClusterState& state);

// The package URIs (working_dir, py_modules) a job names.
std::vector<std::string> PackageUrisOf(const JobRequest& request);

class PackageStore {
 public:
  struct Options {
    uint64_t max_bytes = 512ull << 20;   // a larger upload is refused
    int64_t unused_grace_ms = 600'000;   // Ray keeps an unused package 10 minutes
  };
  enum class PutOutcome { kStored, kAlreadyStored };

  // Keeps the files in `dir` (created 0700 by Open).
  PackageStore(StateStore* store, const Clock* clock, std::string dir, Options options);
  ~PackageStore();  // stops the collector

  // Creates the directory; deletes files no record names (an upload the head died in) and removes records whose file
  // is missing (logged). REQUIRES: the store is open.
  absl::Status Open();

  // "_ray_pkg_<hash>.zip": 1-128 of [A-Za-z0-9_.-], ending in ".zip", not starting with '.'. InvalidArgument otherwise.
  static absl::Status CheckName(const std::string& name);

  // Stores `bytes` as package `name`, once it has checked them as an archive (paths, symlinks, sizes, CRCs).
  // InvalidArgument: a bad name or archive (the message names the entry); ResourceExhausted: larger than max_bytes;
  // AlreadyExists: the name is taken by other bytes (a package's name is the hash of its contents).
  absl::StatusOr<PutOutcome> Put(const std::string& name, const std::string& bytes);

  // The same for an upload written to `upload` (a path from NewUpload), which is moved into place or removed.
  absl::StatusOr<PutOutcome> PutFile(const std::string& name, const std::string& upload);
  // A fresh path in the package directory for an upload of `name` to be written to (removed by Open if the head dies
  // before PutFile).
  std::string NewUpload(const std::string& name) const;

  std::optional<Package> Find(const std::string& name) const;
  // A client asked for the package (and may submit a job naming it): its grace starts again.
  void Touch(const std::string& name);
  // Up to `max_bytes` of the package's file from `offset`, with its metadata. NotFound when it is not stored.
  absl::StatusOr<std::string> Read(const std::string& name, uint64_t offset, uint64_t max_bytes, Package* info) const;

  // Removes the packages unused for the grace; returns their names.
  std::vector<std::string> CollectGarbage();
  // Calls CollectGarbage every `period_ms` on a thread of its own, until StopCollector.
  void StartCollector(int64_t period_ms);
  void StopCollector();

  uint64_t max_bytes() const { return options_.max_bytes; }
  const std::string& dir() const { return dir_; }

 private:
  std::string PathOf(const std::string& name) const;

  StateStore* store_;
  const Clock* clock_;
  const std::string dir_;
  const Options options_;
  // Serializes a package's file with its record: an upload of a name being collected never loses its file.
  absl::Mutex files_mu_;
  absl::Mutex touched_mu_;
  std::map<std::string, int64_t> touched_ ABSL_GUARDED_BY(touched_mu_);  // name -> wall ms; not journaled
  absl::Mutex check_mu_;
  int checks_ ABSL_GUARDED_BY(check_mu_) = 0;  // archives being checked

  absl::Mutex collector_mu_;
  bool stopping_ ABSL_GUARDED_BY(collector_mu_) = false;
  std::thread collector_;
};

}  // namespace torus::head
