#include "torus/sched/cluster_index.h"

#include <algorithm>
#include <span>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/well_known_labels.h"

namespace torus::sched {
namespace {

struct LabelPostings {
  std::vector<int> any;  // alive nodes with the key, preference order
  std::map<std::string, std::vector<int>, std::less<>> by_value;
};

using ShapeKey = std::tuple<TpuGeneration, std::string, int>;

// The labels that make up a slice's pool (ShapeEntry::free): where and how a slice is bought.
constexpr std::string_view kPoolLabels[] = {kLabelMarketType, kLabelNodeGroup, kLabelAvailabilityZone,
                                            kLabelAvailabilityRegion};

double Utilisation(const NodeSnapshot& n) {
  double worst = 0;
  for (const auto& [name, total] : n.total.amounts()) {
    int64_t used = std::max<int64_t>(0, total - n.available.GetFixed(name));
    worst = std::max(worst, static_cast<double>(used) / static_cast<double>(total));
  }
  return worst;
}

ResourceSet ElementwiseMin(const ResourceSet& a, const ResourceSet& b) {
  ResourceSet out;
  for (const auto& [name, amount] : a.amounts()) out.SetFixed(name, std::min(amount, b.GetFixed(name)));
  return out;
}

}  // namespace

struct ClusterIndex::Impl {
  std::vector<NodeSnapshot> nodes;
  std::vector<NodeFacts> node_facts;
  std::vector<int> alive;
  std::map<std::string, LabelPostings, std::less<>> labels;
  std::vector<Slice> slices;
  std::vector<SliceFacts> slice_facts;
  std::vector<ShapeEntry> shapes;
  std::map<ShapeKey, int> shape_ids;
  std::vector<int> empty;

  void IndexNodes(std::map<std::string, std::vector<int>>& busy_chips);
  void IndexSlices(const std::map<std::string, std::string>& holders);
  void RankAndPost();  // after IndexSlices: tiers need to know which slices are free
  std::span<const int> AcceleratorPart(const std::vector<int>& list) const;
  void FillSliceFacts(int s);
  void OrderFreeSlices(ShapeEntry& shape);
};

void ClusterIndex::Impl::IndexNodes(std::map<std::string, std::vector<int>>& busy_chips) {
  node_facts.resize(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeSnapshot& n = nodes[i];
    NodeFacts& f = node_facts[i];
    f.accelerator_host = n.total.GetFixed(kResourceTpu) > 0 || n.total.GetFixed(kResourceGpu) > 0;
    f.utilisation = Utilisation(n);
    auto busy = busy_chips.find(n.node_id);
    if (busy != busy_chips.end()) {
      f.busy_chips = std::move(busy->second);
      std::sort(f.busy_chips.begin(), f.busy_chips.end());
      f.busy_chips.erase(std::unique(f.busy_chips.begin(), f.busy_chips.end()), f.busy_chips.end());
    }
  }
}

void ClusterIndex::Impl::RankAndPost() {
  for (size_t i = 0; i < nodes.size(); ++i) {
    NodeFacts& f = node_facts[i];
    if (!f.accelerator_host) {
      f.tier = 0;
    } else {
      f.tier = f.slice >= 0 && slice_facts[f.slice].free_position >= 0 ? 2 : 1;
    }
    if (nodes[i].alive) alive.push_back(static_cast<int>(i));
  }
  // Nodes are sorted by id, so a stable sort by tier yields (tier, node id).
  std::stable_sort(alive.begin(), alive.end(), [&](int a, int b) { return node_facts[a].tier < node_facts[b].tier; });
  for (size_t r = 0; r < alive.size(); ++r) {
    int i = alive[r];
    node_facts[i].rank = static_cast<int>(r);
    for (const auto& [key, value] : nodes[i].labels) {
      LabelPostings& postings = labels[key];
      postings.any.push_back(i);
      postings.by_value[value].push_back(i);
    }
  }
}

void ClusterIndex::Impl::FillSliceFacts(int s) {
  const Slice& slice = slices[s];
  SliceFacts& f = slice_facts[s];
  if (auto gen = ParseAcceleratorType(slice.accelerator_type); gen.ok()) {
    f.generation = *gen;
    auto topology = ParseTopology(*gen, slice.topology);
    f.topology = topology.ok() ? topology->ToString() : slice.topology;
  } else {
    f.topology = slice.topology;
  }
  std::map<std::string, int, std::less<>> key_count;
  std::map<std::string, std::string, std::less<>> first_value;
  std::vector<std::string> varying;
  bool first_alive = true;
  for (const SliceHost& host : slice.hosts) {
    int node = -1;
    auto it = std::lower_bound(nodes.begin(), nodes.end(), host.node_id,
                               [](const NodeSnapshot& n, const std::string& id) { return n.node_id < id; });
    if (it != nodes.end() && it->node_id == host.node_id) node = static_cast<int>(it - nodes.begin());
    f.host_nodes.push_back(node);
    if (node < 0) continue;
    const NodeSnapshot& n = nodes[node];
    if (host.worker_id >= 0) node_facts[node].slice = s;
    if (!node_facts[node].busy_chips.empty()) f.chips_idle = false;
    for (const auto& [key, value] : n.labels) {
      ++key_count[key];
      auto [pos, inserted] = first_value.emplace(key, value);
      if (!inserted && pos->second != value) varying.push_back(key);
    }
    if (!n.alive) continue;
    if (!(n.available == n.total)) f.untouched = false;
    f.min_available = first_alive ? n.available : ElementwiseMin(f.min_available, n.available);
    first_alive = false;
  }
  for (const auto& [key, count] : key_count) {
    if (count != static_cast<int>(f.host_nodes.size())) varying.push_back(key);
  }
  std::sort(varying.begin(), varying.end());
  varying.erase(std::unique(varying.begin(), varying.end()), varying.end());
  f.varying_label_keys = std::move(varying);
  if (!f.host_nodes.empty() && f.host_nodes.front() >= 0) {
    std::vector<std::string> pool;
    const Labels& labels = nodes[f.host_nodes.front()].labels;
    for (std::string_view key : kPoolLabels) {
      auto it = labels.find(key);
      if (it != labels.end()) pool.push_back(absl::StrCat(std::string(key), "=", it->second));
    }
    f.pool = absl::StrJoin(pool, ",");
  }
}

void ClusterIndex::Impl::OrderFreeSlices(ShapeEntry& shape) {
  std::map<std::string, int, std::less<>> pool_size;
  for (int s : shape.slices) {
    if (slices[s].state == SliceState::kReady && slice_facts[s].chips_idle) {
      shape.free.push_back(s);
      ++pool_size[slice_facts[s].pool];
    }
  }
  // (larger pool, pool name, partly used before untouched, slice name); slices are already by name.
  std::stable_sort(shape.free.begin(), shape.free.end(), [&](int a, int b) {
    const SliceFacts& fa = slice_facts[a];
    const SliceFacts& fb = slice_facts[b];
    int pa = pool_size[fa.pool], pb = pool_size[fb.pool];
    if (pa != pb) return pa > pb;
    if (fa.pool != fb.pool) return fa.pool < fb.pool;
    return !fa.untouched && fb.untouched;
  });
  for (size_t i = 0; i < shape.free.size(); ++i) slice_facts[shape.free[i]].free_position = static_cast<int>(i);
}

void ClusterIndex::Impl::IndexSlices(const std::map<std::string, std::string>& holders) {
  slices = BuildSlices(nodes);
  slice_facts.resize(slices.size());
  for (size_t s = 0; s < slices.size(); ++s) {
    Slice& slice = slices[s];
    if (auto held = holders.find(slice.name); held != holders.end()) {
      slice_facts[s].holder = held->second;
      if (slice.state == SliceState::kReady) {
        slice.state = SliceState::kReserved;
        slice.reason = absl::StrCat("held by ", held->second);
      }
    }
    FillSliceFacts(static_cast<int>(s));
    const SliceFacts& f = slice_facts[s];
    if (!f.generation.has_value() || slice.chips_per_host <= 0) continue;
    ShapeKey key{*f.generation, f.topology, slice.chips_per_host};
    auto [it, inserted] = shape_ids.emplace(key, static_cast<int>(shapes.size()));
    if (inserted) shapes.push_back(ShapeEntry{*f.generation, f.topology, slice.chips_per_host, {}, {}});
    slice_facts[s].shape = it->second;
    shapes[it->second].slices.push_back(static_cast<int>(s));
  }
  for (ShapeEntry& shape : shapes) OrderFreeSlices(shape);
}

ClusterIndex::ClusterIndex() : ClusterIndex(std::make_shared<const Impl>()) {}

ClusterIndex::ClusterIndex(std::shared_ptr<const Impl> impl)
    : impl_(std::move(impl)),
      nodes_(&impl_->nodes),
      node_facts_(&impl_->node_facts),
      slices_(&impl_->slices),
      slice_facts_(&impl_->slice_facts) {}

ClusterIndex ClusterIndex::Build(IndexInput input) {
  auto impl = std::make_shared<Impl>();
  impl->nodes = std::move(input.nodes);
  // One entry per id whatever the input order: alive before dead, then the first given.
  std::stable_sort(impl->nodes.begin(), impl->nodes.end(), [](const NodeSnapshot& a, const NodeSnapshot& b) {
    if (a.node_id != b.node_id) return a.node_id < b.node_id;
    return a.alive && !b.alive;
  });
  impl->nodes.erase(std::unique(impl->nodes.begin(), impl->nodes.end(),
                                [](const NodeSnapshot& a, const NodeSnapshot& b) { return a.node_id == b.node_id; }),
                    impl->nodes.end());
  impl->IndexNodes(input.busy_chips);
  impl->IndexSlices(input.slice_holders);
  impl->RankAndPost();
  return ClusterIndex(std::move(impl));
}


int ClusterIndex::NodeIndex(std::string_view node_id) const {
  const auto& nodes = impl_->nodes;
  auto it = std::lower_bound(nodes.begin(), nodes.end(), node_id,
                             [](const NodeSnapshot& n, std::string_view id) { return n.node_id < id; });
  return it != nodes.end() && it->node_id == node_id ? static_cast<int>(it - nodes.begin()) : -1;
}

const NodeSnapshot* ClusterIndex::FindNode(std::string_view node_id) const {
  int i = NodeIndex(node_id);
  return i < 0 ? nullptr : &impl_->nodes[i];
}

const std::vector<int>& ClusterIndex::AliveNodes() const { return impl_->alive; }
const std::vector<ShapeEntry>& ClusterIndex::shapes() const { return impl_->shapes; }

int ClusterIndex::SliceIndex(std::string_view name) const {
  const auto& slices = impl_->slices;
  auto it = std::lower_bound(slices.begin(), slices.end(), name,
                             [](const Slice& s, std::string_view n) { return s.name < n; });
  return it != slices.end() && it->name == name ? static_cast<int>(it - slices.begin()) : -1;
}

const std::vector<int>& ClusterIndex::NodesWithLabel(std::string_view key, std::string_view value) const {
  auto k = impl_->labels.find(key);
  if (k == impl_->labels.end()) return impl_->empty;
  auto v = k->second.by_value.find(value);
  return v == k->second.by_value.end() ? impl_->empty : v->second;
}

const std::vector<int>& ClusterIndex::NodesWithLabelKey(std::string_view key) const {
  auto k = impl_->labels.find(key);
  return k == impl_->labels.end() ? impl_->empty : k->second.any;
}

std::span<const int> ClusterIndex::Impl::AcceleratorPart(const std::vector<int>& list) const {
  auto first = std::partition_point(list.begin(), list.end(), [&](int i) { return node_facts[i].tier == 0; });
  return std::span<const int>(list).subspan(static_cast<size_t>(first - list.begin()));
}

NodeCandidates ClusterIndex::CandidatesFor(const LabelSelector& selector, bool accelerator_hosts_only) const {
  auto part = [&](const std::vector<int>& list) {
    return accelerator_hosts_only ? impl_->AcceleratorPart(list) : std::span<const int>(list);
  };
  if (selector.empty()) return NodeCandidates(part(impl_->alive), /*exact=*/true);
  // The positive expression with the fewest nodes; its lists (several for in(...)) are the candidates.
  std::vector<std::span<const int>> best;
  size_t best_size = impl_->alive.size() + 1;
  size_t expression_count = 0;
  std::string scratch;
  for (const auto& [raw_key, expressions] : selector.expressions()) {
    std::string_view key = IndexLabelKey(raw_key, scratch);
    for (const LabelExpression& e : expressions) {
      ++expression_count;
      std::vector<std::span<const int>> lists;
      if (e.op == LabelExpression::Op::kEquals || e.op == LabelExpression::Op::kIn) {
        for (const std::string& value : e.values) lists.push_back(part(NodesWithLabel(key, value)));
      } else if (e.op == LabelExpression::Op::kExists) {
        lists.push_back(part(NodesWithLabelKey(key)));
      } else {
        continue;  // negative expressions do not narrow the candidates
      }
      size_t size = 0;
      for (const auto& list : lists) size += list.size();
      if (size == 0) return NodeCandidates(std::span<const int>(), /*exact=*/true);
      if (size < best_size) {
        best_size = size;
        best = std::move(lists);
      }
    }
  }
  if (best.empty()) return NodeCandidates(part(impl_->alive), /*exact=*/false);
  const bool exact = expression_count == 1;
  if (best.size() == 1) return NodeCandidates(best.front(), exact);
  std::vector<int> merged;
  merged.reserve(best_size);
  for (const auto& list : best) merged.insert(merged.end(), list.begin(), list.end());
  std::sort(merged.begin(), merged.end(),
            [this](int a, int b) { return impl_->node_facts[a].rank < impl_->node_facts[b].rank; });
  merged.erase(std::unique(merged.begin(), merged.end()), merged.end());
  return NodeCandidates(std::move(merged), exact);
}

std::vector<const Slice*> ClusterIndex::SlicesOfShape(std::string_view accelerator_type, std::string_view topology,
                                                      int chips_per_host) const {
  std::vector<const Slice*> out;
  auto gen = ParseAcceleratorType(accelerator_type);
  if (!gen.ok()) return out;
  auto topo = ParseTopology(*gen, topology);
  if (!topo.ok()) return out;
  const ShapeEntry* shape = FindShape(*gen, topo->ToString(), chips_per_host);
  if (shape == nullptr) return out;
  for (int s : shape->slices) out.push_back(&impl_->slices[s]);
  return out;
}

const ShapeEntry* ClusterIndex::FindShape(TpuGeneration generation, std::string_view topology,
                                          int chips_per_host) const {
  auto it = impl_->shape_ids.find(ShapeKey{generation, std::string(topology), chips_per_host});
  return it == impl_->shape_ids.end() ? nullptr : &impl_->shapes[it->second];
}

std::string_view IndexLabelKey(std::string_view key, std::string& scratch) {
  if (key.starts_with(kRayLabelPrefix)) {
    std::string_view name = key.substr(kRayLabelPrefix.size());
    if (std::find(kWellKnownLabelNames.begin(), kWellKnownLabelNames.end(), name) != kWellKnownLabelNames.end()) {
      scratch = absl::StrCat(std::string(kLabelPrefix), std::string(name));
      return scratch;
    }
  }
  return key;
}

bool SelectorHoldsOnSlice(const ClusterIndex& index, int slice, const LabelSelector& selector) {
  if (selector.empty()) return true;
  const SliceFacts& facts = index.slice_facts(slice);
  bool uniform = true;
  std::string scratch;
  for (const auto& [raw_key, expressions] : selector.expressions()) {
    std::string_view key = IndexLabelKey(raw_key, scratch);
    if (std::binary_search(facts.varying_label_keys.begin(), facts.varying_label_keys.end(), key)) {
      uniform = false;
      break;
    }
  }
  for (int node : facts.host_nodes) {
    if (node < 0) return false;
    if (!selector.Matches(index.nodes()[node].labels)) return false;
    if (uniform) return true;
  }
  return !facts.host_nodes.empty();
}

}  // namespace torus::sched
