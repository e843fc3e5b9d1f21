// Slice groups: num_slices distinct complete slices of one shape, reserved all-or-nothing, with ordered fallback
// shapes (reference/semantics.md §6, tpu.md §2).
//
// Filter (a lookup: ClusterIndex keeps each shape's free slices): slices of the requested accelerator type and
//   topology whose chips per host is the requested one, or without chips_per_host any the shape admits (a 2x4
//   request matches 8-chip single-host slices and 4-chip two-host ones, never a mix in one group). A slice is
//   eligible when it is READY (not RESERVED, DEGRADED or INCOMPLETE), no chip of it is busy, every host has the
//   bundle resources available, and the selector holds on every host.
// Score: each shape's free slices are pre-ordered (ShapeEntry::free): larger pools first (slices sharing market
//   type, node group, zone and region; taking from the largest keeps rare pools whole for requests that select
//   them and keeps a multislice group in one pool), then slices partly used already (best fit: idle slices stay
//   whole), then by name. Without chips_per_host, the chips-per-host variant with more free slices goes first
//   (the scarcer variant stays whole for requests that name it), ties to the shape's default.
// Pick: the first num_slices eligible slices in that order.
//
// Bundles: one per host (bundle_unit host), or one per aligned chip block (bundle_unit chip: TPU per bundle 1, 2,
//   4 or 8 dividing chips per host; blocks allocated as AllocateChipBlock does, lowest first). Order: slice-major in
//   choice order, then worker id, then chip block. Example: v6e 4x4 x2, chip unit, TPU 2 per bundle ->
//   16 bundles: slice 0 worker 0 chips {0,1}, {2,3}; worker 1 {0,1}, {2,3}; ... slice 1 worker 3 {2,3}.
//
// keep_slices (rescheduling a degraded group): for an alternative whose shape (and selector) they all fit, and no
//   more of them than its num_slices, they are kept: they count toward num_slices, come first in the order (in the
//   order given), and only the rest is chosen. An alternative they do not fit chooses all its slices afresh, and
//   the caller releases the kept slices if that alternative wins.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "torus/common/label_selector.h"
#include "torus/common/resources.h"
#include "torus/common/tpu_shape.h"
#include "torus/sched/cluster_index.h"
#include "torus/sched/outcome.h"

namespace torus::sched {

struct SliceShapeRequest {
  TpuGeneration generation = TpuGeneration::kV6e;
  Topology topology;
  int num_slices = 1;
  std::optional<int> chips_per_host;  // settles v5e/v6e 2x4
  LabelSelector selector;             // must hold on every host of a chosen slice
  // "TPU-V6E 4x4 x2"; with chips_per_host "TPU-V6E 2x4 x1 (4 chips per host)".
  std::string ToString() const;
};

enum class BundleUnit { kHost, kChip };

struct SliceGroupRequest {
  SliceShapeRequest primary;
  std::vector<SliceShapeRequest> fallbacks;
  BundleUnit unit = BundleUnit::kHost;
  // Per bundle; default {CPU: 1, TPU: chips per host} (kHost) or {CPU: 1, TPU: 1} (kChip); CPU 1 added if absent,
  // and TPU too (the default amount). With kHost a TPU amount must equal the chips per host (and so settles 2x4).
  std::optional<ResourceSet> resources_per_bundle;
  // Slices the group already holds that are still healthy (rescheduling a degraded group): they are kept and
  // only the missing slices are chosen.
  std::vector<std::string> keep_slices;
};

struct SliceBundle {
  std::string node_id;
  std::string slice_name;
  int slice_index = 0;     // 0..num_slices-1, in choice order
  int worker_id = 0;
  std::vector<int> chips;  // chip indices on the host held by this bundle
  ResourceSet resources;
  bool operator==(const SliceBundle&) const = default;
};

struct SliceGroupPlacement {
  int alternative = 0;                   // 0 = primary, i = fallbacks[i-1]
  std::vector<std::string> slice_names;  // chosen slices, in choice order (kept ones first)
  std::vector<SliceBundle> bundles;      // slice-major, then worker id, then chip block
  bool operator==(const SliceGroupPlacement&) const = default;
};

using SliceGroupOutcome = std::variant<SliceGroupPlacement, Pending, Infeasible>;

// Errors (InvalidArgument) name the alternative ("fallback 2: ") and field: num_slices < 1; a topology not valid
// for the generation (tpu.md §1 wording); chips_per_host the shape does not admit; resources_per_bundle with a
// fractional TPU amount, a host-unit TPU amount other than the chips per host, or a chip-unit amount that is not
// 1, 2, 4 or 8 dividing the chips per host; keep_slices with an empty or repeated name.
absl::Status ValidateSliceGroupRequest(const SliceGroupRequest& request);

// Picks num_slices distinct eligible slices for the first alternative that has them. An invalid request is
// Infeasible with the validation message. Otherwise Pending lists one line per alternative, e.g.
//   "TPU-V6E 4x4 x2: 1 of 2 slices available (v6e-0 RESERVED by pg 7f3a; v6e-1 DEGRADED: worker 2 dead (node x))"
//   "TPU-V5P 2x2x2 x1: infeasible: no slice of this shape"
// other details read "v6e-2 INCOMPLETE: worker 3 missing", "v6e-3 busy: chip 1 in use on worker 0 (node a)",
// "v6e-4 busy: worker 1 (node b) has {"CPU": 0.5} free of the {"CPU": 1, "TPU": 4} each host needs"; after 8
// details the rest are counted ("and 12 more"). With a selector the line starts "TPU-V6E 4x4 x2 matching <sel>:"
// and counts only slices it holds on ("infeasible: only 1 slice of this shape matches the selector").
// Infeasible only when every alternative is: fewer slices of its shape (matching its selector) exist, in any
// state, than it needs.
SliceGroupOutcome PlaceSliceGroup(const ClusterIndex& index, const SliceGroupRequest& request);

}  // namespace torus::sched
