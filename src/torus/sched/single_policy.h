// Placement of a single request (a task, an actor, a job entrypoint) on one node: the hybrid policy with label
// selectors and fallback selectors (reference/semantics.md §§3–4, §7).
//
// Filter: alive nodes the selector matches (through the label index), whose free resources hold the request and,
//         for TPU, that have a free aligned block of chips (AllocateChipBlock's rule).
// Score:  utilisation after placement = the max over the node's resources of used / total.
// Pick:   tier by tier (ClusterIndex preference order: hosts without accelerators, other accelerator hosts, hosts
//         of free slices), the first node by id whose utilisation after placement stays at or below
//         spread_threshold (pack onto few nodes while they are lightly used); if none in the tier, its least
//         utilised, ties by node id (spread once every node is busy). A later tier is looked at only when nothing
//         in the earlier ones fits: CPU-only work does not take the CPUs that TPU work needs, and a 1-chip task
//         does not break a whole free slice while a host of a used one has chips free.
// Alternatives: the primary selector, then each fallback in order; the first that can be placed now wins.
// Outcome: Pending when some alternative's selector matches an alive node whose total could hold the request
//          (it is busy now); Infeasible when none does.
//
// Example (threshold 0.5, request {CPU: 2}, nodes a: 1/8 CPU used, b: idle, both matching):
//   a after placement is 3/8 <= 0.5 -> a (lowest id under the threshold; b stays idle).
//   With a at 3/8 used: 5/8 > 0.5, b: 2/8 -> b.
//
// Thread-safety: pure functions.
#pragma once

#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "torus/common/label_selector.h"
#include "torus/common/resources.h"
#include "torus/sched/cluster_index.h"
#include "torus/sched/outcome.h"

namespace torus::sched {

struct SingleRequest {
  ResourceSet resources;
  LabelSelector selector;
  std::vector<LabelSelector> fallback_selectors;  // tried in order when the previous cannot be placed now
  double spread_threshold = 0.5;                  // hybrid policy: pack below this utilisation, then spread
};

struct SinglePlacement {
  std::string node_id;
  int alternative = 0;  // 0 = primary selector, i = fallback_selectors[i-1]
  bool operator==(const SinglePlacement&) const = default;
};

using SingleOutcome = std::variant<SinglePlacement, Pending, Infeasible>;

// Checks what a submission must get right: the TPU amount (ValidateTpuRequest: 1, 2, 4 or 8 chips; whole
// numbers; at most 8) and spread_threshold in [0, 1]. Errors are InvalidArgument and name the field.
absl::Status ValidateSingleRequest(const SingleRequest& request);

// REQUIRES: ValidateSingleRequest(request) is OK (otherwise the decision is still safe, but may be Pending for
// a request no node can serve, such as 3 chips).
// Reasons, one line per alternative ("fallback <i>: " before fallback lines):
//   no alive node matching <selector> has {"CPU": 4} free now; 3 matching nodes could hold it once free
//   no alive node matching <selector> is large enough for {"CPU": 64}
//   no alive node matches <selector>
SingleOutcome PlaceSingle(const ClusterIndex& index, const SingleRequest& request);

}  // namespace torus::sched
