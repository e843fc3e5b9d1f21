// PackageCache: the packages (zip archives uploaded for runtime_env working_dir and py_modules) this agent has
// fetched from the head, each unpacked once into `<dir>/<sha256>/` and shared by every worker that names it.
//
// Ensure fetches a package's bytes (through `fetch`, in pieces) into a file beside the cache, checks their size and
// SHA-256 against what the head recorded, and unpacks them (package/unpack.h: nothing lands outside the cache;
// the directory appears whole or not at all). Concurrent Ensure calls for one package wait for a single fetch and
// share its outcome, its error included (a later call tries again).
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/channel.h"
#include "torus/node.pb.h"

namespace torus::node {

class PackageCache {
 public:
  // Reads up to `max_bytes` of package `name` from `offset`; the reply says the package's whole size and sha256.
  struct Piece {
    std::string data;
    uint64_t size = 0;
    std::string sha256;
  };
  using FetchFn = std::function<absl::StatusOr<Piece>(const std::string& name, uint64_t offset, uint32_t max_bytes)>;

  // Removes what an earlier agent left half-done in `dir` (partial fetches and unpacks).
  PackageCache(std::string dir, FetchFn fetch);

  // The package's unpacked directory, fetching and unpacking it first when this agent does not have it.
  // InvalidArgument for a malformed reference; FailedPrecondition naming the package when its bytes do not match
  // the reference or do not unpack (the message says why); the fetch's own error when the head cannot serve it.
  absl::StatusOr<std::string> Ensure(const rpc::PackageRef& ref);
  // Whether the package is unpacked here already (Ensure would not fetch).
  bool Has(const rpc::PackageRef& ref) const;

 private:
  absl::StatusOr<std::string> FetchAndUnpack(const rpc::PackageRef& ref);
  std::string DirOf(const rpc::PackageRef& ref) const { return dir_ + "/" + ref.sha256(); }

  const std::string dir_;
  const FetchFn fetch_;
  absl::Mutex mu_;
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
