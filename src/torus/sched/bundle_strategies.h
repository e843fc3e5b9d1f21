// The four placement-group strategies over one alternative, each a filter -> score -> pick over the bundles'
// candidate nodes (semantics in bundle_policy.h). Internal to the scheduling core.
//
// Thread-safety: not thread-safe; a BundleProblem is a single decision's scratch state.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "torus/common/label_selector.h"
#include "torus/common/resources.h"
#include "torus/sched/cluster_index.h"

namespace torus::sched {

inline constexpr int kUnplaced = -1;
inline constexpr int kFixedElsewhere = -2;  // a survivor on a node the index does not list (kept as given)

// Free capacity as a placement in progress sees it: each node's available amounts, or its totals when asking
// whether the group could ever fit ("idle"), less what this placement has taken so far.
class CapacityView {
 public:
  CapacityView(const ClusterIndex& index, bool idle) : index_(&index), idle_(idle) {}
  const ResourceSet& Free(int node) const;
  bool Fits(int node, const ResourceSet& demand) const { return Free(node).Contains(demand); }
  void Take(int node, const ResourceSet& demand);
  void Reset() { left_.clear(); }  // forgets every Take
  bool idle() const { return idle_; }

 private:
  const ClusterIndex* index_;
  bool idle_;
  std::map<int, ResourceSet> left_;  // nodes this placement took from: what is left
};

struct BundleProblem {
  BundleProblem(const ClusterIndex& index, const std::vector<ResourceSet>& bundles,
                const std::vector<LabelSelector>& selectors, bool idle);

  const ClusterIndex& index;
  const std::vector<ResourceSet>& bundles;
  const std::vector<LabelSelector>& selectors;  // empty, or one per bundle
  std::vector<int> node_of;                     // per bundle: node index, kUnplaced or kFixedElsewhere
  CapacityView capacity;

  const LabelSelector& SelectorOf(int bundle) const;
  bool Matches(int bundle, int node) const;
  std::vector<int> Unplaced() const;  // largest first (TPU, GPU, CPU, memory descending), then by index
  void Assign(int bundle, int node);  // records and takes the bundle's resources
  const char* When() const;           // " now", or ", even with every node idle"
};

// Each places every kUnplaced bundle and returns "", or returns why it cannot (a phrase for the reason line) and
// leaves node_of in an unspecified state.
std::string PlaceStrictPack(BundleProblem& p);
std::string PlacePack(BundleProblem& p);
std::string PlaceStrictSpread(BundleProblem& p);
std::string PlaceSpread(BundleProblem& p);

}  // namespace torus::sched
