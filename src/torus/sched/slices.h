// The slice registry: TPU nodes grouped into slices by their `torus.io/tpu-slice-name` label, each checked for
// completeness and health (reference/semantics.md §6, tpu.md §8.6). Pure: derived from a node list on demand.
//
// A slice is
//   READY       complete (one alive host per worker id 0..n-1, all agreeing on type, topology, pod type and chips per
//               host) and not held by anything;
//   DEGRADED    a host it had is dead and no alive host has taken its worker id;
//   INCOMPLETE  a worker id was never seen, is claimed twice, is out of range, or the hosts disagree on the shape.
// The reason of a slice that is not READY is a sentence a user can act on, e.g.
//   "worker 2 dead (node 5f1c...)", "worker 3 missing", "hosts disagree on topology: 4x4 (workers 0,1), 2x4 (worker 2)".
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "torus/sched/cluster_snapshot.h"

namespace torus::sched {

enum class SliceState { kIncomplete, kReady, kReserved, kDegraded };
std::string_view SliceStateName(SliceState s);  // "INCOMPLETE", "READY", "RESERVED", "DEGRADED"

struct SliceHost {
  int worker_id = -1;
  std::string node_id;
  bool alive = false;
  std::string address;
  int chips = 0;
};

struct Slice {
  std::string name;
  std::string accelerator_type;  // "TPU-V6E"; empty when the hosts disagree or it is unknown
  std::string topology;          // "4x4"
  std::string pod_type;          // "v6e-16"
  int chips_per_host = 0;
  int expected_hosts = 0;        // 0 when the shape is unknown
  int hosts_alive = 0;
  std::vector<SliceHost> hosts;  // the host chosen for each worker id, ascending; plus unplaced ones at the end
  SliceState state = SliceState::kIncomplete;
  std::string reason;            // empty when READY
};

// Builds every slice present in `nodes` (alive and dead), ordered by slice name. Nodes without a slice-name label
// are ignored. For each worker id an alive host wins over dead ones, and among dead ones the first in `nodes`.
std::vector<Slice> BuildSlices(const std::vector<NodeSnapshot>& nodes);

}  // namespace torus::sched
