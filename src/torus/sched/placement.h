// The scheduling core's requests, outcomes and entry points (reference/semantics.md §§4–7), in one include.
//
// Everything here is pure and deterministic: a read-only ClusterIndex plus a request in, an outcome out. No RPC, no
// clock, no threads, no logging. Ties break on (score, node id) or (score, slice name).
//
// Outcomes are types: Placed | Pending{reason} | Infeasible{reason}. Pending means "not now, maybe later" (resources
// busy, slice reserved or degraded); Infeasible means no alternative could ever fit the cluster as it is known.
// Reasons are sentences a user can act on.
//
//   cluster_index.h       ClusterIndex::Build(IndexInput): nodes, label index, slices by shape, free capacity
//   single_policy.h       PlaceSingle / ValidateSingleRequest: a task, actor or entrypoint on one node (hybrid)
//   bundle_policy.h       PlaceBundles / ValidateBundleRequest: placement groups, four strategies, rescheduling
//   slice_group_policy.h  PlaceSliceGroup / ValidateSliceGroupRequest: whole slices, fallback shapes, keep_slices
//
// Thread-safety: all functions are pure; a ClusterIndex is immutable after Build and may be shared across threads.
#pragma once

#include "torus/sched/bundle_policy.h"
#include "torus/sched/cluster_index.h"
#include "torus/sched/outcome.h"
#include "torus/sched/single_policy.h"
#include "torus/sched/slice_group_policy.h"
