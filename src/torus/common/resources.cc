#include "torus/common/resources.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "torus/common/strings.h"

namespace torus {
namespace {

constexpr int64_t kMaxFixed = std::numeric_limits<int64_t>::max();

// A broken REQUIRES is a bug in the caller, not bad input: stop before it corrupts a ledger.
[[noreturn]] void DieRequires(std::string_view what) {
  std::fprintf(stderr, "torus resources: REQUIRES failed: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

// Saturates instead of overflowing: totals over a large cluster may pass int64, and a capped total is still a
// usable upper bound, where a wrapped one is negative.
int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t sum;
  if (__builtin_add_overflow(a, b, &sum)) return kMaxFixed;
  return sum;
}

// Drops nlohmann's "[json.exception.parse_error.101] " tag: users need the position and the reason only.
std::string JsonErrorText(const std::exception& e) {
  std::string_view text = e.what();
  if (text.starts_with("[json.exception.")) {
    size_t end = text.find("] ");
    if (end != std::string_view::npos) text.remove_prefix(end + 2);
  }
  return std::string(text);
}

// A scalar as JSON text; containers by kind only, since printing them recurses and they may be deeply nested.
std::string Describe(const nlohmann::json& value) {
  if (value.is_object()) return "an object";
  if (value.is_array()) return "an array";
  return value.dump();
}

// Says which flag or mechanism sets a built-in resource, so that the error tells the user what to use instead.
absl::string_view BuiltInResourceSource(std::string_view name) {
  if (name == kResourceCpu) return "is set by --num-cpus, not --resources";
  if (name == kResourceMemory) return "is set by --memory, not --resources";
  if (name == kResourceTpu || name == kResourceGpu) {
    return "is detected from the host's devices, not set by --resources";
  }
  return {};
}

}  // namespace

absl::StatusOr<int64_t> ToFixed(double amount) {
  if (!std::isfinite(amount)) {
    return absl::InvalidArgumentError(absl::StrCat("resource amount ", amount, " is not a finite number"));
  }
  if (amount < 0) {
    return absl::InvalidArgumentError(absl::StrCat("resource amount ", amount, " is negative"));
  }
  if (amount > kMaxResourceAmount) {
    return absl::InvalidArgumentError(
        absl::StrFormat("resource amount %.17g is too large; the largest is %.0f", amount, kMaxResourceAmount));
  }
  // Whole and fractional parts are scaled apart: amount * 10000 in one step loses exactness for byte counts past
  // 2^53 / 10000 (about 900 GB), while both parts here are exact doubles (floor and the subtraction are exact).
  double whole = std::floor(amount);
  double frac = amount - whole;
  return static_cast<int64_t>(whole) * kResourceScale + std::llround(frac * kResourceScale);
}

double FromFixed(int64_t fixed) {
  // One division of an exact integer: the nearest double to the decimal, so FromFixed(3000) == 0.3.
  return static_cast<double>(fixed) / kResourceScale;
}

std::string FormatFixed(int64_t fixed) {
  // Unsigned magnitude so that even INT64_MIN (never a valid amount, but printable for diagnostics) is safe.
  bool negative = fixed < 0;
  uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(fixed) : static_cast<uint64_t>(fixed);
  uint64_t whole = magnitude / kResourceScale;
  uint64_t frac = magnitude % kResourceScale;
  std::string out = absl::StrCat(negative ? "-" : "", whole);
  if (frac != 0) {
    std::string digits = absl::StrFormat("%04d", frac);
    while (digits.back() == '0') digits.pop_back();
    absl::StrAppend(&out, ".", digits);
  }
  return out;
}

void ResourceSet::SetFixed(std::string_view name, int64_t fixed) {
  if (fixed < 0) DieRequires(absl::StrCat("SetFixed(\"", AbslView(name), "\", ", fixed, "): amount is negative"));
  if (fixed == 0) {
    auto it = amounts_.find(name);
    if (it != amounts_.end()) amounts_.erase(it);
    return;
  }
  auto it = amounts_.find(name);
  if (it == amounts_.end()) {
    amounts_.emplace(std::string(name), fixed);
  } else {
    it->second = fixed;
  }
}

void ResourceSet::Set(std::string_view name, double amount) {
  absl::StatusOr<int64_t> fixed = ToFixed(amount);
  if (!fixed.ok()) DieRequires(absl::StrCat("Set(\"", AbslView(name), "\"): ", fixed.status().message()));
  SetFixed(name, *fixed);
}

int64_t ResourceSet::GetFixed(std::string_view name) const {
  auto it = amounts_.find(name);
  return it == amounts_.end() ? 0 : it->second;
}

bool ResourceSet::Contains(const ResourceSet& other) const {
  for (const auto& [name, amount] : other.amounts_) {
    if (GetFixed(name) < amount) return false;
  }
  return true;
}

void ResourceSet::Add(const ResourceSet& other) {
  for (const auto& [name, amount] : other.amounts_) {
    auto it = amounts_.find(name);
    if (it == amounts_.end()) {
      amounts_.emplace(name, amount);
    } else {
      it->second = SaturatingAdd(it->second, amount);
    }
  }
}

void ResourceSet::Subtract(const ResourceSet& other) {
  for (const auto& [name, amount] : other.amounts_) {
    auto it = amounts_.find(name);
    if (it == amounts_.end()) continue;
    if (it->second <= amount) {
      amounts_.erase(it);
    } else {
      it->second -= amount;
    }
  }
}

std::string ResourceSet::ToJson() const {
  std::string out = "{";
  const char* separator = "";
  for (const auto& [name, amount] : amounts_) {
    // FormatFixed prints a valid JSON number; the name goes through the JSON encoder because SetFixed does not
    // validate names.
    absl::StrAppend(&out, separator, nlohmann::json(name).dump(), ": ", FormatFixed(amount));
    separator = ", ";
  }
  out += "}";
  return out;
}

absl::Status ValidateResourceName(std::string_view name) {
  constexpr absl::string_view kRule =
      "a resource name is 1-128 characters of letters, digits, '_', '-', '.', '/' or ':', starting with a letter "
      "or '_'";
  auto invalid = [&](absl::string_view problem) {
    return absl::InvalidArgumentError(
        absl::StrCat("resource name \"", absl::CHexEscape(AbslView(name)), "\" is invalid: ", problem, "; ", kRule));
  };
  if (name.empty()) return invalid("it is empty");
  if (name.size() > 128) return invalid(absl::StrCat("it is ", name.size(), " characters long"));
  if (!absl::ascii_isalpha(name[0]) && name[0] != '_') return invalid("it does not start with a letter or '_'");
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '_' && c != '-' && c != '.' && c != '/' && c != ':') {
      return invalid(absl::StrCat("it contains '", absl::CHexEscape(absl::string_view(&c, 1)), "'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ResourceSet> ParseCustomResourcesJson(std::string_view json) {
  constexpr absl::string_view kFlag = "--resources: ";
  if (absl::StripAsciiWhitespace(AbslView(json)).empty()) return ResourceSet();

  // nlohmann keeps the last of repeated keys silently; the callback sees every top-level key so that a repeat,
  // most likely a typo, is an error rather than a lost amount.
  std::set<std::string, std::less<>> seen_keys;
  std::string repeated_key;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      std::string key = parsed.get<std::string>();
      if (!seen_keys.insert(key).second && repeated_key.empty()) repeated_key = key;
    }
    return true;
  };
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json.begin(), json.end(), on_event);
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(kFlag, "invalid JSON: ", JsonErrorText(e)));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kFlag, "expected a JSON object of resource names to amounts, e.g. {\"accel_x\": 2}, got ", Describe(root)));
  }
  if (!repeated_key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kFlag, nlohmann::json(repeated_key).dump(), " appears more than once"));
  }

  ResourceSet resources;
  for (const auto& [name, value] : root.items()) {
    std::string quoted = nlohmann::json(name).dump();
    if (absl::string_view source = BuiltInResourceSource(name); !source.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(kFlag, quoted, " ", source));
    }
    if (absl::Status status = ValidateResourceName(name); !status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(kFlag, status.message()));
    }
    // Booleans are not numbers to nlohmann either, so `true` is rejected here rather than read as 1.
    if (!value.is_number() || value.get<double>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kFlag, quoted, " must be a non-negative number, got ", Describe(value)));
    }
    absl::StatusOr<int64_t> fixed = ToFixed(value.get<double>());
    if (!fixed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(kFlag, quoted, ": ", fixed.status().message()));
    }
    resources.SetFixed(name, *fixed);
  }
  return resources;
}

}  // namespace torus
