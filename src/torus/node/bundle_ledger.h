// BundleLedger: what this host has promised. The head reserves bundles in two phases: Prepare holds resources
// (and TPU chips) for one attempt of a group; Commit makes them the group's until released; Cancel drops an
// attempt's prepares. A prepare that is neither committed nor cancelled within its TTL is dropped by Expire, so a
// head that vanishes mid-reservation never leaks a host's capacity.
//
// Bundles are keyed by (group id, bundle index). A Prepare either holds every bundle it names or none.
//
// Thread-safety: thread-safe (one mutex); used by the agent's RPC handlers and its heartbeat loop.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "torus/common/clock.h"
#include "torus/common/resources.h"

namespace torus::node {

struct LedgerBundle {
  int index = 0;
  ResourceSet resources;
  std::vector<int> chips;  // TPU chip indices on this host
};

struct LedgerEntry {
  std::string group_id;
  uint64_t attempt = 0;
  LedgerBundle bundle;
  bool committed = false;
  int64_t expires_micros = 0;  // prepared entries only
};

class BundleLedger {
 public:
  // `total` is what the host has; `chip_count` its TPU chips (indices 0..chip_count-1).
  BundleLedger(const Clock* clock, ResourceSet total, int chip_count);

  // Holds all `bundles` for (group, attempt) until `ttl_micros` from now. Idempotent for the same attempt.
  // FailedPrecondition (naming the resource or chip) when they do not fit beside what is held; AlreadyExists when a
  // bundle index is held by another attempt of the group; InvalidArgument for bad chips or amounts.
  absl::Status Prepare(const std::string& group_id, uint64_t attempt, const std::vector<LedgerBundle>& bundles,
                       int64_t ttl_micros);
  // Commits every prepared bundle of (group, attempt). NotFound when there is none (expired or cancelled).
  absl::Status Commit(const std::string& group_id, uint64_t attempt);
  // Drops the prepared (uncommitted) bundles of (group, attempt). Idempotent.
  void Cancel(const std::string& group_id, uint64_t attempt);
  // Releases bundles of a group, prepared or committed; empty `indices` = all of them. Returns how many.
  int Release(const std::string& group_id, const std::vector<int>& indices);
  // Drops everything (the head that placed it has forgotten it); returns how many bundles.
  int Clear();
  // Drops expired prepares; returns how many.
  int Expire();

  const ResourceSet& total() const { return total_; }
  ResourceSet Available() const;
  std::vector<int> BusyChips() const;   // ascending
  std::vector<LedgerEntry> Entries() const;
  // Bumps whenever availability changes, so the heartbeat loop knows when to report it.
  uint64_t Version() const;

 private:
  int ExpireLocked(int64_t now);

  const Clock* clock_;
  const ResourceSet total_;
  const int chip_count_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, LedgerEntry> entries_;  // guarded by mu_
  uint64_t version_ = 0;                                         // guarded by mu_
};

}  // namespace torus::node
