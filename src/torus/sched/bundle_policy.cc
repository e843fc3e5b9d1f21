#include "torus/sched/bundle_policy.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "torus/common/status.h"
#include "torus/sched/bundle_strategies.h"
#include "torus/sched/policy_util.h"

namespace torus::sched {
namespace {

constexpr Strategy kStrategies[] = {Strategy::kPack, Strategy::kSpread, Strategy::kStrictPack,
                                    Strategy::kStrictSpread};

absl::Status ValidateAlternative(const BundleAlternative& alt, const std::string& prefix) {
  if (alt.bundles.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "bundles is empty; a placement group needs at least one bundle"));
  }
  for (size_t b = 0; b < alt.bundles.size(); ++b) {
    const ResourceSet& bundle = alt.bundles[b];
    if (bundle.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "bundle ", b, ": has no positive resource amount; give at least one, e.g. {\"CPU\": 1}"));
    }
    const int64_t tpu = bundle.GetFixed(kResourceTpu);
    if (tpu % kResourceScale != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "bundle ", b, ": TPU amount ", FormatFixed(tpu), " is not a whole number of chips"));
    }
  }
  if (!alt.bundle_selectors.empty() && alt.bundle_selectors.size() != alt.bundles.size()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "bundle_label_selector has ",
                                                   Count(alt.bundle_selectors.size(), "selector", "selectors"),
                                                   " for ", Count(alt.bundles.size(), "bundle", "bundles"),
                                                   "; give none or one per bundle"));
  }
  return absl::OkStatus();
}

// Places one alternative against available (idle = false) or total (idle = true) capacity. Returns "" and fills
// `node_of` when placed, else why not.
std::string PlaceAlternative(const ClusterIndex& index, const BundleAlternative& alt, Strategy strategy,
                             const std::map<int, std::string>& fixed, bool idle, std::vector<int>& node_of) {
  BundleProblem p(index, alt.bundles, alt.bundle_selectors, idle);
  for (const auto& [b, node_id] : fixed) {
    int node = index.NodeIndex(node_id);
    if (node < 0 || !index.nodes()[node].alive) {
      p.node_of[b] = kFixedElsewhere;
      continue;
    }
    p.node_of[b] = node;
    // Survivors already hold their resources in `available`; the totals do not know about them.
    if (idle) p.capacity.Take(node, alt.bundles[b]);
  }
  std::string why;
  switch (strategy) {
    case Strategy::kStrictPack: why = PlaceStrictPack(p); break;
    case Strategy::kPack: why = PlacePack(p); break;
    case Strategy::kStrictSpread: why = PlaceStrictSpread(p); break;
    case Strategy::kSpread: why = PlaceSpread(p); break;
  }
  node_of = std::move(p.node_of);
  return why;
}

}  // namespace

std::string_view StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kPack: return "PACK";
    case Strategy::kSpread: return "SPREAD";
    case Strategy::kStrictPack: return "STRICT_PACK";
    case Strategy::kStrictSpread: return "STRICT_SPREAD";
  }
  return "UNKNOWN";
}

absl::StatusOr<Strategy> ParseStrategy(std::string_view text) {
  std::string upper = absl::AsciiStrToUpper(std::string(text));
  for (Strategy s : kStrategies) {
    if (upper == StrategyName(s)) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("placement strategy \"", std::string(text),
                                                 "\" is not supported; valid: PACK, SPREAD, STRICT_PACK, "
                                                 "STRICT_SPREAD"));
}

absl::Status ValidateBundleRequest(const BundleRequest& request) {
  TORUS_RETURN_IF_ERROR(ValidateAlternative(request.primary, ""));
  for (size_t i = 0; i < request.fallbacks.size(); ++i) {
    TORUS_RETURN_IF_ERROR(ValidateAlternative(request.fallbacks[i], AlternativePrefix(static_cast<int>(i + 1))));
  }
  for (const auto& [b, node_id] : request.fixed) {
    if (b < 0 || b >= static_cast<int>(request.primary.bundles.size())) {
      return absl::InvalidArgumentError(absl::StrCat("fixed bundle ", b, " is out of range; the primary has ",
                                                     Count(request.primary.bundles.size(), "bundle", "bundles")));
    }
    if (node_id.empty()) return absl::InvalidArgumentError(absl::StrCat("fixed bundle ", b, " has no node id"));
  }
  return absl::OkStatus();
}

BundleOutcome PlaceBundles(const ClusterIndex& index, const BundleRequest& request) {
  if (absl::Status valid = ValidateBundleRequest(request); !valid.ok()) {
    return Infeasible{std::string(valid.message())};
  }
  std::vector<std::string> lines;
  bool pending = false;
  const size_t alternatives = request.fixed.empty() ? 1 + request.fallbacks.size() : 1;
  for (size_t a = 0; a < alternatives; ++a) {
    const BundleAlternative& alt = a == 0 ? request.primary : request.fallbacks[a - 1];
    const std::map<int, std::string> no_fixed;
    const std::map<int, std::string>& fixed = a == 0 ? request.fixed : no_fixed;
    std::vector<int> node_of;
    std::string why = PlaceAlternative(index, alt, request.strategy, fixed, /*idle=*/false, node_of);
    if (why.empty()) {
      BundlePlacement placement{{}, static_cast<int>(a)};
      for (size_t b = 0; b < node_of.size(); ++b) {
        placement.node_ids.push_back(node_of[b] >= 0 ? index.nodes()[node_of[b]].node_id
                                                     : fixed.at(static_cast<int>(b)));
      }
      return placement;
    }
    std::vector<int> idle_node_of;
    std::string never = PlaceAlternative(index, alt, request.strategy, fixed, /*idle=*/true, idle_node_of);
    pending = pending || never.empty();
    lines.push_back(absl::StrCat(AlternativePrefix(static_cast<int>(a)), std::string(StrategyName(request.strategy)), " ",
                                 Count(alt.bundles.size(), "bundle", "bundles"), ": ", never.empty() ? why : never));
  }
  if (pending) return Pending{JoinLines(lines)};
  return Infeasible{JoinLines(lines)};
}

}  // namespace torus::sched
