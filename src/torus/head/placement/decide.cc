#include "torus/head/placement/decide.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/device_env.h"

namespace torus::head {
namespace {

std::string Reason(const sched::Pending& p) { return p.reason; }
std::string Reason(const sched::Infeasible& i) { return absl::StrCat("infeasible for now: ", i.reason); }

// Counts `bundles` as held in `input`: resources off their node's availability, chips and GPUs busy.
void Hold(const std::vector<HeldBundle>& bundles, PassInput& input) {
  std::map<std::string, ResourceSet> held;
  for (const HeldBundle& b : bundles) {
    held[b.node.str()].Add(b.resources);
    NodeDevices& d = input.devices[b.node];
    d.busy_chips.insert(b.chips.begin(), b.chips.end());
    d.busy_gpus.insert(b.gpus.begin(), b.gpus.end());
    auto& chips = input.index.busy_chips[b.node.str()];
    chips.insert(chips.end(), b.chips.begin(), b.chips.end());
  }
  for (sched::NodeSnapshot& n : input.index.nodes) {
    if (auto it = held.find(n.node_id); it != held.end()) n.available.Subtract(it->second);
  }
}

// The reverse, for a slice group placed again: its own slices and bundles must not count against it.
sched::IndexInput WithoutHoldings(const Group& group, const sched::IndexInput& input) {
  sched::IndexInput out = input;
  std::map<std::string, ResourceSet> held;
  for (const HeldBundle& b : group.bundles) {
    if (b.lost) continue;
    held[b.node.str()].Add(b.resources);
    auto& chips = out.busy_chips[b.node.str()];
    for (int chip : b.chips) {
      auto it = std::find(chips.begin(), chips.end(), chip);
      if (it != chips.end()) chips.erase(it);
    }
  }
  for (sched::NodeSnapshot& n : out.nodes) {
    if (auto it = held.find(n.node_id); it != held.end()) n.available.Add(it->second);
  }
  for (const std::string& s : group.slices) out.slice_holders.erase(s);
  return out;
}

// Gives each fresh bundle its devices: TPU chips (an aligned block) when it asks for TPU and the core chose none,
// GPU indices (the lowest free) when it asks for GPUs. A reason when a node cannot give them.
std::optional<std::string> AssignDevices(std::vector<HeldBundle>& fresh, const PassInput& input) {
  std::map<NodeId, NodeDevices> devices;  // what this decision takes, on top of the input's
  for (HeldBundle& b : fresh) {
    auto known = input.devices.find(b.node);
    if (known == input.devices.end()) return absl::StrCat("node ", b.node.str(), " is not known");
    NodeDevices& d = devices.try_emplace(b.node, known->second).first->second;
    const int64_t tpu = b.resources.GetFixed(kResourceTpu) / kResourceScale;
    if (tpu > 0 && b.chips.empty()) {
      std::vector<bool> busy(static_cast<size_t>(d.host_chips), false);
      for (int chip : d.busy_chips) {
        if (chip >= 0 && chip < d.host_chips) busy[static_cast<size_t>(chip)] = true;
      }
      auto block = AllocateChipBlock(busy, static_cast<int>(tpu));
      if (block.ok()) {
        b.chips = *block;
      } else {
        // Bundles may hold any whole number of chips; a count no worker could be isolated on gets the lowest free.
        for (int chip = 0; chip < d.host_chips && static_cast<int64_t>(b.chips.size()) < tpu; ++chip) {
          if (!busy[static_cast<size_t>(chip)]) b.chips.push_back(chip);
        }
        if (static_cast<int64_t>(b.chips.size()) < tpu) {
          return absl::StrCat("node ", b.node.str(), " has no ", tpu, " free TPU chips (", d.busy_chips.size(),
                              " of ", d.host_chips, " are held)");
        }
      }
    }
    d.busy_chips.insert(b.chips.begin(), b.chips.end());
    const int64_t gpu = b.resources.GetFixed(kResourceGpu) / kResourceScale;
    for (int index = 0; static_cast<int64_t>(b.gpus.size()) < gpu && index < d.host_gpus; ++index) {
      if (!d.busy_gpus.contains(index)) b.gpus.push_back(index);
    }
    if (static_cast<int64_t>(b.gpus.size()) < gpu) {
      return absl::StrCat("node ", b.node.str(), " has no ", gpu, " free GPUs (", d.busy_gpus.size(), " of ",
                          d.host_gpus, " are held)");
    }
    d.busy_gpus.insert(b.gpus.begin(), b.gpus.end());
  }
  return std::nullopt;
}

DecideOutcome DecideBundles(const Group& g, PassInput& input) {
  sched::BundleRequest request = g.bundle_request;
  const bool rescheduling = !g.bundles.empty();
  if (rescheduling) {
    // The surviving bundles fix the alternative; only the lost ones are placed.
    request.primary = g.alternative == 0 ? g.bundle_request.primary : g.bundle_request.fallbacks[g.alternative - 1];
    request.fallbacks.clear();
    for (const HeldBundle& b : g.bundles) {
      if (!b.lost) request.fixed[b.index] = b.node.str();
    }
  }
  const sched::ClusterIndex index = sched::ClusterIndex::Build(input.index);
  sched::BundleOutcome outcome = sched::PlaceBundles(index, request);
  if (auto* pending = std::get_if<sched::Pending>(&outcome)) return NotPlaced{Reason(*pending)};
  if (auto* infeasible = std::get_if<sched::Infeasible>(&outcome)) return NotPlaced{Reason(*infeasible)};
  const auto& placed = std::get<sched::BundlePlacement>(outcome);

  Decision d;
  d.group = g.id;
  d.changes = g.changes;
  d.alternative = rescheduling ? g.alternative : placed.alternative;
  const sched::BundleAlternative& chosen =
      d.alternative == 0 ? g.bundle_request.primary : g.bundle_request.fallbacks[d.alternative - 1];
  std::map<int, const HeldBundle*> survivors;
  for (const HeldBundle& b : g.bundles) {
    if (!b.lost) survivors[b.index] = &b;
  }
  for (size_t i = 0; i < placed.node_ids.size(); ++i) {
    const int index = static_cast<int>(i);
    // A survivor stays unless the policy moved it (STRICT_PACK moves all when its node cannot take the rest).
    if (auto s = survivors.find(index); s != survivors.end()) {
      if (s->second->node.str() == placed.node_ids[i]) continue;
      d.moved.push_back(*s->second);
    }
    HeldBundle b;
    b.index = index;
    b.ledger_index = index;
    b.node = NodeId(placed.node_ids[i]);
    b.resources = chosen.bundles[i];
    b.ledger_group = g.id.str();
    d.fresh.push_back(std::move(b));
  }
  if (auto problem = AssignDevices(d.fresh, input)) return NotPlaced{*problem};
  std::map<int, HeldBundle> all;
  for (const auto& [index, b] : survivors) all[index] = *b;
  for (const HeldBundle& b : d.fresh) all[b.index] = b;
  for (auto& [index, b] : all) d.bundles.push_back(std::move(b));
  std::set<std::string> nodes;
  for (const HeldBundle& b : d.fresh) nodes.insert(b.node.str());
  d.message = absl::StrCat("placed ", d.fresh.size(), " bundle", d.fresh.size() == 1 ? "" : "s", " on ",
                           absl::StrJoin(nodes, ", "),
                           d.alternative > 0 ? absl::StrCat(" (fallback ", d.alternative, ")") : "");
  return d;
}

DecideOutcome DecideSlices(const Group& g, PassInput& input) {
  sched::SliceGroupRequest request = g.slice_request;
  const bool rescheduling = !g.slices.empty();
  if (rescheduling) {
    // Healthy slices are kept; the replacement must be of their shape.
    if (g.alternative > 0) request.primary = g.slice_request.fallbacks[g.alternative - 1];
    request.fallbacks.clear();
    request.keep_slices = g.slices;
  }
  const sched::ClusterIndex index =
      sched::ClusterIndex::Build(rescheduling ? WithoutHoldings(g, input.index) : input.index);
  sched::SliceGroupOutcome outcome = sched::PlaceSliceGroup(index, request);
  if (auto* pending = std::get_if<sched::Pending>(&outcome)) return NotPlaced{Reason(*pending)};
  if (auto* infeasible = std::get_if<sched::Infeasible>(&outcome)) return NotPlaced{Reason(*infeasible)};
  const auto& placed = std::get<sched::SliceGroupPlacement>(outcome);

  Decision d;
  d.group = g.id;
  d.changes = g.changes;
  d.alternative = rescheduling ? g.alternative : placed.alternative;
  d.slices = placed.slice_names;
  const std::set<std::string> kept(g.slices.begin(), g.slices.end());
  std::map<std::string, int> next_index;  // per slice ledger group
  for (const sched::SliceBundle& sb : placed.bundles) {
    if (kept.contains(sb.slice_name)) continue;
    HeldBundle b;
    b.ledger_index = next_index[sb.slice_name]++;
    b.node = NodeId(sb.node_id);
    b.slice_name = sb.slice_name;
    b.worker_id = sb.worker_id;
    b.chips = sb.chips;
    b.resources = sb.resources;
    b.ledger_group = absl::StrCat(g.id.str(), "/", sb.slice_name);
    d.fresh.push_back(std::move(b));
  }
  if (auto problem = AssignDevices(d.fresh, input)) return NotPlaced{*problem};
  // A kept slice the core did not keep (its hosts no longer match): given back once the new ones are reserved.
  const std::set<std::string> chosen(d.slices.begin(), d.slices.end());
  for (const HeldBundle& b : g.bundles) {
    if (!chosen.contains(b.slice_name)) d.moved.push_back(b);
  }
  // Slice-major in the chosen order, then worker id and chip block as placed.
  std::vector<HeldBundle> all = g.bundles;
  all.insert(all.end(), d.fresh.begin(), d.fresh.end());
  for (const std::string& s : d.slices) {
    for (const HeldBundle& b : all) {
      if (b.slice_name != s) continue;
      d.bundles.push_back(b);
      d.bundles.back().index = static_cast<int>(d.bundles.size()) - 1;
    }
  }
  d.message = absl::StrCat("reserved slice", d.slices.size() == 1 ? " " : "s ", absl::StrJoin(d.slices, ", "),
                           d.alternative > 0 ? absl::StrCat(" (fallback ", d.alternative, ")") : "");
  return d;
}

}  // namespace

DecideOutcome Decide(const Group& group, PassInput& input) {
  DecideOutcome outcome = group.kind == PgKind::kBundles ? DecideBundles(group, input) : DecideSlices(group, input);
  if (auto* d = std::get_if<Decision>(&outcome)) {
    Hold(d->fresh, input);
    for (const std::string& s : d->slices) input.index.slice_holders[s] = group.id.str();
  }
  return outcome;
}

}  // namespace torus::head
