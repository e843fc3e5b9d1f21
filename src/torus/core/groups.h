// Placement groups and slice groups from the core worker: the head's group API (HeadService), and where a group's
// bundles are, for leases inside them.
// Thread-safety: functions; each makes blocking calls to the head.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/core/task_submitter.h"
#include "torus/head.grpc.pb.h"

namespace torus::core {

// The head's view of a group: its state (PENDING, CREATED, RESCHEDULING, REMOVED, FAILED), why it is not CREATED,
// and where its bundles are.
absl::StatusOr<rpc::PlacementGroupView> GetGroup(Channels& channels, const std::string& head, const std::string& id,
                                                 int64_t wait_ready_ms);
absl::StatusOr<rpc::PlacementGroupView> CreateGroup(Channels& channels, const std::string& head,
                                                    const rpc::PlacementGroupSpec& spec);
absl::StatusOr<rpc::PlacementGroupView> ReserveSlices(Channels& channels, const std::string& head,
                                                      const rpc::SliceGroupSpec& spec);
absl::Status RemoveGroup(Channels& channels, const std::string& head, const std::string& id);

// A group's state, read from the head's wire view (a string there) once, at this edge.
enum class GroupState { kPending, kCreated, kRescheduling, kRemoved, kFailed };
// InvalidArgument naming the state for one this build does not know.
absl::StatusOr<GroupState> GroupStateOf(const rpc::PlacementGroupView& view);

// Waits until the group is CREATED (OK, with its bundles) or can no longer be (FailedPrecondition: "placement group
// pg-x is REMOVED: <reason>"), asking the head at most every `wait_ms` (a long wait at the head each time).
absl::StatusOr<std::vector<BundleLocation>> WaitForBundles(Channels& channels, const std::string& head,
                                                           const std::string& id, const std::function<bool()>& stop);

}  // namespace torus::core
