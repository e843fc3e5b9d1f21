// The cluster as the scheduler sees it: an immutable snapshot with the indices that make one decision a lookup
// rather than a scan (DESIGN.md §5): alive nodes by label key and value, slices by shape, per-node free capacity
// and busy chips, and for every shape its free slices already in the order slice groups prefer them.
//
// Preference order of nodes, by tier and then node id:
//   tier 0  hosts without accelerators (no TPU, no GPU);
//   tier 1  accelerator hosts that do not serve a free slice (no slice, or a slice that is held, degraded,
//           incomplete or has a busy chip);
//   tier 2  hosts of free slices (READY, no busy chip), kept for slice groups as long as something else fits.
// Every candidate list below is in this order, so a policy that scans candidates and stops at the first fit breaks
// ties by node id and keeps accelerator hosts for work that needs them (as Ray avoids GPU nodes for CPU-only work)
// and whole slices for slice groups. Work that asks for TPU or GPU skips tier 0 (it cannot fit there).
//
// Upkeep: an index is built once and then kept up to date change by change (UpdateHoldings, SetSliceHolder), each
// change costing what it touches — the node, its slice, that slice's shape and the posting lists of the nodes whose
// tier moved — not a rebuild. After any sequence of changes the index is exactly what Build makes of the input with
// those changes. Changes of the node set itself (a node joins, dies, is relabelled) need a Build.
//
// Thread-safety: copies share their data until one of them is changed (copy on write): a const index may be read
// from any thread; changing one must not race with copying it or reading it.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "torus/common/label_selector.h"
#include "torus/common/resources.h"
#include "torus/common/tpu_shape.h"
#include "torus/sched/cluster_snapshot.h"
#include "torus/sched/slices.h"

namespace torus::sched {

struct IndexInput {
  std::vector<NodeSnapshot> nodes;  // alive and dead; only alive ones are placement candidates
  // Slices held by a slice group: slice name -> holder (e.g. "pg 7f3c"). A held READY slice is RESERVED; a held
  // slice that is DEGRADED or INCOMPLETE keeps that state (it says more).
  std::map<std::string, std::string> slice_holders;
  // TPU chip indices already busy per node (held by bundles or workers), for per-chip placement.
  std::map<std::string, std::vector<int>> busy_chips;
};

// Facts about one node, derived once at Build.
struct NodeFacts {
  bool accelerator_host = false;  // its total has TPU or GPU
  int tier = 0;                   // 0, 1 or 2, see the preference order above
  int rank = -1;                  // sort key of the preference order of alive nodes (lower first); -1 when dead
  double utilisation = 0;         // max over its resources of (total - available) / total
  std::vector<int> busy_chips;    // ascending, no repeats
  int slice = -1;                 // index into slices() of the slice it is a host of, or -1
};

// Facts about one slice, derived once at Build.
struct SliceFacts {
  std::optional<TpuGeneration> generation;  // unset when the accelerator type is unknown
  std::string topology;                     // canonical ("4x4"); as labelled when it does not parse
  std::vector<int> host_nodes;              // index into nodes() for each entry of Slice::hosts
  int shape = -1;                           // index of its ShapeEntry, -1 when the shape is unknown
  bool chips_idle = true;                   // no host has a busy chip
  bool untouched = true;                    // every alive host's available equals its total
  ResourceSet min_available;                // per resource, the least any alive host has available
  std::string pool;                         // user-settable well-known labels of worker 0: "k=v,k=v"
  std::vector<std::string> varying_label_keys;  // label keys not carried with one value by every host
  std::string holder;                       // the slice group holding it; "" when not held
  int free_position = -1;                   // position in its shape's free list; -1 when not free
};

// The slices of one shape: accelerator generation, topology and chips per host.
struct ShapeEntry {
  TpuGeneration generation;
  std::string topology;  // canonical
  int chips_per_host = 0;
  std::vector<int> slices;  // every slice of the shape (any state), indices into slices(), by name
  // READY slices with no busy chip, in preference order: slices of larger pools first (a pool is the slices that
  // share market type, node group, zone and region, see SliceFacts::pool; taking from the largest keeps the rare
  // pools whole for requests that select them, and keeps a multislice choice within one pool), then slices some
  // of whose host resources are already in use (best fit: fully idle slices stay whole), then by name.
  std::vector<int> free;
};

// Alive nodes that may match a selector: a superset of the matching ones, in preference order. Borrowed from the
// index when one posting list serves; owned when several had to be merged. Valid while the index lives.
class NodeCandidates {
 public:
  NodeCandidates(std::span<const int> borrowed, bool exact) : borrowed_(borrowed), exact_(exact) {}
  NodeCandidates(std::vector<int> owned, bool exact) : owned_(std::move(owned)), owns_(true), exact_(exact) {}
  std::span<const int> nodes() const { return owns_ ? std::span<const int>(owned_) : borrowed_; }
  // True when every listed node is known to match: the selector is empty, or is one positive expression (a value,
  // in(...) or exists()) whose posting lists these are. Callers then skip Matches.
  bool exact() const { return exact_; }

 private:
  std::span<const int> borrowed_;
  std::vector<int> owned_;
  bool owns_ = false;
  bool exact_ = false;
};

class ClusterIndex {
 public:
  ClusterIndex();  // an empty cluster
  static ClusterIndex Build(IndexInput input);

  const std::vector<NodeSnapshot>& nodes() const { return *nodes_; }  // by node id; one per id (alive wins)
  const NodeSnapshot* FindNode(std::string_view node_id) const;
  int NodeIndex(std::string_view node_id) const;  // index into nodes(), -1 when absent
  const NodeFacts& node_facts(int node) const { return (*node_facts_)[node]; }
  const std::vector<int>& AliveNodes() const;  // in preference order

  const std::vector<Slice>& slices() const { return *slices_; }  // by name, RESERVED applied from slice_holders
  const SliceFacts& slice_facts(int slice) const { return (*slice_facts_)[slice]; }
  int SliceIndex(std::string_view name) const;  // index into slices(), -1 when absent

  // Alive nodes carrying label key=value / label key (any value), as indices into nodes(), in preference order.
  const std::vector<int>& NodesWithLabel(std::string_view key, std::string_view value) const;
  const std::vector<int>& NodesWithLabelKey(std::string_view key) const;
  // The smallest superset of the alive nodes `selector` matches that the label index yields (see NodeCandidates);
  // with `accelerator_hosts_only`, without tier 0.
  NodeCandidates CandidatesFor(const LabelSelector& selector, bool accelerator_hosts_only = false) const;

  // Slices of one shape (accelerator type as labelled or canonical, e.g. "TPU-V6E"; topology; chips per host),
  // by name; empty when the type or topology is unknown.
  std::vector<const Slice*> SlicesOfShape(std::string_view accelerator_type, std::string_view topology,
                                          int chips_per_host) const;
  const std::vector<ShapeEntry>& shapes() const;
  const ShapeEntry* FindShape(TpuGeneration generation, std::string_view topology, int chips_per_host) const;

  // ---- upkeep ----
  // Node `node_id` now has `available` resources and `busy_chips` TPU chips busy (any order, repeats allowed):
  // holds taken or given back. Its utilisation, its slice's usage and free-list place, and its tier follow.
  // False (and nothing changed) when the node is not in the index.
  bool UpdateHoldings(std::string_view node_id, const ResourceSet& available, std::vector<int> busy_chips);
  // Slice `name` is now held by `holder` ("" = by nothing): a READY slice becomes RESERVED ("held by <holder>")
  // and leaves the free lists, a RESERVED one given back is READY again; DEGRADED and INCOMPLETE keep their state.
  // False (and nothing changed) when there is no such slice.
  bool SetSliceHolder(std::string_view name, std::string holder);

 private:
  struct Impl;
  explicit ClusterIndex(std::shared_ptr<Impl> impl);
  Impl& Mutable();  // the data, copied first when another index shares it
  void Repoint();
  std::shared_ptr<Impl> impl_;
  // Into *impl_, so that the hot accessors inline.
  const std::vector<NodeSnapshot>* nodes_;
  const std::vector<NodeFacts>* node_facts_;
  const std::vector<Slice>* slices_;
  const std::vector<SliceFacts>* slice_facts_;
};

// The label key an index lookup uses: `ray.io/<well-known name>` read as `torus.io/<name>` (written to `scratch`),
// others returned unchanged.
std::string_view IndexLabelKey(std::string_view key, std::string& scratch);

// Whether `selector` holds on every host of slice `slice` (checks one host when the selector reads no label
// that differs between the hosts).
bool SelectorHoldsOnSlice(const ClusterIndex& index, int slice, const LabelSelector& selector);

}  // namespace torus::sched
