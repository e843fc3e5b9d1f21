// The steps of slice-group placement for one chips-per-host variant of one alternative: laying bundles out on a
// host, filtering and picking free slices, and saying why a slice is not eligible (slice_group_policy.h).
// Internal to the scheduling core.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "torus/common/resources.h"
#include "torus/sched/cluster_index.h"
#include "torus/sched/slice_group_policy.h"

namespace torus::sched {

// How an alternative's bundles sit on one host of a slice with `chips_per_host` chips.
struct HostLayout {
  int chips_per_host = 0;
  int chips_per_bundle = 0;  // chips_per_host for BundleUnit::kHost
  int bundles_per_host = 0;
  ResourceSet per_bundle;    // with CPU and TPU filled in
  ResourceSet per_host;      // per_bundle x bundles_per_host
};

// nullopt when the bundle resources cannot be laid out on hosts of that many chips (see SliceGroupRequest).
std::optional<HostLayout> LayoutFor(BundleUnit unit, const std::optional<ResourceSet>& resources_per_bundle,
                                    int chips_per_host);

// The chips per host a shape admits: `chips_per_host` if given, else every value MakeSliceShape accepts.
std::vector<int> AdmissibleChipsPerHost(const SliceShapeRequest& shape);

// The slices of `shape` that `selector` may hold on: with `free_only`, its free slices in preference order, else
// all of them by name. That is the shape's own list, unless the label index narrows the selector to fewer hosts
// than the list has slices; then only the slices with a host among those.
class SliceCandidates {
 public:
  SliceCandidates(const ClusterIndex& index, const ShapeEntry& shape, const LabelSelector& selector, bool free_only);
  const std::vector<int>& slices() const { return narrowed_ ? storage_ : *own_; }
  // True when the selector is known to hold on every host of every listed slice (callers skip checking it).
  bool selector_holds() const { return selector_holds_; }

 private:
  const std::vector<int>* own_;
  std::vector<int> storage_;
  bool narrowed_ = false;
  bool selector_holds_ = false;
};

// Whether a slice can be chosen for hosts needing `per_host`, the selector aside: free (READY, no busy chip) and
// every host has `per_host` available.
bool IsEligible(const ClusterIndex& index, int slice, const ResourceSet& per_host);

// Up to `need` eligible slices of `shape` in preference order, skipping `excluded` (indices into slices()).
// Returns fewer when there are not enough.
std::vector<int> ChooseFreeSlices(const ClusterIndex& index, const ShapeEntry& shape, int need,
                                  const LabelSelector& selector, const ResourceSet& per_host,
                                  const std::vector<int>& excluded);

// Why slice `slice` cannot be chosen for hosts needing `per_host` ("v6e-0 RESERVED by pg 7f3a", "v6e-3 busy: chip
// 1 in use on worker 0 (node a)"); "" when it is eligible (the selector is not checked here).
std::string Ineligibility(const ClusterIndex& index, int slice, const ResourceSet& per_host);

// keep_slices as indices when every one exists with this shape, is READY or RESERVED, satisfies the selector, and
// there are at most `num_slices` of them; else empty (the alternative chooses afresh).
std::vector<int> ResolveKeep(const ClusterIndex& index, const ShapeEntry& shape, const SliceShapeRequest& alt,
                             const std::vector<std::string>& keep_slices);

}  // namespace torus::sched
