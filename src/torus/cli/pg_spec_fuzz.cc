// libFuzzer target for the placement group specs of the CLI (docs/fuzzing.md): `torus pg create --bundles`,
// `--bundle-label-selector`, `--label-selector` and `--fallback` (JSON, and the slice form TYPE:TOPOLOGY[:N]). The
// whole input is tried as each flag. Parsing may fail, with InvalidArgument; it must never crash, and what parses
// prints back and parses equal: bundles as JSON with each amount as FormatFixed writes it, selectors as JSON objects,
// slice shapes as TYPE:TOPOLOGY:N. Amounts are never negative; one selector object applies to every bundle.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "torus/cli/pg_spec.h"
#include "torus/common/resources.h"

namespace {

namespace cli = torus::cli;
using torus::rpc::BundleRequestProto;

// Aborts, so that libFuzzer records the input, when a property that parsing promises does not hold.
void Require(bool condition) {
  if (!condition) std::abort();
}

// [{"CPU": 1, "accel_x": 0.5}, ...], names through the JSON encoder, amounts as FormatFixed writes them.
std::string PrintBundles(const std::vector<BundleRequestProto>& bundles) {
  std::string out = "[";
  for (size_t i = 0; i < bundles.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", "{");
    const std::map<std::string, int64_t> sorted(bundles[i].resources().begin(), bundles[i].resources().end());
    const char* separator = "";
    for (const auto& [name, fixed] : sorted) {
      absl::StrAppend(&out, separator, nlohmann::json(name).dump(), ": ", torus::FormatFixed(fixed));
      separator = ", ";
    }
    out += "}";
  }
  return out + "]";
}

std::map<std::string, int64_t> Resources(const BundleRequestProto& bundle) {
  return {bundle.resources().begin(), bundle.resources().end()};
}

std::map<std::string, std::string> Selector(const BundleRequestProto& bundle) {
  return {bundle.label_selector().begin(), bundle.label_selector().end()};
}

void CheckBundles(const std::vector<BundleRequestProto>& bundles) {
  Require(!bundles.empty());
  for (const BundleRequestProto& bundle : bundles) {
    for (const auto& [name, fixed] : bundle.resources()) Require(fixed >= 0);
  }
  absl::StatusOr<std::vector<BundleRequestProto>> again = cli::ParseBundlesJson("--bundles", PrintBundles(bundles));
  Require(again.ok() && again->size() == bundles.size());
  for (size_t i = 0; i < bundles.size(); ++i) Require(Resources((*again)[i]) == Resources(bundles[i]));
}

template <typename T>
void RequireInvalid(const absl::StatusOr<T>& parsed) {
  Require(parsed.ok() || parsed.status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);

  absl::StatusOr<std::vector<BundleRequestProto>> bundles = cli::ParseBundlesJson("--bundles", input);
  RequireInvalid(bundles);
  if (bundles.ok()) CheckBundles(*bundles);

  std::vector<BundleRequestProto> two(2);
  absl::Status applied = cli::ApplyBundleSelectorsJson(input, two);
  Require(applied.ok() || applied.code() == absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::map<std::string, std::string>> selector = cli::ParseSelectorJson("--label-selector", input);
  RequireInvalid(selector);
  if (selector.ok()) {
    // One object: the same selector on every bundle.
    Require(applied.ok() && Selector(two[0]) == *selector && Selector(two[1]) == *selector);
    absl::StatusOr<std::map<std::string, std::string>> again =
        cli::ParseSelectorJson("--label-selector", nlohmann::json(*selector).dump());
    Require(again.ok() && *again == *selector);
  }

  absl::StatusOr<torus::rpc::SliceShapeProto> shape = cli::ParseFallbackShape(input);
  RequireInvalid(shape);
  if (shape.ok()) {
    Require(shape->num_slices() >= 1);
    absl::StatusOr<torus::rpc::SliceShapeProto> again = cli::ParseFallbackShape(
        absl::StrCat(shape->accelerator_type(), ":", shape->topology(), ":", shape->num_slices()));
    Require(again.ok() && again->accelerator_type() == shape->accelerator_type() &&
            again->topology() == shape->topology() && again->num_slices() == shape->num_slices());
  }

  absl::StatusOr<torus::rpc::BundleAlternativeProto> alternative = cli::ParseBundleFallbackJson(input);
  RequireInvalid(alternative);
  if (alternative.ok()) {
    CheckBundles(std::vector<BundleRequestProto>(alternative->bundles().begin(), alternative->bundles().end()));
  }
  return 0;
}
