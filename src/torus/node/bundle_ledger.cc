#include "torus/node/bundle_ledger.h"

#include <algorithm>
#include <functional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace torus::node {
namespace {

// Who holds a device, for refusals: "bundle 2 of group pg-x" (", released: its workers are stopping").
std::string Holder(const LedgerEntry& e) {
  return absl::StrCat("bundle ", e.bundle.index, " of group ", e.group_id,
                      e.released ? " (released; its workers are stopping)" : "");
}

}  // namespace

ResourceSet HeldNow(const LedgerEntry& e) {
  if (e.lent.empty()) return e.bundle.resources;
  ResourceSet held = e.bundle.resources;
  held.Subtract(e.lent);
  return held;
}

BundleLedger::BundleLedger(const Clock* clock, ResourceSet total, int chip_count, int gpu_count)
    : clock_(clock), total_(std::move(total)), chip_count_(chip_count), gpu_count_(gpu_count) {}

absl::Status BundleLedger::Prepare(const std::string& group_id, uint64_t attempt,
                                   const std::vector<LedgerBundle>& bundles, int64_t ttl_micros) {
  absl::MutexLock lock(&mu_);
  const int64_t now = clock_->NowMicros();
  ExpireLocked(now);

  // Idempotent retry: the same attempt already holds exactly these indices.
  bool all_held = !bundles.empty();
  for (const LedgerBundle& b : bundles) {
    auto it = entries_.find({group_id, b.index});
    all_held = all_held && it != entries_.end() && it->second.attempt == attempt && !it->second.released;
  }
  if (all_held) return absl::OkStatus();

  ResourceSet used;
  std::map<int, const LedgerEntry*> busy_chips, busy_gpus;
  for (const auto& [key, entry] : entries_) {
    used.Add(HeldNow(entry));
    for (int chip : entry.bundle.chips) busy_chips.emplace(chip, &entry);
    for (int gpu : entry.bundle.gpus) busy_gpus.emplace(gpu, &entry);
  }
  ResourceSet wanted;
  std::set<int> wanted_chips, wanted_gpus;
  std::set<int> indices;
  for (const LedgerBundle& b : bundles) {
    if (!indices.insert(b.index).second) {
      return absl::InvalidArgumentError(absl::StrCat("bundle index ", b.index, " appears twice"));
    }
    if (entries_.contains({group_id, b.index})) {
      return absl::AlreadyExistsError(
          absl::StrCat("bundle ", b.index, " of group ", group_id, " is already held by another attempt"));
    }
    for (int chip : b.chips) {
      if (chip < 0 || chip >= chip_count_) {
        return absl::InvalidArgumentError(
            absl::StrCat("bundle ", b.index, ": chip ", chip, " does not exist; this host has ", chip_count_, " chips"));
      }
      if (auto holder = busy_chips.find(chip); holder != busy_chips.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("bundle ", b.index, ": chip ", chip, " is held by ", Holder(*holder->second)));
      }
      if (!wanted_chips.insert(chip).second) {
        return absl::InvalidArgumentError(absl::StrCat("bundle ", b.index, ": chip ", chip, " is asked twice"));
      }
    }
    for (int gpu : b.gpus) {
      if (gpu < 0 || gpu >= gpu_count_) {
        return absl::InvalidArgumentError(
            absl::StrCat("bundle ", b.index, ": GPU ", gpu, " does not exist; this host has ", gpu_count_, " GPUs"));
      }
      if (auto holder = busy_gpus.find(gpu); holder != busy_gpus.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("bundle ", b.index, ": GPU ", gpu, " is held by ", Holder(*holder->second)));
      }
      if (!wanted_gpus.insert(gpu).second) {
        return absl::InvalidArgumentError(absl::StrCat("bundle ", b.index, ": GPU ", gpu, " is asked twice"));
      }
    }
    wanted.Add(b.resources);
  }
  ResourceSet free = total_;
  free.Subtract(used);
  for (const auto& [name, amount] : wanted.amounts()) {
    if (amount > free.GetFixed(name)) {
      return absl::FailedPreconditionError(absl::StrCat("not enough ", name, ": asked ", FormatFixed(amount),
                                                        ", free ", FormatFixed(free.GetFixed(name)), " of ",
                                                        FormatFixed(total_.GetFixed(name))));
    }
  }
  for (const LedgerBundle& b : bundles) {
    entries_[{group_id, b.index}] = LedgerEntry{group_id, attempt, b, false, false, now + ttl_micros, {}};
  }
  ++version_;
  return absl::OkStatus();
}

absl::Status BundleLedger::Commit(const std::string& group_id, uint64_t attempt) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(clock_->NowMicros());
  int found = 0;
  for (auto& [key, entry] : entries_) {
    if (entry.group_id == group_id && entry.attempt == attempt && !entry.released) {
      entry.committed = true;
      ++found;
    }
  }
  if (found == 0) {
    return absl::NotFoundError(
        absl::StrCat("no prepared bundles of group ", group_id, " attempt ", attempt, " (expired or cancelled)"));
  }
  return absl::OkStatus();
}

void BundleLedger::Cancel(const std::string& group_id, uint64_t attempt) {
  absl::MutexLock lock(&mu_);
  size_t before = entries_.size();
  std::erase_if(entries_, [&](const auto& kv) {
    return kv.second.group_id == group_id && kv.second.attempt == attempt && !kv.second.committed;
  });
  if (entries_.size() != before) ++version_;
}

BundleLedger::Released BundleLedger::ReleaseLocked(const std::function<bool(const LedgerEntry&)>& which) {
  Released out;
  for (auto it = entries_.begin(); it != entries_.end();) {
    LedgerEntry& e = it->second;
    if (!which(e)) {
      ++it;
      continue;
    }
    ++out.bundles;
    if (e.workers.empty()) {
      it = entries_.erase(it);
      ++version_;
      continue;
    }
    // Held until its workers are gone.
    e.released = true;
    out.workers.insert(out.workers.end(), e.workers.begin(), e.workers.end());
    ++it;
  }
  return out;
}

BundleLedger::Released BundleLedger::Release(const std::string& group_id, const std::vector<int>& indices) {
  absl::MutexLock lock(&mu_);
  return ReleaseLocked([&](const LedgerEntry& e) {
    return e.group_id == group_id &&
           (indices.empty() || std::find(indices.begin(), indices.end(), e.bundle.index) != indices.end());
  });
}

BundleLedger::Released BundleLedger::ReleaseAll() {
  absl::MutexLock lock(&mu_);
  return ReleaseLocked([](const LedgerEntry&) { return true; });
}

int BundleLedger::Expire() {
  absl::MutexLock lock(&mu_);
  return ExpireLocked(clock_->NowMicros());
}

int BundleLedger::ExpireLocked(int64_t now) {
  size_t before = entries_.size();
  std::erase_if(entries_, [&](const auto& kv) { return !kv.second.committed && kv.second.expires_micros <= now; });
  int expired = static_cast<int>(before - entries_.size());
  if (expired > 0) ++version_;
  return expired;
}

absl::StatusOr<LedgerBundle> BundleLedger::Bind(const std::string& group_id, int index, const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find({group_id, index});
  const std::string which = absl::StrCat("bundle ", index, " of group ", group_id);
  if (it == entries_.end()) return absl::FailedPreconditionError(absl::StrCat(which, " is not held on this host"));
  LedgerEntry& e = it->second;
  if (!e.committed) return absl::FailedPreconditionError(absl::StrCat(which, " is prepared but not committed"));
  if (e.released) return absl::FailedPreconditionError(absl::StrCat(which, " was released"));
  if (auto other = bound_.find(worker_id); other != bound_.end() && other->second != it->first) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", worker_id, " is bound to another bundle"));
  }
  e.workers.insert(worker_id);
  bound_[worker_id] = it->first;
  return e.bundle;
}

bool BundleLedger::Unbind(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  auto b = bound_.find(worker_id);
  if (b == bound_.end()) return false;
  auto it = entries_.find(b->second);
  bound_.erase(b);
  if (it == entries_.end()) return false;
  it->second.workers.erase(worker_id);
  if (!it->second.released || !it->second.workers.empty()) return false;
  entries_.erase(it);
  ++version_;
  return true;
}

absl::Status BundleLedger::Lend(const std::string& group_id, int index, const ResourceSet& amount) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find({group_id, index});
  if (it == entries_.end() || !it->second.committed) {
    return absl::NotFoundError(absl::StrCat("bundle ", index, " of group ", group_id, " is not held on this host"));
  }
  if (!it->second.bundle.resources.Contains(amount)) {
    return absl::InvalidArgumentError(absl::StrCat("bundle ", index, " of group ", group_id, " holds ",
                                                   it->second.bundle.resources.ToJson(), "; cannot lend ",
                                                   amount.ToJson()));
  }
  if (it->second.lent != amount) {
    it->second.lent = amount;
    ++version_;
  }
  return absl::OkStatus();
}

bool BundleLedger::Reclaim(const std::string& group_id, int index) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find({group_id, index});
  if (it == entries_.end() || it->second.lent.empty()) return false;
  it->second.lent = ResourceSet();
  ++version_;
  return true;
}

ResourceSet BundleLedger::Available() const {
  absl::MutexLock lock(&mu_);
  ResourceSet free = total_;
  ResourceSet used;
  for (const auto& [key, entry] : entries_) used.Add(HeldNow(entry));
  free.Subtract(used);
  return free;
}

std::vector<int> BundleLedger::BusyChips() const {
  absl::MutexLock lock(&mu_);
  std::set<int> busy;
  for (const auto& [key, entry] : entries_) busy.insert(entry.bundle.chips.begin(), entry.bundle.chips.end());
  return {busy.begin(), busy.end()};
}

std::vector<int> BundleLedger::BusyGpus() const {
  absl::MutexLock lock(&mu_);
  std::set<int> busy;
  for (const auto& [key, entry] : entries_) busy.insert(entry.bundle.gpus.begin(), entry.bundle.gpus.end());
  return {busy.begin(), busy.end()};
}

std::vector<LedgerEntry> BundleLedger::Entries() const {
  absl::MutexLock lock(&mu_);
  std::vector<LedgerEntry> out;
  for (const auto& [key, entry] : entries_) out.push_back(entry);
  return out;
}

uint64_t BundleLedger::Version() const {
  absl::MutexLock lock(&mu_);
  return version_;
}

}  // namespace torus::node
