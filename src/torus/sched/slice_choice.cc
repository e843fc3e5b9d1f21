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

SliceCandidates::SliceCandidates(const ClusterIndex& index, const ShapeEntry& shape, const LabelSelector& selector,
                                 bool free_only)
    : own_(free_only ? &shape.free : &shape.slices) {
  if (selector.empty()) {
    selector_holds_ = true;
    return;
  }
  const NodeCandidates nodes = index.CandidatesFor(selector, /*accelerator_hosts_only=*/true);
  if (nodes.nodes().size() >= own_->size()) return;
  // Count each slice's hosts among the candidates; keep the shape's order by walking its own list.
  const int shape_id = static_cast<int>(&shape - index.shapes().data());
  std::vector<int> hits(index.slices().size(), 0);
  for (int node : nodes.nodes()) {
    const int s = index.node_facts(node).slice;
    if (s >= 0 && index.slice_facts(s).shape == shape_id) ++hits[s];
  }
  narrowed_ = true;
  // With an exact candidate list, the selector holds on a slice iff every alive host is a candidate (the lists
  // hold alive nodes only; a degraded slice is still reported as of the selector).
  selector_holds_ = nodes.exact();
  for (int s : *own_) {
    const bool keep = nodes.exact() ? hits[s] > 0 && hits[s] == index.slices()[s].hosts_alive : hits[s] > 0;
    if (keep) storage_.push_back(s);
  }
}

bool IsEligible(const ClusterIndex& index, int slice, const ResourceSet& per_host) {
  const SliceFacts& facts = index.slice_facts(slice);
  return facts.free_position >= 0 && facts.min_available.Contains(per_host);
}

std::vector<int> ChooseFreeSlices(const ClusterIndex& index, const ShapeEntry& shape, int need,
                                  const LabelSelector& selector, const ResourceSet& per_host,
                                  const std::vector<int>& excluded) {
  std::vector<int> chosen;
  if (need <= 0) return chosen;
  const SliceCandidates candidates(index, shape, selector, /*free_only=*/true);
  for (int s : candidates.slices()) {
    if (Contains(excluded, s)) continue;
    if (!index.slice_facts(s).min_available.Contains(per_host)) continue;
    if (!candidates.selector_holds() && !SelectorHoldsOnSlice(index, s, selector)) continue;
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
