#include "torus/common/device_env.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace torus {
namespace {

constexpr char kVisibleChips[] = "TPU_VISIBLE_CHIPS";
constexpr char kChipsPerHostBounds[] = "TPU_CHIPS_PER_HOST_BOUNDS";
constexpr char kHostBounds[] = "TPU_HOST_BOUNDS";

// Multi-host and multislice coordinates a sub-host worker must not inherit: it is a slice of its own.
constexpr const char* kSubHostUnset[] = {
    "MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES", "MEGASCALE_PORT", "MEGASCALE_SLICE_ID",
    "TPU_PROCESS_ADDRESSES",         "TPU_PROCESS_PORT",
};

bool IsSubHostBlockSize(int k) { return k == 1 || k == 2 || k == 4 || k == 8; }

std::string Chips(int n) { return absl::StrCat(n, n == 1 ? " chip" : " chips"); }

// The chip count that a TPU_CHIPS_PER_HOST_BOUNDS value such as "1,2,1" describes; nullopt when unparseable.
std::optional<int> ChipsOfBounds(const std::string& bounds) {
  std::vector<std::string> parts = absl::StrSplit(bounds, ',');
  if (parts.size() != 3) return std::nullopt;
  int chips = 1;
  for (const std::string& part : parts) {
    int dim = 0;
    if (!absl::SimpleAtoi(part, &dim) || dim <= 0 || dim > 64) return std::nullopt;
    chips *= dim;
  }
  return chips;
}

EnvChange WholeHostEnv(int host_chips, const std::map<std::string, std::string>& inherited) {
  EnvChange change;
  // Bounds naming fewer chips than the host were written for a sub-host worker; left in place they would
  // confine a whole-host worker to part of its chips. Anything else is the host's own and passes through.
  auto bounds = inherited.find(kChipsPerHostBounds);
  if (bounds != inherited.end()) {
    std::optional<int> bounded = ChipsOfBounds(bounds->second);
    if (bounded && *bounded < host_chips) {
      change.unset = {kChipsPerHostBounds, kHostBounds};
    }
  }
  change.unset.push_back(kVisibleChips);
  std::sort(change.unset.begin(), change.unset.end());
  return change;
}

// Formats a requested amount as the user would have written it: "3", "0.5".
std::string FormatAmount(double amount) {
  if (std::isfinite(amount) && amount == std::floor(amount) && std::fabs(amount) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(amount));
  }
  return absl::StrCat(amount);
}

}  // namespace

void EnvChange::ApplyTo(std::map<std::string, std::string>& env) const {
  for (const std::string& key : unset) env.erase(key);
  for (const auto& [key, value] : set) env[key] = value;
}

absl::StatusOr<EnvChange> TpuIsolationEnv(TpuGeneration gen, int host_chips, const std::vector<int>& chips,
                                          const std::map<std::string, std::string>& inherited) {
  if (chips.empty()) {
    EnvChange change;
    change.set = {{"JAX_PLATFORMS", "cpu"}, {"PJRT_DEVICE", "CPU"}};
    return change;
  }
  const TpuGenerationInfo& info = GetGenerationInfo(gen);
  const std::vector<int> valid_host_chips = ValidChipsPerHost(gen);
  if (std::find(valid_host_chips.begin(), valid_host_chips.end(), host_chips) == valid_host_chips.end()) {
    return absl::InvalidArgumentError(absl::StrCat("a ", std::string(info.accelerator_type), " host cannot have ",
                                                   Chips(host_chips),
                                                   "; valid: ", absl::StrJoin(valid_host_chips, ", ")));
  }
  std::vector<int> sorted = chips;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= host_chips) {
      return absl::InvalidArgumentError(absl::StrCat("TPU chip ", sorted[i], " is out of range; the host has ",
                                                     Chips(host_chips), " (0..", host_chips - 1, ")"));
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat("TPU chip ", sorted[i], " is given twice"));
    }
  }
  const int k = static_cast<int>(sorted.size());
  // In range and distinct, so k == host_chips means every chip of the host.
  if (k == host_chips) return WholeHostEnv(host_chips, inherited);

  if (!IsSubHostBlockSize(k)) {
    return absl::InvalidArgumentError(absl::StrCat("a worker cannot hold ", k, " of a host's ", Chips(host_chips),
                                                   "; use 1, 2, 4 or 8 chips, or the whole host"));
  }
  // Bounds describe a rectangle of chips: only an aligned contiguous block is one.
  if (sorted.front() % k != 0 || sorted.back() - sorted.front() != k - 1) {
    return absl::InvalidArgumentError(absl::StrCat("TPU chips ", absl::StrJoin(sorted, ","),
                                                   " are not an aligned block; a worker of ", Chips(k), " holds chips ",
                                                   k, "*j..", k, "*j+", k - 1));
  }
  absl::StatusOr<std::string> bounds = ChipsPerHostBounds(k);
  if (!bounds.ok()) return bounds.status();

  EnvChange change;
  change.set = {
      {kVisibleChips, absl::StrJoin(sorted, ",")},
      {kChipsPerHostBounds, *bounds},
      {kHostBounds, "1,1,1"},
      // As the device plugin gives single-host slices: the worker is worker 0 of a one-host slice.
      {"TPU_WORKER_ID", "0"},
      {"TPU_WORKER_HOSTNAMES", "localhost"},
  };
  change.unset.assign(std::begin(kSubHostUnset), std::end(kSubHostUnset));
  std::sort(change.unset.begin(), change.unset.end());
  return change;
}

EnvChange GpuIsolationEnv(const std::vector<int>& gpus) {
  std::vector<int> sorted = gpus;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  EnvChange change;
  change.set = {{"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}, {"CUDA_VISIBLE_DEVICES", absl::StrJoin(sorted, ",")}};
  return change;
}

absl::StatusOr<std::vector<int>> AllocateChipBlock(const std::vector<bool>& busy, int k) {
  const int host_chips = static_cast<int>(busy.size());
  if (k <= 0 || k > host_chips || (k != host_chips && !IsSubHostBlockSize(k))) {
    return absl::InvalidArgumentError(absl::StrCat("cannot allocate ", Chips(k), " on a host of ", Chips(host_chips),
                                                   "; use 1, 2, 4 or 8 chips, or the whole host"));
  }
  for (int start = 0; start + k <= host_chips; start += k) {
    bool free = true;
    for (int i = start; i < start + k && free; ++i) free = !busy[i];
    if (free) {
      std::vector<int> block(k);
      for (int i = 0; i < k; ++i) block[i] = start + i;
      return block;
    }
  }
  std::vector<int> busy_chips;
  for (int i = 0; i < host_chips; ++i) {
    if (busy[i]) busy_chips.push_back(i);
  }
  return absl::ResourceExhaustedError(absl::StrCat("no free aligned block of ", Chips(k), " on a host of ",
                                                   Chips(host_chips),
                                                   "; busy chips: ", absl::StrJoin(busy_chips, ",")));
}

absl::Status ValidateTpuRequest(double amount, int host_chips) {
  if (amount == 0) return absl::OkStatus();
  const std::string prefix = absl::StrCat("TPU request of ", FormatAmount(amount), " chips is not supported; ");
  constexpr char kForms[] = "use 1, 2, 4 or 8 chips, or a whole host";
  if (!std::isfinite(amount) || amount != std::floor(amount)) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "TPU is counted in whole chips; ", kForms));
  }
  // No host has more than 8 chips; a known host may have fewer.
  const int max_chips = host_chips > 0 ? host_chips : 8;
  if (amount > max_chips) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "a host has at most ", Chips(max_chips), "; use a slice group"));
  }
  const int chips = static_cast<int>(amount);
  if (chips == host_chips || (chips > 0 && IsSubHostBlockSize(chips))) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(prefix, kForms));
}

}  // namespace torus
