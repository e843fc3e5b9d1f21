// The cluster view as JSON, shared by the CLI (`--json`) and the head's HTTP API: resource amounts in units
// (CPUs, bytes, chips; not fixed point) and states by name.
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "nlohmann/json.hpp"
#include "torus/head.pb.h"

namespace torus::rpc {

std::string NodeStateName(NodeState s);    // "ALIVE", "DEAD", "DRAINING"
std::string SliceStateName(SliceState s);  // "READY", "INCOMPLETE", "RESERVED", "DEGRADED"

nlohmann::json ResourcesToJson(const google::protobuf::Map<std::string, int64_t>& resources);
nlohmann::json NodeToJson(const NodeView& node);
nlohmann::json SliceToJson(const SliceView& slice);
nlohmann::json StatusToJson(const ClusterStatus& status);
nlohmann::json PlacementGroupToJson(const PlacementGroupView& group);

}  // namespace torus::rpc
