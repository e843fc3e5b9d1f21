// A placement group or slice group as the head keeps it: the validated request, the bundles it holds, its state
// history. Plus the conversions between its proto request/view and the scheduling core's types.
//
// States: PENDING (with a reason) -> CREATED; CREATED -> RESCHEDULING on the loss of a node (a slice, for slice
// groups) -> CREATED or PENDING; any -> REMOVED (by the user) or FAILED (timed out).
//
// Thread-safety: value types; PlacementGroupManager guards them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/common/resources.h"
#include "torus/head.pb.h"
#include "torus/sched/placement.h"

namespace torus::head {

enum class PgState { kPending, kCreated, kRescheduling, kRemoved, kFailed };
std::string PgStateName(PgState s);
enum class PgKind { kBundles, kSlices };

// One bundle the group holds (or held, while `lost`).
struct HeldBundle {
  int index = 0;             // position in the group: slice-major, then worker id, then chip block
  int ledger_index = 0;      // index within its ledger group on the agent
  std::string node_id;
  std::string target;        // agent "address:port"
  std::string address;
  std::string ledger_group;  // the agent-side group: "<pg id>" or "<pg id>/<slice>"
  std::string slice_name;    // slice groups
  int worker_id = -1;
  std::vector<int> chips;
  ResourceSet resources;
  bool lost = false;         // its node died; waiting to be placed again
};

struct PgEvent {
  int64_t time_ms = 0;
  std::string state;
  std::string message;
};

struct PlacementGroup {
  std::string id;
  std::string name;
  PgKind kind = PgKind::kBundles;
  sched::BundleRequest bundle_request;      // kBundles
  sched::SliceGroupRequest slice_request;   // kSlices
  std::string request_text;
  uint64_t seq = 0;                         // submission order
  PgState state = PgState::kPending;
  std::string reason;
  int alternative = 0;
  std::vector<HeldBundle> bundles;
  std::vector<std::string> slices;          // slice groups: held slices, in order
  std::vector<PgEvent> history;
  int64_t created_wall_ms = 0;
  int64_t created_micros = 0;
  double timeout_s = 0;
  uint64_t attempt = 0;
  int64_t retry_at_micros = 0;
  int64_t backoff_ms = 0;

  bool Live() const { return state != PgState::kRemoved && state != PgState::kFailed; }
};

// Validates and converts requests. Errors (InvalidArgument) name the field and the accepted forms, e.g.
// `bundles: at least one bundle is required`, `strategy "TIGHT" is not valid; use PACK, SPREAD, STRICT_PACK or
// STRICT_SPREAD`, `primary.topology: topology "3x3" is not valid for TPU-V6E; valid: ...`.
absl::StatusOr<sched::BundleRequest> BundleRequestFromProto(const rpc::PlacementGroupSpec& spec);
absl::StatusOr<sched::SliceGroupRequest> SliceRequestFromProto(const rpc::SliceGroupSpec& spec);
// "STRICT_SPREAD, 4 bundles {CPU: 1}" / "TPU-V6E 4x4 x2, per host; fallback TPU-V5LITEPOD 4x4 x2"
std::string DescribeBundleRequest(const sched::BundleRequest& request);
std::string DescribeSliceRequest(const sched::SliceGroupRequest& request);

void ToView(const PlacementGroup& group, rpc::PlacementGroupView* view);

}  // namespace torus::head
