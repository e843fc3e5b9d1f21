// Placement group and slice group requests: validation of the proto specs into the scheduling core's requests,
// and the requests in words.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "torus/head.pb.h"
#include "torus/sched/placement.h"

namespace torus::head {

// Validates and converts requests. Errors (InvalidArgument) name the field and the accepted forms, e.g.
// `bundles: at least one bundle is required`, `strategy "TIGHT" is not valid; use PACK, SPREAD, STRICT_PACK or
// STRICT_SPREAD`, `primary.topology: topology "3x3" is not valid for TPU-V6E; valid: ...`.
absl::StatusOr<sched::BundleRequest> BundleRequestFromProto(const rpc::PlacementGroupSpec& spec);
absl::StatusOr<sched::SliceGroupRequest> SliceRequestFromProto(const rpc::SliceGroupSpec& spec);
// "STRICT_SPREAD, 4 bundles {CPU: 1}" / "TPU-V6E 4x4 x2, per host; fallback TPU-V5LITEPOD 4x4 x2"
std::string DescribeBundleRequest(const sched::BundleRequest& request);
std::string DescribeSliceRequest(const sched::SliceGroupRequest& request);

}  // namespace torus::head
