#include "torus/head/placement/group_requests.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/status.h"
#include "torus/rpc/convert.h"

namespace torus::head {
namespace {

absl::Status FieldError(const std::string& field, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

absl::StatusOr<LabelSelector> SelectorFromProto(const google::protobuf::Map<std::string, std::string>& map,
                                                const std::string& field) {
  std::map<std::string, std::string> raw(map.begin(), map.end());
  auto selector = LabelSelector::Parse(raw);
  if (!selector.ok()) return FieldError(field, selector.status().message());
  return *selector;
}

absl::StatusOr<sched::BundleAlternative> AlternativeFromProto(
    const google::protobuf::RepeatedPtrField<rpc::BundleRequestProto>& bundles, const std::string& field) {
  sched::BundleAlternative alternative;
  if (bundles.empty()) return FieldError(field, "at least one bundle is required");
  bool any_selector = false;
  for (const auto& b : bundles) any_selector = any_selector || !b.label_selector().empty();
  for (int i = 0; i < bundles.size(); ++i) {
    std::string where = absl::StrCat(field, "[", i, "]");
    auto resources = rpc::FromProto(bundles[i].resources(), where);
    if (!resources.ok()) return resources.status();
    alternative.bundles.push_back(*std::move(resources));
    if (any_selector) {
      auto selector = SelectorFromProto(bundles[i].label_selector(), where + ".label_selector");
      if (!selector.ok()) return selector.status();
      alternative.bundle_selectors.push_back(*std::move(selector));
    }
  }
  return alternative;
}

absl::StatusOr<sched::SliceShapeRequest> ShapeFromProto(const rpc::SliceShapeProto& shape, const std::string& field) {
  sched::SliceShapeRequest out;
  if (shape.accelerator_type().empty()) return FieldError(field + ".accelerator_type", "is required (e.g. TPU-V6E)");
  auto generation = ParseAcceleratorType(shape.accelerator_type());
  if (!generation.ok()) return FieldError(field + ".accelerator_type", generation.status().message());
  out.generation = *generation;
  if (shape.topology().empty()) return FieldError(field + ".topology", "is required (e.g. 4x4)");
  auto topology = ParseTopology(*generation, shape.topology());
  if (!topology.ok()) return FieldError(field + ".topology", topology.status().message());
  out.topology = *topology;
  if (shape.num_slices() < 0 || shape.num_slices() > 4096) {
    return FieldError(field + ".num_slices", "must be 1 to 4096");
  }
  out.num_slices = shape.num_slices() == 0 ? 1 : shape.num_slices();
  if (shape.chips_per_host() != 0) {
    auto built = MakeSliceShape(*generation, *topology, shape.chips_per_host());
    if (!built.ok()) return FieldError(field + ".chips_per_host", built.status().message());
    out.chips_per_host = shape.chips_per_host();
  }
  auto selector = SelectorFromProto(shape.label_selector(), field + ".label_selector");
  if (!selector.ok()) return selector.status();
  out.selector = *std::move(selector);
  return out;
}

}  // namespace

absl::StatusOr<sched::BundleRequest> BundleRequestFromProto(const rpc::PlacementGroupSpec& spec) {
  sched::BundleRequest request;
  if (!spec.strategy().empty()) {
    auto strategy = sched::ParseStrategy(spec.strategy());
    if (!strategy.ok()) return FieldError("strategy", strategy.status().message());
    request.strategy = *strategy;
  }
  auto primary = AlternativeFromProto(spec.bundles(), "bundles");
  if (!primary.ok()) return primary.status();
  request.primary = *std::move(primary);
  for (int i = 0; i < spec.fallbacks_size(); ++i) {
    auto alternative = AlternativeFromProto(spec.fallbacks(i).bundles(), absl::StrCat("fallbacks[", i, "].bundles"));
    if (!alternative.ok()) return alternative.status();
    request.fallbacks.push_back(*std::move(alternative));
  }
  if (spec.timeout_s() < 0) return FieldError("timeout_s", "must not be negative (0 = wait until removed)");
  TORUS_RETURN_IF_ERROR(sched::ValidateBundleRequest(request));
  return request;
}

absl::StatusOr<sched::SliceGroupRequest> SliceRequestFromProto(const rpc::SliceGroupSpec& spec) {
  sched::SliceGroupRequest request;
  auto primary = ShapeFromProto(spec.primary(), "primary");
  if (!primary.ok()) return primary.status();
  request.primary = *std::move(primary);
  for (int i = 0; i < spec.fallbacks_size(); ++i) {
    auto shape = ShapeFromProto(spec.fallbacks(i), absl::StrCat("fallbacks[", i, "]"));
    if (!shape.ok()) return shape.status();
    request.fallbacks.push_back(*std::move(shape));
  }
  request.unit = spec.per_chip() ? sched::BundleUnit::kChip : sched::BundleUnit::kHost;
  if (!spec.resources_per_bundle().empty()) {
    auto resources = rpc::FromProto(spec.resources_per_bundle(), "resources_per_bundle");
    if (!resources.ok()) return resources.status();
    request.resources_per_bundle = *std::move(resources);
  }
  if (spec.timeout_s() < 0) return FieldError("timeout_s", "must not be negative (0 = wait until removed)");
  TORUS_RETURN_IF_ERROR(sched::ValidateSliceGroupRequest(request));
  return request;
}

std::string DescribeBundleRequest(const sched::BundleRequest& request) {
  auto describe = [](const sched::BundleAlternative& a) {
    std::vector<std::string> parts;
    for (const ResourceSet& b : a.bundles) parts.push_back(b.ToJson());
    return absl::StrCat(a.bundles.size(), " bundle", a.bundles.size() == 1 ? "" : "s", " ",
                        absl::StrJoin(parts, ", "));
  };
  std::string text = absl::StrCat(std::string(sched::StrategyName(request.strategy)), ", ", describe(request.primary));
  for (const auto& f : request.fallbacks) absl::StrAppend(&text, "; fallback ", describe(f));
  return text;
}

std::string DescribeSliceRequest(const sched::SliceGroupRequest& request) {
  std::string text = absl::StrCat(request.primary.ToString(),
                                  request.unit == sched::BundleUnit::kChip ? ", per chip" : ", per host");
  for (const auto& f : request.fallbacks) absl::StrAppend(&text, "; fallback ", f.ToString());
  return text;
}

}  // namespace torus::head
