// Resource amounts in fixed point (1/10000 of a unit) and sets of named resources.
//
// `CPU`, `memory` (bytes), `TPU` (chips), `GPU` and any custom name. Amounts are never negative.
// Thread-safety: value types; not thread-safe to mutate concurrently. A broken REQUIRES is a caller bug and aborts.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace torus {

inline constexpr int64_t kResourceScale = 10000;

inline constexpr std::string_view kResourceCpu = "CPU";
inline constexpr std::string_view kResourceMemory = "memory";
inline constexpr std::string_view kResourceTpu = "TPU";
inline constexpr std::string_view kResourceGpu = "GPU";

// The largest amount of one resource, in units. 1e15 units would not fit int64 at this scale; 9e14 bytes of
// memory is still far beyond any host.
inline constexpr double kMaxResourceAmount = 9e14;

// Converts a user number to fixed point, rounding to the nearest 1/10000 (0.1 + 0.2 -> 3000; below 0.00005 -> 0).
// Error (InvalidArgument) when negative, not finite, or above kMaxResourceAmount.
absl::StatusOr<int64_t> ToFixed(double amount);
// The nearest double: FromFixed(3000) == 0.3.
double FromFixed(int64_t fixed);
// "4", "0.5", "17179869184": shortest exact decimal of a fixed-point amount.
std::string FormatFixed(int64_t fixed);

// A map from resource name to fixed-point amount; zero entries are not stored.
class ResourceSet {
 public:
  ResourceSet() = default;

  // Sets `name` to `fixed` (removes it when 0). REQUIRES: fixed >= 0.
  void SetFixed(std::string_view name, int64_t fixed);
  // Sets `name` to `amount` rounded as ToFixed does. REQUIRES: ToFixed(amount) succeeds.
  void Set(std::string_view name, double amount);
  int64_t GetFixed(std::string_view name) const;
  double Get(std::string_view name) const { return FromFixed(GetFixed(name)); }

  // True when every amount of `other` is <= ours.
  bool Contains(const ResourceSet& other) const;
  // Adds, saturating at the largest int64 amount (cluster-wide totals may pass it).
  void Add(const ResourceSet& other);
  // Subtracts, clamping at zero. Callers check Contains first when exactness matters.
  void Subtract(const ResourceSet& other);

  bool empty() const { return amounts_.empty(); }
  const std::map<std::string, int64_t, std::less<>>& amounts() const { return amounts_; }
  bool operator==(const ResourceSet&) const = default;

  // Names in map order, whole amounts as integers, others as the FormatFixed decimal:
  // {"CPU": 4, "TPU": 4, "accel_x": 0.5, "memory": 1073741824}
  std::string ToJson() const;

 private:
  std::map<std::string, int64_t, std::less<>> amounts_;
};

// Validates a resource name: 1–128 characters of letters, digits, `_`, `-`, `.`, `/`, `:`, starting with a letter
// or `_`. Error names the name and the rule.
absl::Status ValidateResourceName(std::string_view name);

// Parses the agent's `--resources '{"name": n, ...}'` JSON object of custom resources.
// Errors (InvalidArgument, naming the field): not a JSON object; a value that is not a non-negative finite number;
// an invalid name; `CPU`, `GPU`, `TPU` or `memory` (detected; say which flag sets them: --num-cpus, --memory, or
// detection for TPU/GPU); a repeated name. Empty (or all-space) text means no custom resources; zero amounts are
// accepted and not stored.
absl::StatusOr<ResourceSet> ParseCustomResourcesJson(std::string_view json);

}  // namespace torus
