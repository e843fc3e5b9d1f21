// Rendering the cluster view for people (tables) and programs (JSON).
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "torus/head.pb.h"
#include "torus/rpc/status_json.h"

namespace torus::cli {

// `torus status`: summary line, resources used/total, slices, and dead nodes with reasons.
std::string FormatStatus(const rpc::ClusterStatus& status, const std::string& address);
// `torus nodes`: one row per node.
std::string FormatNodes(const rpc::ClusterStatus& status);

// One placement group: state, request, held slices and bundles, history.
std::string FormatPlacementGroup(const rpc::PlacementGroupView& group);
// One line per group.
std::string FormatPlacementGroups(const std::vector<rpc::PlacementGroupView>& groups);

// "1.5", "4", and memory as "16 GiB".
// The "Autoscaler" section of `torus status` from GET /api/v0/autoscaler: node types with their slice counts, the
// slices launched (class, phase, idle time), what waiting groups wait for, and the failures still in effect. "" when
// the autoscaler is off. `now_ms`: wall time, for ages.
std::string FormatAutoscaler(const nlohmann::json& autoscaler, int64_t now_ms);

std::string FormatAmount(const std::string& resource, int64_t fixed);

}  // namespace torus::cli
