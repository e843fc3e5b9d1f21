// PackageCache: the packages (zip archives uploaded for runtime_env working_dir and py_modules) this agent has
// fetched from the head, each unpacked once into `<dir>/<sha256>/` and shared by every worker that names it.
//
// Acquire fetches a package's bytes (through `fetch`, in pieces) into a file beside the cache, checks their size and
// SHA-256 against what the head recorded, and unpacks them (package/unpack.h: nothing lands outside the cache;
// the directory appears whole or not at all). Concurrent Acquire calls for one package wait for a single fetch and
// share its outcome, its error included (a later call tries again).
//
// A package is in use from Acquire to Release (a worker runs in it). Packages no worker uses stay, for the next
// worker of the same code, until their unpacked bytes together pass `max_bytes`: then the least recently used go.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/channel.h"
#include "torus/node.pb.h"

namespace torus::node {

struct PackageCacheOptions {
  uint64_t max_bytes = 10ull << 30;  // unpacked bytes kept (packages in use are kept whatever their size)
};

class PackageCache {
 public:
  // Reads up to `max_bytes` of package `name` from `offset`; the reply says the package's whole size and sha256.
  struct Piece {
    std::string data;
    uint64_t size = 0;
    std::string sha256;
  };
  using FetchFn = std::function<absl::StatusOr<Piece>(const std::string& name, uint64_t offset, uint32_t max_bytes)>;

  using Options = PackageCacheOptions;

  // Empties `dir`: an earlier agent's packages and half-done fetches (its workers are gone).
  PackageCache(std::string dir, FetchFn fetch, Options options = {});

  // The package's unpacked directory, fetching and unpacking it first when this agent does not have it; in use until
  // Release. InvalidArgument for a malformed reference; FailedPrecondition naming the package when its bytes do not
  // match the reference or do not unpack (the message says why); the fetch's own error when the head cannot serve it.
  absl::StatusOr<std::string> Acquire(const rpc::PackageRef& ref);
  // One user of the package (by sha256) is done with it.
  void Release(const std::string& sha256);
  // Whether the package is unpacked here already (Acquire would not fetch).
  bool Has(const rpc::PackageRef& ref) const;
  // Unpacked bytes of the packages kept.
  uint64_t bytes() const;

 private:
  struct Entry {
    uint64_t bytes = 0;      // unpacked
    int users = 0;
    uint64_t last_used = 0;  // a sequence number of Acquire calls
  };
  // The unpacked bytes.
  absl::StatusOr<uint64_t> FetchAndUnpack(const rpc::PackageRef& ref);
  // Drops unused packages, least recently used first, while the cache holds more than max_bytes; returns the
  // directories (moved aside) to remove.
  std::vector<std::string> EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string DirOf(const rpc::PackageRef& ref) const { return dir_ + "/" + ref.sha256(); }

  const std::string dir_;
  const FetchFn fetch_;
  const Options options_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);  // by sha256: unpacked here
  uint64_t uses_ ABSL_GUARDED_BY(mu_) = 0;
  struct Flight {
    bool done = false;
    absl::Status status;
  };
  absl::CondVar fetched_;  // a fetch ended
  std::map<std::string, std::shared_ptr<Flight>> fetching_ ABSL_GUARDED_BY(mu_);  // by sha256
};

// Reads packages from the head (HeadService.ReadPackage) on `channel`, with the cluster token.
PackageCache::FetchFn MakeHeadPackageFetcher(std::shared_ptr<grpc::Channel> channel, std::string token);

}  // namespace torus::node
