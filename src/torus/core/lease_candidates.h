// Where work may be leased: the shape of a task or actor (resources, environment, label selector, strategy,
// placement group) and the pure choice of the agents to ask for it, in order.
// Thread-safety: pure.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace torus::core {

// A node that can lease workers.
struct LeaseNode {
  std::string node_id;
  std::string agent_address;               // host:port of its LeaseService
  std::map<std::string, int64_t> total;    // fixed point
  std::map<std::string, std::string> labels;
};

// {"CPU": 1, "TPU": 4}, from fixed-point amounts.
std::string FormatShape(const std::map<std::string, int64_t>& resources);
// Whether `total` holds every amount of `want`.
bool ShapeFits(const std::map<std::string, int64_t>& want, const std::map<std::string, int64_t>& total);

struct TaskShape {
  std::map<std::string, int64_t> resources;  // fixed point
  std::map<std::string, std::string> env;
  std::string working_dir;
  std::map<std::string, std::string> label_selector;  // key -> expression, as for placement groups
  // Ray's fallback_strategy: selectors tried in order when no node can ever hold the shape under label_selector
  // (resources and strategy stay the same).
  std::vector<std::map<std::string, std::string>> fallback_selectors;
  // Where to run: "" (the local node first, then the others), "SPREAD" (every matching node in turn), or
  // "NODE:<id>" (only that node) / "NODE_SOFT:<id>" (that node first).
  std::string strategy;
  // Inside a placement group (its id): in bundle `bundle_index`, or in any of its bundles (-1).
  std::string placement_group;
  int bundle_index = -1;
  std::string Key() const;
};

// Where a placement group's bundle is: its node, and its key in that agent's ledger (a slice group keeps each
// slice's bundles as its own ledger group "<id>/<slice>", indexed from 0 in the group's order).
struct BundleLocation {
  int index = 0;
  std::string node_id;
  std::string ledger_group;
  int ledger_index = 0;
};
const BundleLocation* FindBundle(const std::vector<BundleLocation>& bundles, int index);

// The agents a shape may be leased from, in the order to ask them (the local one first unless the strategy says
// otherwise), or why there is none: "no node can ever hold a task of {...}; nodes have ...", "no node matches the
// label selector ...". `what` names the work ("a task", "an actor").
// The nodes are those of the label selector when one of them can hold the shape (its totals), else those of the
// first fallback selector that has one, and so on; each selector is parsed once per call.
// With a placement group, `bundles` are where its bundles are, and each candidate is an agent and the bundle there
// to lease inside (`bundles[i]`; -1 for no bundle).
struct Candidates {
  std::vector<std::string> agents;
  std::vector<int> bundles;
  std::string unschedulable;
};
Candidates LeaseCandidates(const TaskShape& shape, const std::vector<LeaseNode>& nodes, const std::string& local_agent,
                           const std::string& what, const std::vector<BundleLocation>* bundles = nullptr);

}  // namespace torus::core
