#include "torus/node/bundle_ledger.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace torus::node {

BundleLedger::BundleLedger(const Clock* clock, ResourceSet total, int chip_count)
    : clock_(clock), total_(std::move(total)), chip_count_(chip_count) {}

absl::Status BundleLedger::Prepare(const std::string& group_id, uint64_t attempt,
                                   const std::vector<LedgerBundle>& bundles, int64_t ttl_micros) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = clock_->NowMicros();
  ExpireLocked(now);

  // Idempotent retry: the same attempt already holds exactly these indices.
  bool all_held = !bundles.empty();
  for (const LedgerBundle& b : bundles) {
    auto it = entries_.find({group_id, b.index});
    all_held = all_held && it != entries_.end() && it->second.attempt == attempt;
  }
  if (all_held) return absl::OkStatus();

  ResourceSet used;
  std::set<int> busy;
  for (const auto& [key, entry] : entries_) {
    used.Add(entry.bundle.resources);
    busy.insert(entry.bundle.chips.begin(), entry.bundle.chips.end());
  }
  ResourceSet wanted;
  std::set<int> wanted_chips;
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
      if (busy.contains(chip) || !wanted_chips.insert(chip).second) {
        return absl::FailedPreconditionError(absl::StrCat("bundle ", b.index, ": chip ", chip, " is already held"));
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
    entries_[{group_id, b.index}] = LedgerEntry{group_id, attempt, b, false, now + ttl_micros};
  }
  ++version_;
  return absl::OkStatus();
}

absl::Status BundleLedger::Commit(const std::string& group_id, uint64_t attempt) {
  std::lock_guard<std::mutex> lock(mu_);
  ExpireLocked(clock_->NowMicros());
  int found = 0;
  for (auto& [key, entry] : entries_) {
    if (entry.group_id == group_id && entry.attempt == attempt) {
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
  std::lock_guard<std::mutex> lock(mu_);
  size_t before = entries_.size();
  std::erase_if(entries_, [&](const auto& kv) {
    return kv.second.group_id == group_id && kv.second.attempt == attempt && !kv.second.committed;
  });
  if (entries_.size() != before) ++version_;
}

int BundleLedger::Release(const std::string& group_id, const std::vector<int>& indices) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t before = entries_.size();
  std::erase_if(entries_, [&](const auto& kv) {
    return kv.second.group_id == group_id &&
           (indices.empty() || std::find(indices.begin(), indices.end(), kv.first.second) != indices.end());
  });
  int released = static_cast<int>(before - entries_.size());
  if (released > 0) ++version_;
  return released;
}

int BundleLedger::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  int n = static_cast<int>(entries_.size());
  entries_.clear();
  if (n > 0) ++version_;
  return n;
}

int BundleLedger::Expire() {
  std::lock_guard<std::mutex> lock(mu_);
  return ExpireLocked(clock_->NowMicros());
}

int BundleLedger::ExpireLocked(int64_t now) {
  size_t before = entries_.size();
  std::erase_if(entries_, [&](const auto& kv) { return !kv.second.committed && kv.second.expires_micros <= now; });
  int expired = static_cast<int>(before - entries_.size());
  if (expired > 0) ++version_;
  return expired;
}

ResourceSet BundleLedger::Available() const {
  std::lock_guard<std::mutex> lock(mu_);
  ResourceSet free = total_;
  for (const auto& [key, entry] : entries_) free.Subtract(entry.bundle.resources);
  return free;
}

std::vector<int> BundleLedger::BusyChips() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<int> busy;
  for (const auto& [key, entry] : entries_) busy.insert(entry.bundle.chips.begin(), entry.bundle.chips.end());
  return {busy.begin(), busy.end()};
}

std::vector<LedgerEntry> BundleLedger::Entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LedgerEntry> out;
  for (const auto& [key, entry] : entries_) out.push_back(entry);
  return out;
}

uint64_t BundleLedger::Version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return version_;
}

}  // namespace torus::node
