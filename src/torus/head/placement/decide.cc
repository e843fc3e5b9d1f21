#include "torus/head/placement/decide.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/device_env.h"

namespace torus::head {
namespace {

std::string Reason(const sched::Pending& p) { return p.reason; }
std::string Reason(const sched::Infeasible& i) { return absl::StrCat("infeasible for now: ", i.reason); }

// The input's snapshot of `node`: found by bisection (BuildPassInput lists nodes by id), else by a scan (the
// autoscaler appends planned hosts). Null when absent.
sched::NodeSnapshot* InputNode(PassInput& input, const std::string& node) {
  auto& nodes = input.index.nodes;
  auto it = std::lower_bound(nodes.begin(), nodes.end(), node,
                             [](const sched::NodeSnapshot& n, const std::string& id) { return n.node_id < id; });
  if (it != nodes.end() && it->node_id == node) return &*it;
  for (sched::NodeSnapshot& n : nodes) {
    if (n.node_id == node) return &n;
  }
  return nullptr;
}

// Adds `delta` (+1: held, -1: given back) of `bundles` to `input`: resources off (or back onto) their node's
// availability, chips and GPUs busy (or free), in the input and in its built index alike.
void Account(const std::vector<HeldBundle>& bundles, int delta, PassInput& input) {
  std::map<std::string, ResourceSet> held;
  for (const HeldBundle& b : bundles) {
    held[b.node.str()].Add(b.resources);
    NodeDevices& d = input.devices[b.node];
    auto& chips = input.index.busy_chips[b.node.str()];
    if (delta > 0) {
      d.busy_chips.insert(b.chips.begin(), b.chips.end());
      d.busy_gpus.insert(b.gpus.begin(), b.gpus.end());
      chips.insert(chips.end(), b.chips.begin(), b.chips.end());
    } else {
      for (int chip : b.chips) {
        d.busy_chips.erase(chip);
        if (auto it = std::find(chips.begin(), chips.end(), chip); it != chips.end()) chips.erase(it);
      }
      for (int gpu : b.gpus) d.busy_gpus.erase(gpu);
    }
  }
  for (const auto& [node, resources] : held) {
    sched::NodeSnapshot* n = InputNode(input, node);
    if (n == nullptr) continue;
    if (delta > 0) {
      n->available.Subtract(resources);
    } else {
      n->available.Add(resources);
    }
    if (input.built) input.built->UpdateHoldings(node, n->available, input.index.busy_chips[node]);
  }
}

void SetHolder(const std::string& slice, const std::string& holder, PassInput& input) {
  if (holder.empty()) {
    input.index.slice_holders.erase(slice);
  } else {
    input.index.slice_holders[slice] = holder;
  }
  if (input.built) input.built->SetSliceHolder(slice, holder);
}

// While it lives, a slice group placed again does not count against itself: its own bundles and slices are given
// back in the pass input, and taken again when it ends.
class WithoutHoldings {
 public:
  WithoutHoldings(const Group& group, PassInput& input) : input_(input) {
    for (const HeldBundle& b : group.bundles) {
      if (!b.lost) bundles_.push_back(b);
    }
    Account(bundles_, -1, input_);
    for (const std::string& s : group.slices) {
      auto it = input_.index.slice_holders.find(s);
      if (it == input_.index.slice_holders.end()) continue;
      holders_[s] = it->second;
      SetHolder(s, "", input_);
    }
  }
  ~WithoutHoldings() {
    Account(bundles_, +1, input_);
    for (const auto& [slice, holder] : holders_) SetHolder(slice, holder, input_);
  }
  WithoutHoldings(const WithoutHoldings&) = delete;
  WithoutHoldings& operator=(const WithoutHoldings&) = delete;

 private:
  PassInput& input_;
  std::vector<HeldBundle> bundles_;
  std::map<std::string, std::string> holders_;
};

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
  sched::BundleOutcome outcome = sched::PlaceBundles(input.Index(), request);
  if (auto* pending = std::get_if<sched::Pending>(&outcome)) return NotPlaced{Reason(*pending)};
  if (auto* infeasible = std::get_if<sched::Infeasible>(&outcome)) {
    return NotPlaced{.reason = Reason(*infeasible), .infeasible = true};
  }
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
  sched::SliceGroupOutcome outcome;
  {
    std::optional<WithoutHoldings> own;
    if (rescheduling) own.emplace(g, input);
    outcome = sched::PlaceSliceGroup(input.Index(), request);
  }
  if (auto* pending = std::get_if<sched::Pending>(&outcome)) return NotPlaced{Reason(*pending)};
  if (auto* infeasible = std::get_if<sched::Infeasible>(&outcome)) {
    return NotPlaced{.reason = Reason(*infeasible), .infeasible = true};
  }
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

bool ReuseIndex(PassInput&& kept, PassInput& fresh) {
  if (!kept.built) return false;
  const std::vector<sched::NodeSnapshot>& was = kept.index.nodes;
  const std::vector<sched::NodeSnapshot>& now = fresh.index.nodes;
  if (was.size() != now.size()) return false;
  for (size_t i = 0; i < now.size(); ++i) {
    const sched::NodeSnapshot& a = was[i];
    const sched::NodeSnapshot& b = now[i];
    if (a.node_id != b.node_id || a.alive != b.alive) return false;
    if (a.generation != 0 && a.generation == b.generation) continue;  // one registration: same labels and total
    if (a.address != b.address || !(a.total == b.total) || a.labels != b.labels) return false;
  }
  sched::ClusterIndex index = std::move(*kept.built);
  kept.built.reset();
  auto busy = [](const sched::IndexInput& in, const std::string& node) {
    std::set<int> chips;
    if (auto it = in.busy_chips.find(node); it != in.busy_chips.end()) chips.insert(it->second.begin(), it->second.end());
    return chips;
  };
  for (size_t i = 0; i < now.size(); ++i) {
    const std::string& node = now[i].node_id;
    std::set<int> chips = busy(fresh.index, node);
    if (was[i].available == now[i].available && chips == busy(kept.index, node)) continue;
    index.UpdateHoldings(node, now[i].available, {chips.begin(), chips.end()});
  }
  for (const auto& [slice, holder] : kept.index.slice_holders) {
    if (!fresh.index.slice_holders.contains(slice)) index.SetSliceHolder(slice, "");
  }
  for (const auto& [slice, holder] : fresh.index.slice_holders) {
    auto it = kept.index.slice_holders.find(slice);
    if (it == kept.index.slice_holders.end() || it->second != holder) index.SetSliceHolder(slice, holder);
  }
  fresh.built = std::move(index);
  return true;
}

const sched::ClusterIndex& PassInput::Index() {
  if (!built) built = sched::ClusterIndex::Build(index);
  return *built;
}

DecideOutcome Decide(const Group& group, PassInput& input) {
  DecideOutcome outcome = group.kind == PgKind::kBundles ? DecideBundles(group, input) : DecideSlices(group, input);
  if (auto* d = std::get_if<Decision>(&outcome)) {
    Account(d->fresh, +1, input);
    for (const std::string& s : d->slices) SetHolder(s, group.id.str(), input);
  }
  return outcome;
}

}  // namespace torus::head
