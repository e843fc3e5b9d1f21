// Changes to placement groups made inside a state transaction: submitting one, ending one, and what the loss of
// bundles (a dead node, or an agent that no longer holds them) means for their groups. Each returns the bundles
// that agents must be told to release, for the caller to hand to PlacementScheduler::Release after the
// transaction.
//
// Thread-safety: functions over a Txn (called under the store's lock).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/head/state/ids.h"
#include "torus/head/state/state_store.h"

namespace torus::head {

// A new PENDING group; validates the name (at most 128 characters; AlreadyExists when a live group has it:
// `a placement group named "x" exists (pg-...); remove it first`) and applies GroupSubmitted.
struct NewGroup {
  std::string name;
  Owner owner;
  double timeout_s = 0;
  int64_t wall_ms = 0;
};
absl::StatusOr<GroupId> SubmitBundleGroup(Txn& txn, IdGenerator& ids, sched::BundleRequest request,
                                          const NewGroup& spec);
absl::StatusOr<GroupId> SubmitSliceGroup(Txn& txn, IdGenerator& ids, sched::SliceGroupRequest request,
                                         const NewGroup& spec);

// Ends a live group REMOVED or FAILED; returns the bundles it held (not lost). An ended or unknown group: nothing.
std::vector<HeldBundle> EndGroup(Txn& txn, const GroupId& id, PgState state, const std::string& message,
                                 int64_t wall_ms);

// Bundles on `node` that `which` picks are gone: a bundle group marks them lost (RESCHEDULING, placed again), a
// slice group loses every slice that had one, whole (the slice is the unit of failure). `node_died` words the
// messages ("node n1 died: bundle 2 lost; placing again" / "slice v6e-0 degraded (a host died): released whole;
// reserving a replacement"; otherwise "node n1 no longer holds ..."). Returns the other bundles of lost slices,
// which agents must release.
std::vector<HeldBundle> LoseBundles(Txn& txn, const NodeId& node, const std::function<bool(const HeldBundle&)>& which,
                                    bool node_died, int64_t wall_ms);

}  // namespace torus::head
