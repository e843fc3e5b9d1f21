// Turning `torus pg create` and `torus slice reserve` flags into requests. Pure functions; errors name the flag and
// the accepted forms.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/head.pb.h"

namespace torus::cli {

// `--bundles '[{"CPU": 1}, {"CPU": 1, "TPU": 4}]'` -> bundles with fixed-point resources.
absl::StatusOr<std::vector<rpc::BundleRequestProto>> ParseBundlesJson(const std::string& flag, const std::string& json);

// `--bundle-label-selector`: a JSON list with one selector object per bundle, or one object for every bundle.
// Sets each bundle's label_selector. Error when a list's length differs from the bundle count.
absl::Status ApplyBundleSelectorsJson(const std::string& json, std::vector<rpc::BundleRequestProto>& bundles);

// `--label-selector '{"torus.io/market-type": "spot"}'` -> key/expression map (checked later by the head).
absl::StatusOr<std::map<std::string, std::string>> ParseSelectorJson(const std::string& flag, const std::string& json);

// `--fallback TPU-V5LITEPOD:4x4[:2]` -> a shape; num_slices defaults to 1.
absl::StatusOr<rpc::SliceShapeProto> ParseFallbackShape(const std::string& text);

// `--fallback '{"bundles": [...], "bundle_label_selector": [...]}'` for placement groups.
absl::StatusOr<rpc::BundleAlternativeProto> ParseBundleFallbackJson(const std::string& json);

}  // namespace torus::cli
