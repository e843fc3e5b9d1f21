// Resource amounts in fixed point (1/10000 of a unit) and sets of named resources.
//
// `CPU`, `memory` (bytes), `TPU` (chips), `GPU` and any custom name. Amounts are never negative.
// Thread-safety: value types; not thread-safe to mutate concurrently.
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

// Converts a user number to fixed point. Error when negative, not finite, or above 1e15 units.
absl::StatusOr<int64_t> ToFixed(double amount);
double FromFixed(int64_t fixed);
// "4", "0.5", "17179869184": shortest exact decimal of a fixed-point amount.
std::string FormatFixed(int64_t fixed);

// A map from resource name to fixed-point amount; zero entries are not stored.
class ResourceSet {
 public:
  ResourceSet() = default;

  // Sets `name` to `fixed` (removes it when 0). REQUIRES: fixed >= 0.
  void SetFixed(std::string_view name, int64_t fixed);
  void Set(std::string_view name, double amount) { SetFixed(name, static_cast<int64_t>(amount * kResourceScale + (amount >= 0 ? 0.5 : -0.5))); }
  int64_t GetFixed(std::string_view name) const;
  double Get(std::string_view name) const { return FromFixed(GetFixed(name)); }

  // True when every amount of `other` is <= ours.
  bool Contains(const ResourceSet& other) const;
  void Add(const ResourceSet& other);
  // Subtracts, clamping at zero. Callers check Contains first when exactness matters.
  void Subtract(const ResourceSet& other);

  bool empty() const { return amounts_.empty(); }
  const std::map<std::string, int64_t, std::less<>>& amounts() const { return amounts_; }
  bool operator==(const ResourceSet&) const = default;

  // {"CPU": 4, "memory": 1073741824, "TPU": 4}
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
// detection for TPU/GPU).
absl::StatusOr<ResourceSet> ParseCustomResourcesJson(std::string_view json);

}  // namespace torus
