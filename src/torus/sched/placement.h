// The scheduling core's requests, outcomes and entry points (reference/semantics.md §§4–7).
//
// Everything here is pure and deterministic: a read-only ClusterIndex plus a request in, an outcome out. No RPC, no
// clock, no threads, no logging. Ties break on (score, node id) or (score, slice name).
//
// Outcomes are types: Placed | Pending{reason} | Infeasible{reason}. Pending means "not now, maybe later" (resources
// busy, slice reserved or degraded); Infeasible means no alternative could ever fit the cluster as it is known.
// Reasons are sentences a user can act on.
//
// Thread-safety: all functions are pure; a ClusterIndex is immutable after Build and may be shared across threads.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "torus/common/label_selector.h"
#include "torus/common/resources.h"
#include "torus/common/tpu_shape.h"
#include "torus/sched/cluster_snapshot.h"
#include "torus/sched/slices.h"

namespace torus::sched {

struct Pending {
  std::string reason;
};
struct Infeasible {
  std::string reason;
};

// ---------------------------------------------------------------------------------------------------------------
// The cluster as the scheduler sees it, with indices so that a decision does not scan every node.

struct IndexInput {
  std::vector<NodeSnapshot> nodes;               // alive and dead; only alive ones are placement candidates
  // Slices held by a slice group: slice name -> holder (e.g. "pg 7f3c"). A held slice is RESERVED.
  std::map<std::string, std::string> slice_holders;
  // TPU chip indices already busy per node (held by bundles or workers), for per-chip placement.
  std::map<std::string, std::vector<int>> busy_chips;
};

class ClusterIndex {
 public:
  static ClusterIndex Build(IndexInput input);

  const std::vector<NodeSnapshot>& nodes() const;  // sorted by node id
  const NodeSnapshot* FindNode(std::string_view node_id) const;
  const std::vector<Slice>& slices() const;        // with RESERVED applied from slice_holders
  // Alive nodes carrying label key=value, as indices into nodes(), ascending.
  const std::vector<int>& NodesWithLabel(std::string_view key, std::string_view value) const;
  // Slices of one shape (accelerator type + topology + chips per host), by name.
  std::vector<const Slice*> SlicesOfShape(std::string_view accelerator_type, std::string_view topology,
                                          int chips_per_host) const;
  // ... whatever else the policies need (free-capacity buckets, etc.).

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// ---------------------------------------------------------------------------------------------------------------
// Single request (a task, an actor, a job entrypoint): one node.

struct SingleRequest {
  ResourceSet resources;
  LabelSelector selector;
  std::vector<LabelSelector> fallback_selectors;  // tried in order when the previous cannot be placed now
  double spread_threshold = 0.5;                  // hybrid policy: pack below this utilisation, then spread
};
struct SinglePlacement {
  std::string node_id;
  int alternative = 0;  // 0 = primary selector, i = fallback_selectors[i-1]
};
using SingleOutcome = std::variant<SinglePlacement, Pending, Infeasible>;

// Hybrid policy: among feasible nodes (selector matches, available >= request), the lowest node id whose
// utilisation after placement stays at or below the threshold; if none, the least utilised; ties by node id.
SingleOutcome PlaceSingle(const ClusterIndex& index, const SingleRequest& request);

// ---------------------------------------------------------------------------------------------------------------
// Placement groups (semantics.md §5).

enum class Strategy { kPack, kSpread, kStrictPack, kStrictSpread };
std::string_view StrategyName(Strategy s);                      // "PACK", ...
absl::StatusOr<Strategy> ParseStrategy(std::string_view text);  // error names the accepted forms

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
  std::vector<std::string> node_ids;  // one per bundle of the chosen alternative
  int alternative = 0;
};
using BundleOutcome = std::variant<BundlePlacement, Pending, Infeasible>;

// Validates shape only (non-empty bundles, non-negative amounts, whole TPU chips, selector count); errors name the
// bundle index and field, e.g. "bundle 2: TPU amount 0.5 is not a whole number of chips".
absl::Status ValidateBundleRequest(const BundleRequest& request);
BundleOutcome PlaceBundles(const ClusterIndex& index, const BundleRequest& request);

// ---------------------------------------------------------------------------------------------------------------
// Slice groups (semantics.md §6).

struct SliceShapeRequest {
  TpuGeneration generation;
  Topology topology;
  int num_slices = 1;
  std::optional<int> chips_per_host;  // settles v5e/v6e 2x4
  LabelSelector selector;             // must hold on every host of a chosen slice
  std::string ToString() const;       // "TPU-V6E 4x4 x2"
};
enum class BundleUnit { kHost, kChip };
struct SliceGroupRequest {
  SliceShapeRequest primary;
  std::vector<SliceShapeRequest> fallbacks;
  BundleUnit unit = BundleUnit::kHost;
  // Per bundle; default {CPU: 1, TPU: chips per host} (kHost) or {CPU: 1, TPU: 1} (kChip); CPU 1 added if absent.
  std::optional<ResourceSet> resources_per_bundle;
  // Slices the group already holds that are still healthy (rescheduling a degraded group): they are kept and
  // only the missing slices are chosen.
  std::vector<std::string> keep_slices;
};
struct SliceBundle {
  std::string node_id;
  std::string slice_name;
  int slice_index = 0;   // 0..num_slices-1, in choice order
  int worker_id = 0;
  std::vector<int> chips;  // chip indices on the host held by this bundle
  ResourceSet resources;
};
struct SliceGroupPlacement {
  int alternative = 0;                    // 0 = primary
  std::vector<std::string> slice_names;   // chosen slices, in choice order
  std::vector<SliceBundle> bundles;       // slice-major, then worker id, then chip block
};
using SliceGroupOutcome = std::variant<SliceGroupPlacement, Pending, Infeasible>;

absl::Status ValidateSliceGroupRequest(const SliceGroupRequest& request);
// Picks num_slices distinct eligible slices (READY, no chip busy, bundle resources free, selector holds on every
// host), preferring the choice that leaves the most whole slices free; tries fallbacks in order. Pending reasons
// list one line per alternative, e.g.
//   "TPU-V6E 4x4 x2: 1 of 2 slices available (v6e-0 RESERVED by pg 7f3a; v6e-1 DEGRADED: worker 2 dead (node x))"
//   "TPU-V5P 2x2x2 x1: infeasible: no slice of this shape"
SliceGroupOutcome PlaceSliceGroup(const ClusterIndex& index, const SliceGroupRequest& request);

}  // namespace torus::sched
