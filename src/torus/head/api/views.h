// The head's state as the wire sees it: protos for gRPC (and, through rpc/status_json.h, the REST JSON of the cluster,
// nodes, slices and groups), JSON for jobs and runs. The only place, with the route and handler files, where domain
// values become proto or JSON.
//
// Thread-safety: pure functions; those taking a ClusterState are called under the store's lock.
#pragma once

#include <optional>

#include "nlohmann/json.hpp"
#include "torus/head.pb.h"
#include "torus/head/state/cluster_state.h"
#include "torus/head/state/liveness.h"
#include "torus/head/workloads/job_service.h"
#include "torus/head/workloads/run_service.h"

namespace torus::head {

// A node: its registration, state, availability (the head's accounting: total less what live bundles hold),
// and how long ago it was heard from (alive nodes; dead ones: since they died).
void ToNodeView(const Node& node, const ResourceSet& available, const Liveness& liveness, int64_t wall_ms,
                rpc::NodeView* view);
// One node by id; nullopt when unknown.
std::optional<rpc::NodeView> NodeViewOf(const ClusterState& state, const Liveness& liveness, const NodeId& node,
                                        int64_t wall_ms);
// Nodes (dead ones too when asked), slices (RESERVED where a group holds them), totals over alive nodes, and the
// groups still waiting with their reasons.
void BuildClusterStatus(const ClusterState& state, const Liveness& liveness, bool include_dead, int64_t wall_ms,
                        rpc::ClusterStatus* out);
// A group with its bundles' node addresses.
rpc::PlacementGroupView GroupView(const ClusterState& state, const Group& group);

// JobDetails as Ray's job clients read them.
nlohmann::json JobDetailsJson(const JobView& view);
// A run with its attempts, ranks, last metrics and committed checkpoints.
nlohmann::json RunJson(const RunView& view);

}  // namespace torus::head
