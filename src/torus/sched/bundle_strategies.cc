#include "torus/sched/bundle_strategies.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "torus/sched/policy_util.h"

namespace torus::sched {
namespace {

const LabelSelector& EmptySelector() {
  static const LabelSelector* const kEmpty = new LabelSelector();
  return *kEmpty;
}

// Score of a fitting node, lower is better: its tier (ClusterIndex preference order; a bundle that needs TPU or GPU
// fits only accelerator hosts, so tier 0 never hurts it), then the tightest fit, then preference order.
using FitScore = std::tuple<int, double, int>;
FitScore ScoreFit(const BundleProblem& p, int node, const ResourceSet& demand) {
  const NodeFacts& facts = p.index.node_facts(node);
  return {facts.tier, Headroom(p.index, node, p.capacity.Free(node), demand), facts.rank};
}

// The candidates of the most selective selector among `bundles` (all alive nodes when none narrows them).
NodeCandidates CandidatesForAll(const BundleProblem& p, const std::vector<int>& bundles, const ResourceSet& demand) {
  const bool accelerators = NeedsAccelerator(demand);
  NodeCandidates best(p.index.AliveNodes(), /*exact=*/false);
  for (int b : bundles) {
    NodeCandidates c = p.index.CandidatesFor(p.SelectorOf(b), accelerators);
    if (c.nodes().size() < best.nodes().size()) best = std::move(c);
  }
  return best;
}

ResourceSet SumOf(const BundleProblem& p, const std::vector<int>& bundles) {
  ResourceSet sum;
  for (int b : bundles) sum.Add(p.bundles[b]);
  return sum;
}

bool AnySelector(const BundleProblem& p, const std::vector<int>& bundles) {
  return std::any_of(bundles.begin(), bundles.end(), [&](int b) { return !p.SelectorOf(b).empty(); });
}

// The best node holding `demand` and matching every selector of `bundles`: among `preferred` first (scored without
// the tier: the group already uses them), else among all candidates. -1 when none.
int BestNodeForAll(const BundleProblem& p, const std::vector<int>& bundles, const ResourceSet& demand,
                   const std::vector<int>& preferred) {
  auto eligible = [&](int node) {
    if (!p.capacity.Fits(node, demand)) return false;
    return std::all_of(bundles.begin(), bundles.end(), [&](int b) { return p.Matches(b, node); });
  };
  int best = -1;
  FitScore best_score;
  for (int node : preferred) {
    if (!eligible(node)) continue;
    FitScore score = ScoreFit(p, node, demand);
    std::get<0>(score) = 0;
    if (best < 0 || score < best_score) std::tie(best, best_score) = std::tie(node, score);
  }
  if (best >= 0) return best;
  const NodeCandidates candidates = CandidatesForAll(p, bundles, demand);
  for (int node : candidates.nodes()) {
    // Candidates come tier by tier and the tier leads the score: a later tier cannot beat a fit already found.
    if (best >= 0 && p.index.node_facts(node).tier > std::get<0>(best_score)) break;
    if (!eligible(node)) continue;
    FitScore score = ScoreFit(p, node, demand);
    if (best < 0 || score < best_score) std::tie(best, best_score) = std::tie(node, score);
  }
  return best;
}

std::vector<int> UsedNodes(const BundleProblem& p) {
  std::vector<int> used;
  for (int node : p.node_of) {
    if (node >= 0) used.push_back(node);
  }
  std::sort(used.begin(), used.end(),
            [&](int a, int b) { return p.index.node_facts(a).rank < p.index.node_facts(b).rank; });
  used.erase(std::unique(used.begin(), used.end()), used.end());
  return used;
}

std::string NoRoom(const BundleProblem& p, int b) {
  return absl::StrCat("bundle ", b, " ", p.bundles[b].ToJson(), ": no alive node", SelectorPhrase(p.SelectorOf(b)),
                      " has room for it", p.When());
}

// Kuhn's augmenting paths: bundle order[i] may use adjacency[i]; match_of_node maps node -> position in order.
bool Augment(int i, const std::vector<std::vector<int>>& adjacency, std::map<int, int>& match_of_node,
             std::vector<char>& visited) {
  for (int node : adjacency[i]) {
    if (visited[node]) continue;
    visited[node] = 1;
    auto it = match_of_node.find(node);
    if (it == match_of_node.end() || Augment(it->second, adjacency, match_of_node, visited)) {
      match_of_node[node] = i;
      return true;
    }
  }
  return false;
}

}  // namespace

const ResourceSet& CapacityView::Free(int node) const {
  auto it = left_.find(node);
  if (it != left_.end()) return it->second;
  const NodeSnapshot& n = index_->nodes()[node];
  return idle_ ? n.total : n.available;
}

void CapacityView::Take(int node, const ResourceSet& demand) {
  auto it = left_.find(node);
  if (it == left_.end()) it = left_.emplace(node, Free(node)).first;
  it->second.Subtract(demand);
}

BundleProblem::BundleProblem(const ClusterIndex& index, const std::vector<ResourceSet>& bundles,
                             const std::vector<LabelSelector>& selectors, bool idle)
    : index(index), bundles(bundles), selectors(selectors), node_of(bundles.size(), kUnplaced),
      capacity(index, idle) {}

const LabelSelector& BundleProblem::SelectorOf(int bundle) const {
  return selectors.empty() ? EmptySelector() : selectors[bundle];
}

bool BundleProblem::Matches(int bundle, int node) const {
  const LabelSelector& selector = SelectorOf(bundle);
  return selector.empty() || selector.Matches(index.nodes()[node].labels);
}

std::vector<int> BundleProblem::Unplaced() const {
  std::vector<int> out;
  for (size_t b = 0; b < bundles.size(); ++b) {
    if (node_of[b] == kUnplaced) out.push_back(static_cast<int>(b));
  }
  auto size = [this](int b) {
    const ResourceSet& r = bundles[b];
    return std::make_tuple(r.GetFixed(kResourceTpu), r.GetFixed(kResourceGpu), r.GetFixed(kResourceCpu),
                           r.GetFixed(kResourceMemory));
  };
  std::stable_sort(out.begin(), out.end(), [&](int a, int b) { return size(a) > size(b); });
  return out;
}

void BundleProblem::Assign(int bundle, int node) {
  node_of[bundle] = node;
  capacity.Take(node, bundles[bundle]);
}

const char* BundleProblem::When() const { return capacity.idle() ? ", even with every node idle" : " now"; }

std::string PlaceStrictPack(BundleProblem& p) {
  const std::vector<int> survivors_nodes = UsedNodes(p);
  const bool survivors = std::any_of(p.node_of.begin(), p.node_of.end(), [](int n) { return n != kUnplaced; });
  if (survivors) {
    // The survivors' node, if they share one that holds the rest: they keep running.
    std::vector<int> rest = p.Unplaced();
    const bool one_known_node = survivors_nodes.size() == 1 &&
                                std::find(p.node_of.begin(), p.node_of.end(), kFixedElsewhere) == p.node_of.end();
    if (one_known_node && BestNodeForAll(p, rest, SumOf(p, rest), survivors_nodes) == survivors_nodes.front()) {
      for (int b : rest) p.Assign(b, survivors_nodes.front());
      return "";
    }
    // Else every bundle moves to one node.
    std::fill(p.node_of.begin(), p.node_of.end(), kUnplaced);
    p.capacity.Reset();
  }
  std::vector<int> all = p.Unplaced();
  const ResourceSet demand = SumOf(p, all);
  int node = BestNodeForAll(p, all, demand, {});
  if (node < 0) {
    return absl::StrCat("no alive node", AnySelector(p, all) ? " matching every bundle's selector" : "",
                        p.capacity.idle() ? " is large enough for " : " has ", demand.ToJson(),
                        p.capacity.idle() ? "" : " free now");
  }
  for (int b : all) p.Assign(b, node);
  return "";
}

std::string PlacePack(BundleProblem& p) {
  std::vector<int> unplaced = p.Unplaced();
  if (unplaced.empty()) return "";
  std::vector<int> used = UsedNodes(p);
  // One node for everything left, if one holds it.
  if (int node = BestNodeForAll(p, unplaced, SumOf(p, unplaced), used); node >= 0) {
    for (int b : unplaced) p.Assign(b, node);
    return "";
  }
  for (int b : unplaced) {
    int node = BestNodeForAll(p, {b}, p.bundles[b], used);
    if (node < 0) return NoRoom(p, b);
    p.Assign(b, node);
    if (std::find(used.begin(), used.end(), node) == used.end()) used.push_back(node);
  }
  return "";
}

std::string PlaceSpread(BundleProblem& p) {
  std::map<int, int> count;  // node -> the group's bundles on it
  for (int node : p.node_of) {
    if (node >= 0) ++count[node];
  }
  for (int b : p.Unplaced()) {
    const ResourceSet& demand = p.bundles[b];
    int pick = -1;
    const NodeCandidates candidates = p.index.CandidatesFor(p.SelectorOf(b), NeedsAccelerator(p.bundles[b]));
    for (int node : candidates.nodes()) {
      if (!count.contains(node) && p.Matches(b, node) && p.capacity.Fits(node, demand)) {
        pick = node;
        break;
      }
    }
    if (pick < 0) {  // every fitting node already has some: the one with the fewest
      std::tuple<int, int, int> best_score;
      for (const auto& [node, n] : count) {
        if (!p.Matches(b, node) || !p.capacity.Fits(node, demand)) continue;
        const NodeFacts& facts = p.index.node_facts(node);
        std::tuple<int, int, int> score{n, facts.tier, facts.rank};
        if (pick < 0 || score < best_score) std::tie(pick, best_score) = std::tie(node, score);
      }
    }
    if (pick < 0) return NoRoom(p, b);
    p.Assign(b, pick);
    ++count[pick];
  }
  return "";
}

std::string PlaceStrictSpread(BundleProblem& p) {
  const std::vector<int> order = p.Unplaced();
  std::vector<int> taken = UsedNodes(p);  // survivors' nodes are never reused
  const size_t fixed = p.bundles.size() - order.size();
  auto is_taken = [&](int node) { return std::find(taken.begin(), taken.end(), node) != taken.end(); };
  // Greedy: each bundle on the first fitting node no other bundle has.
  std::vector<int> greedy;
  for (int b : order) {
    int pick = -1;
    const NodeCandidates candidates = p.index.CandidatesFor(p.SelectorOf(b), NeedsAccelerator(p.bundles[b]));
    for (int node : candidates.nodes()) {
      if (!is_taken(node) && p.Matches(b, node) && p.capacity.Fits(node, p.bundles[b])) {
        pick = node;
        break;
      }
    }
    if (pick < 0) break;
    greedy.push_back(pick);
    taken.push_back(pick);
  }
  if (greedy.size() == order.size()) {
    for (size_t i = 0; i < order.size(); ++i) p.Assign(order[i], greedy[i]);
    return "";
  }
  // Exact: a node holds at most one bundle, so a maximum bipartite matching decides.
  const std::vector<int> survivors = UsedNodes(p);
  std::vector<std::vector<int>> adjacency(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const int b = order[i];
    const NodeCandidates candidates = p.index.CandidatesFor(p.SelectorOf(b), NeedsAccelerator(p.bundles[b]));
    for (int node : candidates.nodes()) {
      if (std::find(survivors.begin(), survivors.end(), node) != survivors.end()) continue;
      if (p.Matches(b, node) && p.capacity.Fits(node, p.bundles[b])) adjacency[i].push_back(node);
    }
  }
  std::map<int, int> match_of_node;
  std::vector<char> visited(p.index.nodes().size());
  size_t matched = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    std::fill(visited.begin(), visited.end(), 0);
    if (Augment(static_cast<int>(i), adjacency, match_of_node, visited)) ++matched;
  }
  if (matched < order.size()) {
    return absl::StrCat("at most ", matched + fixed, " of the ", p.bundles.size(), " bundles fit on distinct nodes",
                        p.When());
  }
  for (const auto& [node, i] : match_of_node) p.Assign(order[i], node);
  return "";
}

}  // namespace torus::sched
