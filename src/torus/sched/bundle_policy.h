// Placement groups: bundles placed on nodes under PACK, SPREAD, STRICT_PACK or STRICT_SPREAD, with per-bundle label
// selectors, fallback alternatives and rescheduling around surviving bundles (reference/semantics.md §§4–5).
//
//   STRICT_PACK    all bundles on one node (matching every bundle's selector), the tightest fit; or not placed.
//   PACK           one node if one holds all (a node the group already uses first, then the tightest fit); else
//                  largest bundle first, onto a node the group already uses (tightest fit), else the fitting node
//                  with least free capacity.
//   STRICT_SPREAD  every bundle on a different node, or not placed: largest bundle first onto the first fitting
//                  unused node; when that greedy pass fails, an exact bipartite matching decides (it finds a
//                  placement whenever one exists, since a node then holds at most one bundle).
//   SPREAD         different nodes while enough exist (the first fitting unused node), then the fitting node with
//                  the fewest of the group's bundles.
//
// "Largest" orders bundles by TPU, GPU, CPU, memory (descending), then by index. "Least free capacity" is the sum,
// over the resources the bundle asks for, of (free - asked) / total. Nodes are compared tier first (ClusterIndex
// preference order: hosts without accelerators, other accelerator hosts, hosts of free slices), so CPU bundles do
// not take the CPUs of TPU hosts and TPU bundles do not break whole free slices while other hosts fit; ties break
// by node id.
// PACK and SPREAD are greedy, as in Ray: a group they fail to place might fit a cleverer assignment.
//
// Rescheduling (`fixed`): surviving bundles stay on their nodes and count as the group's nodes (PACK prefers them,
// SPREAD counts them, STRICT_SPREAD avoids them). STRICT_PACK's bundles share one node, so a node death loses all
// of them and `fixed` is normally empty; when it is not, the rest join the survivors' node if it holds them (the
// survivors keep running), else STRICT_PACK re-places all: every bundle gets one new node in the outcome, so
// node_ids differ from `fixed` and the caller moves the survivors (their resources count as used in the snapshot,
// which only makes the choice conservative). `fixed` refers to the primary's bundles; when it is non-empty the
// fallbacks are not tried, so the head passes the alternative the group was created with as the primary. A
// survivor on a node the index does not list alive keeps its node id in the outcome.
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "torus/common/label_selector.h"
#include "torus/common/resources.h"
#include "torus/sched/cluster_index.h"
#include "torus/sched/outcome.h"

namespace torus::sched {

enum class Strategy { kPack, kSpread, kStrictPack, kStrictSpread };
std::string_view StrategyName(Strategy s);                      // "PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"
absl::StatusOr<Strategy> ParseStrategy(std::string_view text);  // case-insensitive; error names the accepted forms

struct BundleAlternative {
  std::vector<ResourceSet> bundles;
  std::vector<LabelSelector> bundle_selectors;  // empty, or one per bundle
};

struct BundleRequest {
  BundleAlternative primary;
  std::vector<BundleAlternative> fallbacks;
  Strategy strategy = Strategy::kPack;
  // Rescheduling after a node death: bundles already placed and still alive (index -> node id). They stay put;
  // only the others are placed, honouring the strategy against the survivors' nodes.
  std::map<int, std::string> fixed;
};

struct BundlePlacement {
  std::vector<std::string> node_ids;  // one per bundle of the chosen alternative (fixed ones included)
  int alternative = 0;                // 0 = primary, i = fallbacks[i-1]
  bool operator==(const BundlePlacement&) const = default;
};

using BundleOutcome = std::variant<BundlePlacement, Pending, Infeasible>;

// Validates shape only (non-empty bundles, a positive amount in each, whole TPU chips, selector count, fixed
// indices); errors name the alternative, bundle index and field, e.g.
//   "bundle 2: TPU amount 0.5 is not a whole number of chips"
//   "fallback 1: bundle_label_selector has 2 selectors for 3 bundles; give none or one per bundle"
absl::Status ValidateBundleRequest(const BundleRequest& request);

// An invalid request is Infeasible with the validation message. Reasons, one line per alternative:
//   "STRICT_SPREAD 8 bundles: at most 5 of the 8 bundles fit on distinct nodes now"
//   "fallback 1: PACK 2 bundles: bundle 1 {"CPU": 64}: no alive node is large enough for it"
BundleOutcome PlaceBundles(const ClusterIndex& index, const BundleRequest& request);

}  // namespace torus::sched
