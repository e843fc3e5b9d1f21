// The autoscaler's policy: from the waiting groups (slice groups, placement groups, the groups of gang runs and
// jobs) and the slices it has launched, which whole slices of the configured node types to launch and which to
// remove. Never a partial slice: a slice is launched, counted and removed as a unit.
//
// How demand becomes launches: the waiting groups are decided in scheduling order (decide.h, the scheduler's own
// decision) against the cluster as it will be once the slices being launched have started. A group that fits is
// covered. For one that does not, each node type is tried in configuration order with its first capacity class that
// has not failed lately: k = 1, 2, ... new slices of it (within max_slices) are added to the cluster and the group
// decided again; the smallest k that places it wins. Among node types, one that serves an earlier alternative of
// the group wins (the primary shape before its fallbacks), then configuration order. Chosen slices count for the
// groups after it.
//
// Capacity classes: a launch that has not provisioned within its class's provisioning timeout is removed and the
// class fails for that node type for `failure_backoff_ms`; meanwhile the next class in order is used. A launch the
// provider refuses fails the class the same way (the mechanism records it). When every class of the only fitting
// node type has failed, the group's note says so and when the first retries.
//
// A running slice that lost a host (dead, or gone) is removed whole at once: the slice is the unit of failure, and
// its groups are placed again, on a new slice if need be.
//
// Removal: a running slice none of whose hosts holds a bundle or runs a worker, and that no waiting group would use,
// is idle; once idle for its node type's idle_timeout it is removed whole, never below min_slices. Node types
// below min_slices get launches too.
//
// Example: node type v6e (TPU-V6E 4x4, classes spot then flex-start, max 4), an empty cluster, one slice group of
//   TPU-V6E 4x4 x2 -> launches {v6e spot, v6e spot}; note "autoscaler: launching slices v6e-a, v6e-b (TPU-V6E 4x4,
//   spot)". 10 s later neither has provisioned (spot's timeout 10 s) -> removals {v6e-a, v6e-b}, failures {v6e spot:
//   "no capacity within 10 s"}, launches {v6e flex-start x2}, note "... (TPU-V6E 4x4, flex-start); spot: no capacity
//   within 10 s".
//
// Pure: no clock, no I/O; names of new slices come from the input's generator.
//
// Thread-safety: pure functions over value types.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "torus/autoscale/config.h"
#include "torus/head/placement/decide.h"
#include "torus/head/state/model.h"

namespace torus::head {

// A slice the autoscaler launched.
struct ScaledSlice {
  enum class Phase { kProvisioning, kRunning };
  std::string name;
  std::string node_type;
  autoscale::CapacityClass capacity_class = autoscale::CapacityClass::kOnDemand;
  Phase phase = Phase::kProvisioning;
  int64_t launched_ms = 0;
  int64_t running_ms = 0;     // when every host had registered
  int64_t idle_since_ms = 0;  // 0: in use, or provisioning
};
std::string_view ScaledSlicePhaseName(ScaledSlice::Phase p);  // "PROVISIONING", "RUNNING"

// A capacity class of a node type that failed: not tried again until `until_ms`.
struct ClassFailure {
  std::string node_type;
  autoscale::CapacityClass capacity_class = autoscale::CapacityClass::kOnDemand;
  std::string reason;  // "no capacity within 10 s", or the provider's refusal
  int64_t at_ms = 0;
  int64_t until_ms = 0;
};

struct ScalingInput {
  const autoscale::AutoscalerConfig* config = nullptr;
  PassInput cluster;                 // the state's pass input: registered, alive nodes are placeable
  std::vector<Group> waiting;        // in scheduling order
  std::set<NodeId> running_workers;  // nodes with a worker not yet exited
  std::vector<ScaledSlice> slices;   // launched, not yet removed
  std::vector<ClassFailure> failures;  // recent; those past until_ms are ignored
  int64_t now_ms = 0;
  std::function<std::string(const autoscale::NodeType&)> new_slice_name;  // "<type>-<5 hex>", unique
};

struct SliceLaunch {
  std::string slice;
  std::string node_type;
  autoscale::CapacityClass capacity_class = autoscale::CapacityClass::kOnDemand;
  std::string why;  // "for placement group pg-1", "min_slices 1"
};

struct SliceRemoval {
  std::string slice;
  std::string why;  // "idle for 60 s", "no capacity within 10 s"
};

struct ScalingPlan {
  std::vector<SliceLaunch> launches;
  std::vector<SliceRemoval> removals;
  std::vector<ClassFailure> new_failures;      // provisioning timeouts of this plan
  std::set<std::string> now_running;           // provisioning slices whose hosts have all registered
  std::map<std::string, int64_t> idle_since;   // running slices idle now -> since when
  std::map<GroupId, std::string> notes;        // waiting group -> what the autoscaler does about it
};

ScalingPlan PlanScaling(const ScalingInput& input);

// The nodes of a cluster for a slice of `type` that is not there yet (alive, nothing held): what Decide sees of a
// slice being launched. Adds them to `input` (a node already there is made alive instead).
void AddPlannedSlice(const autoscale::NodeType& type, const std::string& slice,
                     autoscale::CapacityClass capacity_class, PassInput& input);

}  // namespace torus::head
