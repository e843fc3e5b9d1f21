// PlacementService: what users ask of placement groups and slice groups — create, reserve, get, list, wait, remove —
// over the state store and the scheduler. Requests arrive validated into the scheduling core's form (the API layer
// converts protos with group_requests.h).
//
// Thread-safety: thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/common/clock.h"
#include "torus/head/placement/placement_scheduler.h"
#include "torus/head/state/ids.h"
#include "torus/head/state/state_store.h"

namespace torus::head {

class PlacementService {
 public:
  PlacementService(StateStore* store, PlacementScheduler* scheduler, IdGenerator* ids, const Clock* clock)
      : store_(store), scheduler_(scheduler), ids_(ids), clock_(clock) {}

  // A new group, PENDING. InvalidArgument names the field; AlreadyExists for a name a live group has.
  absl::StatusOr<Group> CreateBundles(sched::BundleRequest request, const std::string& name, double timeout_s);
  absl::StatusOr<Group> CreateSlices(sched::SliceGroupRequest request, const std::string& name, double timeout_s);
  // By id or by the name of a live group; NotFound otherwise.
  absl::StatusOr<Group> Get(const std::string& id_or_name) const;
  // Every group (ended ones too when asked), in submission order.
  std::vector<Group> List(bool include_ended) const;
  // Removes a group in any state (idempotent): every bundle is released on its agent; it ends REMOVED.
  absl::StatusOr<Group> Remove(const std::string& id_or_name);
  void WaitSettled(const std::string& id_or_name, int64_t wait_ms, PlacementScheduler::WaitDone done) {
    scheduler_->WaitSettled(id_or_name, wait_ms, std::move(done));
  }

 private:
  absl::StatusOr<Group> Submitted(absl::StatusOr<GroupId> id);

  StateStore* store_;
  PlacementScheduler* scheduler_;
  IdGenerator* ids_;
  const Clock* clock_;
};

}  // namespace torus::head
