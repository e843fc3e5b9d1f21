// BundleLedger: what this host has promised, and to which workers. The head reserves bundles in two phases:
// Prepare holds resources (and TPU chips and GPUs) for one attempt of a group; Commit makes them the group's until
// released; Cancel drops an attempt's prepares. A prepare that is neither committed nor cancelled within its TTL is
// dropped by Expire, so a head that vanishes mid-reservation never leaks a host's capacity.
//
// Workers are started on bundles: Bind gives a worker its committed bundle's devices (refusing a bundle that is
// not committed to that group, or was released), and a bundle holds its resources and devices until the workers
// bound to it are gone: Release of a bundle with live workers only marks it released (and returns the workers,
// for the caller to stop); it is dropped when the last of them is unbound. So a chip is never given to a new
// bundle while an old worker may still use it.
//
// Bundles are keyed by (group id, bundle index). A Prepare either holds every bundle it names or none.
//
// A committed bundle may lend part of its resources back to the host while its worker waits (a task blocked in get):
// what it lends counts as free until it is reclaimed, and a reclaim never fails, so the host is over-subscribed until
// enough is freed (then nothing new fits). Devices are never lent.
//
// Thread-safety: thread-safe (one mutex); used by the agent's RPC handlers, its worker exits and its heartbeat loop.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "torus/common/clock.h"
#include "torus/common/resources.h"

namespace torus::node {

struct LedgerBundle {
  int index = 0;
  ResourceSet resources;
  std::vector<int> chips;  // TPU chip indices on this host
  std::vector<int> gpus;   // GPU indices on this host
};

struct LedgerEntry {
  std::string group_id;
  uint64_t attempt = 0;
  LedgerBundle bundle;
  bool committed = false;
  bool released = false;             // held only until its workers are gone
  int64_t expires_micros = 0;        // prepared entries only
  std::set<std::string> workers;     // running workers bound to it
  ResourceSet lent;                  // part of bundle.resources lent back to the host (counts as free)
};

// What an entry holds of its host now: its bundle's resources less what it lends.
ResourceSet HeldNow(const LedgerEntry& entry);

class BundleLedger {
 public:
  // `total` is what the host has; `chip_count` its TPU chips (indices 0..chip_count-1), `gpu_count` its GPUs.
  BundleLedger(const Clock* clock, ResourceSet total, int chip_count, int gpu_count = 0);

  // Holds all `bundles` for (group, attempt) until `ttl_micros` from now. Idempotent for the same attempt.
  // FailedPrecondition (naming the resource, chip or GPU, and a released bundle still holding it) when they do not
  // fit beside what is held; AlreadyExists when a bundle index is held by another attempt of the group;
  // InvalidArgument for bad chips, GPUs or amounts.
  absl::Status Prepare(const std::string& group_id, uint64_t attempt, const std::vector<LedgerBundle>& bundles,
                       int64_t ttl_micros);
  // Commits every prepared bundle of (group, attempt). NotFound when there is none (expired or cancelled).
  absl::Status Commit(const std::string& group_id, uint64_t attempt);
  // Drops the prepared (uncommitted) bundles of (group, attempt). Idempotent.
  void Cancel(const std::string& group_id, uint64_t attempt);

  struct Released {
    int bundles = 0;                   // bundles released (dropped now, or held until their workers are gone)
    std::vector<std::string> workers;  // their running workers, which the caller stops
  };
  // Releases bundles of a group, prepared or committed; empty `indices` = all of them.
  Released Release(const std::string& group_id, const std::vector<int>& indices);
  // Releases every bundle (the head that placed them is gone for good).
  Released ReleaseAll();
  // Drops expired prepares; returns how many.
  int Expire();

  // Binds `worker_id` to a committed, not released bundle; returns the bundle (its devices). FailedPrecondition
  // otherwise, naming the bundle and why.
  absl::StatusOr<LedgerBundle> Bind(const std::string& group_id, int index, const std::string& worker_id);
  // The worker is gone: a released bundle it was the last worker of is dropped. Returns whether that happened.
  bool Unbind(const std::string& worker_id);

  // Lends `amount` of a committed bundle's resources to the host (replacing what it lent before): they count as free
  // until Reclaim. NotFound for a bundle not held; InvalidArgument when the bundle does not hold `amount`.
  absl::Status Lend(const std::string& group_id, int index, const ResourceSet& amount);
  // Takes back what the bundle lent, whether or not it is free now. Returns whether it had lent anything.
  bool Reclaim(const std::string& group_id, int index);

  const ResourceSet& total() const { return total_; }
  ResourceSet Available() const;
  std::vector<int> BusyChips() const;   // ascending
  std::vector<int> BusyGpus() const;    // ascending
  std::vector<LedgerEntry> Entries() const;
  // Bumps whenever availability changes, so the heartbeat loop knows when to report it.
  uint64_t Version() const;

 private:
  int ExpireLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Released ReleaseLocked(const std::function<bool(const LedgerEntry&)>& which) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* clock_;
  const ResourceSet total_;
  const int chip_count_;
  const int gpu_count_;
  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, int>, LedgerEntry> entries_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::pair<std::string, int>> bound_ ABSL_GUARDED_BY(mu_);  // worker -> its bundle
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace torus::node
