// One scheduling decision for one waiting group, against the head's own accounting of what every group holds (and
// what the agents report their task leases hold, which no group accounts for):
// the scheduling core chooses nodes (and slices and chip blocks), then each new bundle is given its devices —
// TPU chips (an aligned block when the core did not choose them) and GPU indices (the lowest free ones) — so that
// the agent's ledger, and every worker later started on the bundle, holds exactly these devices.
//
// A pass decides many groups one after another against one PassInput; each decision is counted as held in it, so
// that later decisions of the same pass never take the same resources or devices. The index the scheduling core
// reads is built once per pass and updated per decision (ClusterIndex upkeep), never rebuilt per decision.
//
// Pure: no clock, no RPC, no state store.
//
// Thread-safety: pure functions over value types.
#pragma once

#include <map>
#include <utility>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "torus/head/state/cluster_state.h"
#include "torus/head/state/liveness.h"
#include "torus/head/state/model.h"
#include "torus/sched/cluster_index.h"

namespace torus::head {

// The devices of one node as the head accounts for them.
struct NodeDevices {
  int host_chips = 0;
  int host_gpus = 0;
  std::set<int> busy_chips;
  std::set<int> busy_gpus;
};

struct PassInput {
  sched::IndexInput index;               // nodes (alive = may be placed on now), holders, busy chips
  std::map<NodeId, NodeDevices> devices;  // every node placed on must be here
  // The scheduling index of `index`: built at the pass's first decision, then kept up to date by each decision
  // (what it holds is applied to the index, not rebuilt). Code that changes `index` itself calls IndexChanged().
  std::optional<sched::ClusterIndex> built;

  const sched::ClusterIndex& Index();
  void IndexChanged() { built.reset(); }
};

// Gives `fresh` (a pass input just built from the state) the index of `kept` (an earlier pass's input, consumed),
// brought up to date change by change, when both hold the same nodes — ids, addresses, alive, labels and totals,
// in the same order — so that only what nodes have available, their busy chips and the slices' holders differ.
// Returns false, leaving `fresh` to build its own index, when they do not or `kept` has no index.
bool ReuseIndex(PassInput&& kept, PassInput& fresh);

// The pass input from the state. `placeable(node)` (a sched::NodeSnapshot: its id and labels) says whether a node
// that is alive in the state may be placed on now (a node restored from the journal may not, until it registers again). `leased`: what task leases hold per
// node, as their agents report it — not available, and their chips and GPUs busy. With `previous` (an earlier
// pass's input, consumed) the nodes' labels are taken from it rather than copied where their registration is the
// same, and its index is reused (ReuseIndex).
template <typename Placeable>
PassInput BuildPassInput(const ClusterState& state, Placeable placeable,
                         const std::map<NodeId, LeaseHoldings>& leased = {}, PassInput* previous = nullptr);

struct Decision {
  GroupId group;
  uint64_t changes = 0;                // the group's `changes` the decision was made on
  std::vector<HeldBundle> fresh;       // to reserve now: node, ledger group and index, devices, resources
  std::vector<HeldBundle> bundles;     // every bundle the group holds once `fresh` is reserved, in order
  std::vector<HeldBundle> moved;       // survivors the policy moved or dropped: released once `fresh` is reserved
  std::vector<std::string> slices;     // slices held afterwards (slice groups)
  int alternative = 0;
  std::string message;                 // "reserved slices v6e-0, v6e-1 (fallback 1)", "placed 2 bundles on a, b"
};

// Not now: the reason, in words a user can act on.
struct NotPlaced {
  std::string reason;
  bool infeasible = false;  // no alive node could hold it even were every node idle (it waits for nodes to join)
};

using DecideOutcome = std::variant<Decision, NotPlaced>;

// Decides `group` (PENDING or RESCHEDULING) against `input`. On a Decision its new bundles are counted as held in
// `input`. Bundles keep `attempt` 0 here; the scheduler numbers the reservation.
DecideOutcome Decide(const Group& group, PassInput& input);

// ---- template definition ----

template <typename Placeable>
PassInput BuildPassInput(const ClusterState& state, Placeable placeable,
                         const std::map<NodeId, LeaseHoldings>& leased, PassInput* previous) {
  PassInput input;
  std::vector<sched::NodeSnapshot> none;
  input.index.nodes = state.NodeSnapshots(/*include_dead=*/true, previous != nullptr ? previous->index.nodes : none);
  for (sched::NodeSnapshot& n : input.index.nodes) {
    if (n.alive && !placeable(std::as_const(n))) n.alive = false;
    if (auto it = leased.find(NodeId(n.node_id)); it != leased.end()) n.available.Subtract(it->second.resources);
  }
  input.index.slice_holders = state.SliceHolders();
  const std::map<NodeId, ClusterState::Held> held = state.HeldByNode();
  for (const auto& [id, node] : state.nodes()) {
    NodeDevices& d = input.devices[id];
    d.host_chips = static_cast<int>(node.info.total.GetFixed(kResourceTpu) / kResourceScale);
    d.host_gpus = static_cast<int>(node.info.total.GetFixed(kResourceGpu) / kResourceScale);
    if (auto it = held.find(id); it != held.end()) {
      d.busy_chips.insert(it->second.chips.begin(), it->second.chips.end());
      d.busy_gpus.insert(it->second.gpus.begin(), it->second.gpus.end());
    }
    if (auto it = leased.find(id); it != leased.end()) {
      for (int chip : it->second.chips) {
        if (chip < d.host_chips) d.busy_chips.insert(chip);
      }
      for (int gpu : it->second.gpus) {
        if (gpu < d.host_gpus) d.busy_gpus.insert(gpu);
      }
    }
    if (!d.busy_chips.empty()) input.index.busy_chips[id.str()] = {d.busy_chips.begin(), d.busy_chips.end()};
  }
  if (previous != nullptr) ReuseIndex(std::move(*previous), input);
  return input;
}

}  // namespace torus::head
