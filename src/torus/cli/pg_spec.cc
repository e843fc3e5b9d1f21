#include "torus/cli/pg_spec.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "torus/common/resources.h"

namespace torus::cli {
namespace {

absl::StatusOr<nlohmann::json> ParseJson(const std::string& flag, const std::string& json) {
  auto parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(flag, ": not valid JSON: ", json));
  return parsed;
}

absl::StatusOr<rpc::BundleRequestProto> BundleFromJson(const std::string& where, const nlohmann::json& j) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": must be an object of resource amounts, e.g. {\"CPU\": 1}"));
  }
  rpc::BundleRequestProto bundle;
  for (const auto& [name, value] : j.items()) {
    if (!value.is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": \"", name, "\" must be a number"));
    }
    auto fixed = ToFixed(value.get<double>());
    if (!fixed.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": \"", name, "\": ", fixed.status().message()));
    (*bundle.mutable_resources())[name] = *fixed;
  }
  return bundle;
}

absl::StatusOr<std::map<std::string, std::string>> SelectorFromJson(const std::string& where, const nlohmann::json& j) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": must be an object of label key to expression, e.g. {\"torus.io/market-type\": \"spot\"}"));
  }
  std::map<std::string, std::string> selector;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": the expression of \"", key, "\" must be a string"));
    }
    selector[key] = value.get<std::string>();
  }
  return selector;
}

}  // namespace

absl::StatusOr<std::vector<rpc::BundleRequestProto>> ParseBundlesJson(const std::string& flag, const std::string& json) {
  auto j = ParseJson(flag, json);
  if (!j.ok()) return j.status();
  if (!j->is_array() || j->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": must be a non-empty JSON list of bundles, e.g. "
                                                         "'[{\"CPU\": 1}, {\"CPU\": 1, \"TPU\": 4}]'"));
  }
  std::vector<rpc::BundleRequestProto> bundles;
  for (size_t i = 0; i < j->size(); ++i) {
    auto bundle = BundleFromJson(absl::StrCat(flag, "[", i, "]"), (*j)[i]);
    if (!bundle.ok()) return bundle.status();
    bundles.push_back(*std::move(bundle));
  }
  return bundles;
}

absl::Status ApplyBundleSelectorsJson(const std::string& json, std::vector<rpc::BundleRequestProto>& bundles) {
  const std::string flag = "--bundle-label-selector";
  auto j = ParseJson(flag, json);
  if (!j.ok()) return j.status();
  if (j->is_object()) {
    auto selector = SelectorFromJson(flag, *j);
    if (!selector.ok()) return selector.status();
    for (auto& b : bundles) b.mutable_label_selector()->insert(selector->begin(), selector->end());
    return absl::OkStatus();
  }
  if (!j->is_array()) return absl::InvalidArgumentError(flag + ": must be a JSON list (one object per bundle) or one object");
  if (j->size() != bundles.size()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": has ", j->size(), " selectors for ", bundles.size(),
                                                   " bundles; give one per bundle, or one object for all"));
  }
  for (size_t i = 0; i < bundles.size(); ++i) {
    auto selector = SelectorFromJson(absl::StrCat(flag, "[", i, "]"), (*j)[i]);
    if (!selector.ok()) return selector.status();
    bundles[i].mutable_label_selector()->insert(selector->begin(), selector->end());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, std::string>> ParseSelectorJson(const std::string& flag, const std::string& json) {
  auto j = ParseJson(flag, json);
  if (!j.ok()) return j.status();
  return SelectorFromJson(flag, *j);
}

absl::StatusOr<rpc::SliceShapeProto> ParseFallbackShape(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat("--fallback \"", text,
                                                   "\": expected ACCELERATOR_TYPE:TOPOLOGY[:NUM_SLICES], e.g. "
                                                   "TPU-V5LITEPOD:4x4:2"));
  };
  if (parts.size() < 2 || parts.size() > 3 || parts[0].empty() || parts[1].empty()) return bad();
  rpc::SliceShapeProto shape;
  shape.set_accelerator_type(parts[0]);
  shape.set_topology(parts[1]);
  shape.set_num_slices(1);
  if (parts.size() == 3) {
    int n = 0;
    if (!absl::SimpleAtoi(parts[2], &n) || n < 1) return bad();
    shape.set_num_slices(n);
  }
  return shape;
}

absl::StatusOr<rpc::BundleAlternativeProto> ParseBundleFallbackJson(const std::string& json) {
  const std::string flag = "--fallback";
  auto j = ParseJson(flag, json);
  if (!j.ok()) return j.status();
  if (!j->is_object() || !j->contains("bundles")) {
    return absl::InvalidArgumentError(
        flag + ": must be an object with \"bundles\" (and optionally \"bundle_label_selector\")");
  }
  for (const auto& [key, value] : j->items()) {
    if (key != "bundles" && key != "bundle_label_selector") {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": unknown key \"", key, "\"; accepted: bundles, bundle_label_selector"));
    }
  }
  auto bundles = ParseBundlesJson(flag + ".bundles", (*j)["bundles"].dump());
  if (!bundles.ok()) return bundles.status();
  if (j->contains("bundle_label_selector")) {
    absl::Status s = ApplyBundleSelectorsJson((*j)["bundle_label_selector"].dump(), *bundles);
    if (!s.ok()) return s;
  }
  rpc::BundleAlternativeProto alternative;
  for (auto& b : *bundles) *alternative.add_bundles() = std::move(b);
  return alternative;
}

}  // namespace torus::cli
