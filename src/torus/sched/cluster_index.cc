#include "torus/sched/cluster_index.h"

#include <algorithm>
#include <optional>
#include <set>
#include <span>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/well_known_labels.h"

namespace torus::sched {
namespace {

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
  // A label key's posting lists, as indices into `lists`: alive nodes with the key (any value), with each value.
  struct LabelPostings {
    int any = -1;
    std::map<std::string, int, std::less<>> by_value;
  };
  std::vector<NodeSnapshot> nodes;
  std::vector<NodeFacts> node_facts;
  std::vector<int> alive;
  std::map<std::string, LabelPostings, std::less<>> labels;
  std::vector<std::vector<int>> lists;  // posting lists, each in preference order
  std::vector<std::vector<int>> node_lists;  // per alive node, the posting lists it is on
  std::vector<int> ranks;  // node_facts[i].rank, kept contiguous for the bisections of upkeep
  std::vector<Slice> slices;
  std::vector<SliceFacts> slice_facts;
  std::vector<ShapeEntry> shapes;
  std::map<ShapeKey, int> shape_ids;
  std::vector<int> empty;
  // Upkeep: the slice each node is listed as a host of (any worker id), -1 when none.
  std::vector<int> host_slice;
  // Per shape, its free slices by pool (index into pool_names), each ordered partly used before untouched, then by
  // name (slice indices are in name order); ShapeEntry::free is these pools concatenated, larger pools first.
  struct ShapePools {
    std::vector<std::string> pool_names;
    std::vector<std::vector<std::pair<bool, int>>> free;  // (untouched, slice), ascending
  };
  std::vector<ShapePools> shape_pools;
  std::vector<int> slice_pool;  // per slice, its pool within its shape (-1 without a shape)
  std::vector<std::optional<std::pair<bool, int>>> free_key;  // per slice, its key in shape_pools when free

  void IndexNodes(std::map<std::string, std::vector<int>>& busy_chips);
  void IndexSlices(const std::map<std::string, std::string>& holders);
  void RankAndPost();  // after IndexSlices: tiers need to know which slices are free
  std::span<const int> AcceleratorPart(const std::vector<int>& list) const;
  void FillSliceFacts(int s);
  void FillSliceUsage(int s);  // chips_idle, untouched, min_available from its hosts
  bool SliceIsFree(int s) const;
  // Puts slice `s` where its state and usage say in its shape's free pools and rewrites that shape's free list;
  // then moves the tier of its hosts if it entered or left the free list.
  void RefreshFree(int s);
  void FlattenFree(int shape);
  int TierOf(int node) const;
  void Retier(int node);  // moves an alive node whose tier changed to its new place in every ordered list
  bool LessByRank(int a, int b) const { return ranks[a] < ranks[b]; }
  int ListFor(int& id) {
    if (id < 0) {
      id = static_cast<int>(lists.size());
      lists.emplace_back();
    }
    return id;
  }
  void MoveInList(std::vector<int>& list, int node, int old_rank);
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

int ClusterIndex::Impl::TierOf(int node) const {
  const NodeFacts& f = node_facts[node];
  if (!f.accelerator_host) return 0;
  return f.slice >= 0 && slice_facts[f.slice].free_position >= 0 ? 2 : 1;
}

// The rank orders by (tier, node id); nodes are sorted by id, so tier * N + index does, and a node whose tier
// changes keeps every other node's rank.
void ClusterIndex::Impl::RankAndPost() {
  const int stride = static_cast<int>(nodes.size());
  ranks.assign(nodes.size(), -1);
  node_lists.assign(nodes.size(), {});
  for (size_t i = 0; i < nodes.size(); ++i) {
    NodeFacts& f = node_facts[i];
    f.tier = TierOf(static_cast<int>(i));
    if (!nodes[i].alive) continue;
    f.rank = ranks[i] = f.tier * stride + static_cast<int>(i);
    alive.push_back(static_cast<int>(i));
  }
  std::sort(alive.begin(), alive.end(), [&](int a, int b) { return LessByRank(a, b); });
  for (int i : alive) {
    for (const auto& [key, value] : nodes[i].labels) {
      LabelPostings& postings = labels[key];
      const int any = ListFor(postings.any);
      auto [v, inserted] = postings.by_value.emplace(value, -1);
      const int by_value = ListFor(v->second);
      lists[any].push_back(i);
      lists[by_value].push_back(i);
      node_lists[i].push_back(any);
      node_lists[i].push_back(by_value);
    }
  }
}

void ClusterIndex::Impl::MoveInList(std::vector<int>& list, int node, int old_rank) {
  // The node's own rank is already the new one: it is found by its old rank, which is what the list is sorted by.
  const int new_rank = ranks[node];
  auto rank_of = [&](int x) { return x == node ? old_rank : ranks[x]; };
  auto at = std::lower_bound(list.begin(), list.end(), old_rank, [&](int x, int rank) { return rank_of(x) < rank; });
  if (at == list.end() || *at != node) return;  // not listed (cannot happen for a consistent index)
  if (new_rank > old_rank) {
    auto to = std::lower_bound(at + 1, list.end(), new_rank, [&](int x, int rank) { return rank_of(x) < rank; });
    std::rotate(at, at + 1, to);  // the node moves to just before `to`
  } else {
    auto to = std::lower_bound(list.begin(), at, new_rank, [&](int x, int rank) { return rank_of(x) < rank; });
    std::rotate(to, at, at + 1);
  }
}

void ClusterIndex::Impl::Retier(int node) {
  NodeFacts& f = node_facts[node];
  const int tier = TierOf(node);
  if (tier == f.tier) return;
  f.tier = tier;
  if (!nodes[node].alive) return;
  const int old_rank = f.rank;
  f.rank = ranks[node] = tier * static_cast<int>(nodes.size()) + node;
  MoveInList(alive, node, old_rank);
  for (int list : node_lists[node]) MoveInList(lists[list], node, old_rank);
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
  for (const SliceHost& host : slice.hosts) {
    int node = -1;
    auto it = std::lower_bound(nodes.begin(), nodes.end(), host.node_id,
                               [](const NodeSnapshot& n, const std::string& id) { return n.node_id < id; });
    if (it != nodes.end() && it->node_id == host.node_id) node = static_cast<int>(it - nodes.begin());
    f.host_nodes.push_back(node);
    if (node < 0) continue;
    const NodeSnapshot& n = nodes[node];
    if (host.worker_id >= 0) node_facts[node].slice = s;
    host_slice[node] = s;
    for (const auto& [key, value] : n.labels) {
      ++key_count[key];
      auto [pos, inserted] = first_value.emplace(key, value);
      if (!inserted && pos->second != value) varying.push_back(key);
    }
  }
  FillSliceUsage(s);
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

void ClusterIndex::Impl::FillSliceUsage(int s) {
  SliceFacts& f = slice_facts[s];
  f.chips_idle = true;
  f.untouched = true;
  f.min_available = ResourceSet();
  bool first_alive = true;
  for (int node : f.host_nodes) {
    if (node < 0) continue;
    const NodeSnapshot& n = nodes[node];
    if (!node_facts[node].busy_chips.empty()) f.chips_idle = false;
    if (!n.alive) continue;
    if (!(n.available == n.total)) f.untouched = false;
    f.min_available = first_alive ? n.available : ElementwiseMin(f.min_available, n.available);
    first_alive = false;
  }
}

bool ClusterIndex::Impl::SliceIsFree(int s) const {
  return slice_facts[s].shape >= 0 && slices[s].state == SliceState::kReady && slice_facts[s].chips_idle;
}

void ClusterIndex::Impl::FlattenFree(int shape_id) {
  ShapeEntry& shape = shapes[shape_id];
  const ShapePools& pools = shape_pools[shape_id];
  // Larger pools first, then by pool name.
  std::vector<int> order(pools.pool_names.size());
  for (size_t p = 0; p < order.size(); ++p) order[p] = static_cast<int>(p);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (pools.free[a].size() != pools.free[b].size()) return pools.free[a].size() > pools.free[b].size();
    return pools.pool_names[a] < pools.pool_names[b];
  });
  shape.free.clear();
  for (int p : order) {
    for (const auto& [untouched, slice] : pools.free[p]) {
      slice_facts[slice].free_position = static_cast<int>(shape.free.size());
      shape.free.push_back(slice);
    }
  }
}

void ClusterIndex::Impl::RefreshFree(int s) {
  SliceFacts& f = slice_facts[s];
  if (f.shape < 0) return;
  std::optional<std::pair<bool, int>> key;
  if (SliceIsFree(s)) key = std::make_pair(f.untouched, s);
  if (key == free_key[s]) return;
  auto& pool = shape_pools[f.shape].free[slice_pool[s]];
  if (free_key[s]) pool.erase(std::lower_bound(pool.begin(), pool.end(), *free_key[s]));
  if (key) pool.insert(std::lower_bound(pool.begin(), pool.end(), *key), *key);
  const bool was_free = free_key[s].has_value();
  free_key[s] = key;
  if (!key) f.free_position = -1;
  FlattenFree(f.shape);
  if (was_free != key.has_value()) {
    for (int node : f.host_nodes) {
      if (node >= 0 && node_facts[node].slice == s) Retier(node);
    }
  }
}

void ClusterIndex::Impl::IndexSlices(const std::map<std::string, std::string>& holders) {
  slices = BuildSlices(nodes);
  slice_facts.resize(slices.size());
  host_slice.assign(nodes.size(), -1);
  slice_pool.assign(slices.size(), -1);
  free_key.assign(slices.size(), std::nullopt);
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
    if (inserted) {
      shapes.push_back(ShapeEntry{*f.generation, f.topology, slice.chips_per_host, {}, {}});
      shape_pools.emplace_back();
    }
    slice_facts[s].shape = it->second;
    shapes[it->second].slices.push_back(static_cast<int>(s));
    ShapePools& pools = shape_pools[it->second];
    auto pool = std::find(pools.pool_names.begin(), pools.pool_names.end(), f.pool);
    if (pool == pools.pool_names.end()) {
      pools.pool_names.push_back(f.pool);
      pools.free.emplace_back();
      pool = pools.pool_names.end() - 1;
    }
    slice_pool[s] = static_cast<int>(pool - pools.pool_names.begin());
    if (SliceIsFree(static_cast<int>(s))) {
      free_key[s] = std::make_pair(f.untouched, static_cast<int>(s));
      pools.free[slice_pool[s]].push_back(*free_key[s]);
    }
  }
  for (size_t shape = 0; shape < shapes.size(); ++shape) {
    for (auto& pool : shape_pools[shape].free) std::sort(pool.begin(), pool.end());
    FlattenFree(static_cast<int>(shape));
  }
}

ClusterIndex::ClusterIndex() : ClusterIndex(std::make_shared<Impl>()) {}

ClusterIndex::ClusterIndex(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) { Repoint(); }

void ClusterIndex::Repoint() {
  nodes_ = &impl_->nodes;
  node_facts_ = &impl_->node_facts;
  slices_ = &impl_->slices;
  slice_facts_ = &impl_->slice_facts;
}

ClusterIndex::Impl& ClusterIndex::Mutable() {
  if (impl_.use_count() > 1) {
    impl_ = std::make_shared<Impl>(*impl_);
    Repoint();
  }
  return *impl_;
}

bool ClusterIndex::UpdateHoldings(std::string_view node_id, const ResourceSet& available,
                                  std::vector<int> busy_chips) {
  const int node = NodeIndex(node_id);
  if (node < 0) return false;
  Impl& impl = Mutable();
  std::sort(busy_chips.begin(), busy_chips.end());
  busy_chips.erase(std::unique(busy_chips.begin(), busy_chips.end()), busy_chips.end());
  impl.nodes[node].available = available;
  NodeFacts& f = impl.node_facts[node];
  f.utilisation = Utilisation(impl.nodes[node]);
  f.busy_chips = std::move(busy_chips);
  if (const int s = impl.host_slice[node]; s >= 0) {
    impl.FillSliceUsage(s);
    impl.RefreshFree(s);
  }
  return true;
}

bool ClusterIndex::SetSliceHolder(std::string_view name, std::string holder) {
  const int s = SliceIndex(name);
  if (s < 0) return false;
  Impl& impl = Mutable();
  Slice& slice = impl.slices[s];
  if (!holder.empty() && slice.state == SliceState::kReady) {
    slice.state = SliceState::kReserved;
    slice.reason = absl::StrCat("held by ", holder);
  } else if (holder.empty() && slice.state == SliceState::kReserved) {
    slice.state = SliceState::kReady;
    slice.reason.clear();
  } else if (slice.state == SliceState::kReserved) {
    slice.reason = absl::StrCat("held by ", holder);
  }
  impl.slice_facts[s].holder = std::move(holder);
  impl.RefreshFree(s);
  return true;
}

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
  return v == k->second.by_value.end() ? impl_->empty : impl_->lists[v->second];
}

const std::vector<int>& ClusterIndex::NodesWithLabelKey(std::string_view key) const {
  auto k = impl_->labels.find(key);
  return k == impl_->labels.end() ? impl_->empty : impl_->lists[k->second.any];
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
            [this](int a, int b) { return impl_->ranks[a] < impl_->ranks[b]; });
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
