#include "torus/sched/single_policy.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "torus/common/device_env.h"
#include "torus/common/status.h"
#include "torus/sched/policy_util.h"

namespace torus::sched {
namespace {

struct AlternativeResult {
  int node = -1;           // placed here when >= 0
  size_t matching = 0;     // alive nodes the selector matches
  size_t could_hold = 0;   // of those, nodes whose total holds the request
};

// One selector: filter -> score -> pick, stopping at the first node under the threshold.
AlternativeResult PlaceWithSelector(const ClusterIndex& index, const ResourceSet& demand,
                                    const LabelSelector& selector, double threshold) {
  AlternativeResult result;
  const int64_t tpu = demand.GetFixed(kResourceTpu);
  const NodeCandidates candidates = index.CandidatesFor(selector, NeedsAccelerator(demand));
  int best = -1;
  double best_utilisation = 0;
  int best_tier = 0;
  for (int node : candidates.nodes()) {
    const NodeSnapshot& n = index.nodes()[node];
    const int tier = index.node_facts(node).tier;
    // Candidates come tier by tier: a fit in an earlier tier ends the search.
    if (best >= 0 && tier > best_tier) {
      result.node = best;
      return result;
    }
    if (!candidates.exact() && !selector.Matches(n.labels)) continue;
    ++result.matching;
    if (!n.total.Contains(demand)) continue;
    ++result.could_hold;
    if (!n.available.Contains(demand) || !ChipBlockFree(index, node, tpu)) continue;
    double utilisation = UtilisationAfter(index, node, n.available, demand);
    if (utilisation <= threshold) {
      result.node = node;
      return result;
    }
    if (best < 0 || utilisation < best_utilisation) {
      best = node;
      best_utilisation = utilisation;
      best_tier = tier;
    }
  }
  result.node = best;
  return result;
}

std::string Reason(const AlternativeResult& r, const ResourceSet& demand, const LabelSelector& selector) {
  const std::string phrase = SelectorPhrase(selector);
  // Work that needs TPU or GPU only looks at accelerator hosts; to it, any other host is just too small.
  if (r.matching == 0 && !NeedsAccelerator(demand)) {
    return selector.empty() ? std::string("no alive node") : absl::StrCat("no alive node matches ", selector.ToString());
  }
  if (r.matching == 0 || r.could_hold == 0) return absl::StrCat("no alive node", phrase, " is large enough for ", demand.ToJson());
  return absl::StrCat("no alive node", phrase, " has ", demand.ToJson(), " free now; ",
                      Count(r.could_hold, selector.empty() ? "node" : "matching node",
                            selector.empty() ? "nodes" : "matching nodes"),
                      " could hold it once free");
}

}  // namespace

absl::Status ValidateSingleRequest(const SingleRequest& request) {
  TORUS_RETURN_IF_ERROR(ValidateTpuRequest(request.resources.Get(kResourceTpu)));
  if (!std::isfinite(request.spread_threshold) || request.spread_threshold < 0 || request.spread_threshold > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("spread_threshold ", request.spread_threshold, " is outside the accepted range 0..1"));
  }
  return absl::OkStatus();
}

SingleOutcome PlaceSingle(const ClusterIndex& index, const SingleRequest& request) {
  std::vector<std::string> lines;
  bool pending = false;
  const size_t alternatives = 1 + request.fallback_selectors.size();
  for (size_t alt = 0; alt < alternatives; ++alt) {
    const LabelSelector& selector = alt == 0 ? request.selector : request.fallback_selectors[alt - 1];
    AlternativeResult r = PlaceWithSelector(index, request.resources, selector, request.spread_threshold);
    if (r.node >= 0) return SinglePlacement{index.nodes()[r.node].node_id, static_cast<int>(alt)};
    pending = pending || r.could_hold > 0;
    lines.push_back(absl::StrCat(AlternativePrefix(static_cast<int>(alt)), Reason(r, request.resources, selector)));
  }
  if (pending) return Pending{JoinLines(lines)};
  return Infeasible{JoinLines(lines)};
}

}  // namespace torus::sched
