#include "torus/sched/slice_choice.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace torus::sched {
namespace {

bool IsChipBlockSize(int k) { return k == 1 || k == 2 || k == 4 || k == 8; }

ResourceSet Times(const ResourceSet& r, int n) {
  ResourceSet out;
  for (const auto& [name, amount] : r.amounts()) out.SetFixed(name, amount * n);
  return out;
}

bool Contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Free slices of `shape` reachable from the selector's candidate nodes, in preference order; used when the label
// index narrows the selector to fewer nodes than the shape has free slices.
std::vector<int> FreeSlicesAmong(const ClusterIndex& index, const ShapeEntry& shape, const NodeCandidates& nodes) {
  const int shape_id = static_cast<int>(&shape - index.shapes().data());
  std::vector<int> out;
  for (int node : nodes.nodes()) {
    int s = index.node_facts(node).slice;
    if (s < 0) continue;
    const SliceFacts& facts = index.slice_facts(s);
    if (facts.shape == shape_id && facts.free_position >= 0) out.push_back(s);
  }
  std::sort(out.begin(), out.end(), [&](int a, int b) {
    return index.slice_facts(a).free_position < index.slice_facts(b).free_position;
  });
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

std::optional<HostLayout> LayoutFor(BundleUnit unit, const std::optional<ResourceSet>& resources_per_bundle,
                                    int chips_per_host) {
  HostLayout layout;
  layout.chips_per_host = chips_per_host;
  layout.per_bundle = resources_per_bundle.value_or(ResourceSet());
  if (layout.per_bundle.GetFixed(kResourceCpu) == 0) layout.per_bundle.SetFixed(kResourceCpu, kResourceScale);
  const int64_t tpu = layout.per_bundle.GetFixed(kResourceTpu);
  if (tpu % kResourceScale != 0) return std::nullopt;
  const int chips = static_cast<int>(tpu / kResourceScale);
  if (unit == BundleUnit::kHost) {
    if (chips != 0 && chips != chips_per_host) return std::nullopt;
    layout.chips_per_bundle = chips_per_host;
  } else {
    layout.chips_per_bundle = chips == 0 ? 1 : chips;
    if (!IsChipBlockSize(layout.chips_per_bundle) || chips_per_host % layout.chips_per_bundle != 0) {
      return std::nullopt;
    }
  }
  layout.per_bundle.SetFixed(kResourceTpu, int64_t{layout.chips_per_bundle} * kResourceScale);
  layout.bundles_per_host = chips_per_host / layout.chips_per_bundle;
  layout.per_host = Times(layout.per_bundle, layout.bundles_per_host);
  return layout;
}

std::vector<int> AdmissibleChipsPerHost(const SliceShapeRequest& shape) {
  if (shape.chips_per_host.has_value()) return {*shape.chips_per_host};
  std::vector<int> out;
  for (int cph : ValidChipsPerHost(shape.generation)) {
    if (MakeSliceShape(shape.generation, shape.topology, cph).ok()) out.push_back(cph);
  }
  return out;
}

std::vector<int> ChooseFreeSlices(const ClusterIndex& index, const ShapeEntry& shape, int need,
                                  const LabelSelector& selector, const ResourceSet& per_host,
                                  const std::vector<int>& excluded) {
  std::vector<int> chosen;
  if (need <= 0) return chosen;
  std::vector<int> narrowed;
  const std::vector<int>* order = &shape.free;
  if (!selector.empty()) {
    NodeCandidates nodes = index.CandidatesFor(selector);
    if (nodes.nodes().size() < shape.free.size()) {
      narrowed = FreeSlicesAmong(index, shape, nodes);
      order = &narrowed;
    }
  }
  for (int s : *order) {
    if (Contains(excluded, s)) continue;
    if (!index.slice_facts(s).min_available.Contains(per_host)) continue;
    if (!SelectorHoldsOnSlice(index, s, selector)) continue;
    chosen.push_back(s);
    if (static_cast<int>(chosen.size()) == need) break;
  }
  return chosen;
}

std::string Ineligibility(const ClusterIndex& index, int slice, const ResourceSet& per_host) {
  const Slice& s = index.slices()[slice];
  const SliceFacts& facts = index.slice_facts(slice);
  if (s.state == SliceState::kReserved) return absl::StrCat(s.name, " RESERVED by ", facts.holder);
  if (s.state != SliceState::kReady) {
    return absl::StrCat(s.name, " ", std::string(SliceStateName(s.state)), ": ", s.reason);
  }
  for (size_t h = 0; h < s.hosts.size(); ++h) {
    const int node = facts.host_nodes[h];
    if (node < 0) continue;
    const std::vector<int>& busy = index.node_facts(node).busy_chips;
    if (!busy.empty()) {
      return absl::StrCat(s.name, " busy: chip", busy.size() == 1 ? " " : "s ", absl::StrJoin(busy, ","),
                          " in use on worker ", s.hosts[h].worker_id, " (node ", s.hosts[h].node_id, ")");
    }
  }
  for (size_t h = 0; h < s.hosts.size(); ++h) {
    const int node = facts.host_nodes[h];
    if (node < 0) continue;
    const ResourceSet& available = index.nodes()[node].available;
    if (!available.Contains(per_host)) {
      return absl::StrCat(s.name, " busy: worker ", s.hosts[h].worker_id, " (node ", s.hosts[h].node_id, ") has ",
                          available.ToJson(), " free of the ", per_host.ToJson(), " each host needs");
    }
  }
  return "";
}

std::vector<int> ResolveKeep(const ClusterIndex& index, const ShapeEntry& shape, const SliceShapeRequest& alt,
                             const std::vector<std::string>& keep_slices) {
  if (keep_slices.empty() || static_cast<int>(keep_slices.size()) > alt.num_slices) return {};
  const int shape_id = static_cast<int>(&shape - index.shapes().data());
  std::vector<int> kept;
  for (const std::string& name : keep_slices) {
    const int s = index.SliceIndex(name);
    if (s < 0 || index.slice_facts(s).shape != shape_id) return {};
    const SliceState state = index.slices()[s].state;
    if (state != SliceState::kReady && state != SliceState::kReserved) return {};
    if (!SelectorHoldsOnSlice(index, s, alt.selector)) return {};
    kept.push_back(s);
  }
  return kept;
}

}  // namespace torus::sched
