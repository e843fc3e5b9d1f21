// Builders shared by the scheduling core's tests: nodes, TPU slices, selectors and resource sets in one line each.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "torus/common/label_selector.h"
#include "torus/common/resources.h"
#include "torus/common/well_known_labels.h"
#include "torus/sched/cluster_index.h"

namespace torus::sched::testing {

inline ResourceSet Res(std::initializer_list<std::pair<std::string, double>> amounts) {
  ResourceSet r;
  for (const auto& [name, amount] : amounts) r.Set(name, amount);
  return r;
}

inline LabelSelector Sel(const std::map<std::string, std::string>& selector) {
  auto parsed = LabelSelector::Parse(selector);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : LabelSelector();
}

// An alive CPU-only node with `cpus` CPUs of which `used` are taken.
inline NodeSnapshot CpuNode(std::string id, double cpus, Labels labels = {}, double used = 0) {
  NodeSnapshot n;
  n.node_id = std::move(id);
  n.address = "10.0.0.1";
  n.alive = true;
  n.labels = std::move(labels);
  n.labels[std::string(kLabelNodeId)] = n.node_id;
  n.total = Res({{"CPU", cpus}, {"memory", 1 << 30}});
  n.available = Res({{"CPU", cpus - used}, {"memory", 1 << 30}});
  return n;
}

struct SliceSpec {
  std::string type = "TPU-V6E";
  std::string topology = "4x4";
  std::string pod_type = "v6e-16";
  int hosts = 4;
  int chips_per_host = 4;
  double cpus = 8;
  Labels labels = {};  // added to every host
};

// The hosts of one healthy, idle slice: node ids "<name>-w<worker>".
inline std::vector<NodeSnapshot> TpuSlice(const std::string& name, const SliceSpec& spec = {}) {
  std::vector<NodeSnapshot> hosts;
  for (int w = 0; w < spec.hosts; ++w) {
    NodeSnapshot n;
    n.node_id = name + "-w" + std::to_string(w);
    n.address = "10.1.0." + std::to_string(w);
    n.alive = true;
    n.labels = spec.labels;
    n.labels[std::string(kLabelNodeId)] = n.node_id;
    n.labels[std::string(kLabelAcceleratorType)] = spec.type;
    n.labels[std::string(kLabelTpuSliceName)] = name;
    n.labels[std::string(kLabelTpuWorkerId)] = std::to_string(w);
    n.labels[std::string(kLabelTpuTopology)] = spec.topology;
    n.labels[std::string(kLabelTpuPodType)] = spec.pod_type;
    n.labels[std::string(kLabelTpuChipsPerHost)] = std::to_string(spec.chips_per_host);
    n.total = Res({{"CPU", spec.cpus}, {"TPU", static_cast<double>(spec.chips_per_host)}});
    n.available = n.total;
    hosts.push_back(std::move(n));
  }
  return hosts;
}

inline void Append(std::vector<NodeSnapshot>& to, const std::vector<NodeSnapshot>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

inline NodeSnapshot* Find(std::vector<NodeSnapshot>& nodes, const std::string& id) {
  for (NodeSnapshot& n : nodes) {
    if (n.node_id == id) return &n;
  }
  ADD_FAILURE() << "no node " << id;
  std::abort();
}

inline ClusterIndex Index(std::vector<NodeSnapshot> nodes, std::map<std::string, std::string> holders = {},
                          std::map<std::string, std::vector<int>> busy_chips = {}) {
  return ClusterIndex::Build(IndexInput{std::move(nodes), std::move(holders), std::move(busy_chips)});
}

// The same nodes in a different, fixed-seed order.
inline std::vector<NodeSnapshot> Shuffled(std::vector<NodeSnapshot> nodes, unsigned seed) {
  std::mt19937 rng(seed);
  std::shuffle(nodes.begin(), nodes.end(), rng);
  return nodes;
}

inline void ListNodes(std::ostringstream& out, const ClusterIndex& index, std::span<const int> nodes) {
  for (int n : nodes) out << " " << index.nodes()[n].node_id;
  out << "\n";
}

// Everything a policy can read from an index, in text: two indices that describe alike decide alike.
inline std::string DescribeIndex(const ClusterIndex& index) {
  std::ostringstream out;
  for (size_t i = 0; i < index.nodes().size(); ++i) {
    const NodeSnapshot& n = index.nodes()[i];
    const NodeFacts& f = index.node_facts(static_cast<int>(i));
    out << n.node_id << " alive=" << n.alive << " available=" << n.available.ToJson() << " tier=" << f.tier
        << " rank=" << f.rank << " utilisation=" << f.utilisation << " slice=" << f.slice << " busy=";
    for (int c : f.busy_chips) out << c << ",";
    out << "\n  labels:";
    for (const auto& [key, value] : n.labels) {
      out << "\n   " << key << "=" << value << ":";
      ListNodes(out, index, index.NodesWithLabel(key, value));
      out << "   " << key << ":";
      ListNodes(out, index, index.NodesWithLabelKey(key));
    }
    out << "\n";
  }
  out << "alive:";
  ListNodes(out, index, index.AliveNodes());
  for (size_t s = 0; s < index.slices().size(); ++s) {
    const Slice& slice = index.slices()[s];
    const SliceFacts& f = index.slice_facts(static_cast<int>(s));
    out << slice.name << " " << SliceStateName(slice.state) << " '" << slice.reason << "' holder=" << f.holder
        << " idle=" << f.chips_idle << " untouched=" << f.untouched << " min=" << f.min_available.ToJson()
        << " free_position=" << f.free_position << " shape=" << f.shape << " pool=" << f.pool << "\n";
  }
  for (const ShapeEntry& shape : index.shapes()) {
    out << "shape " << shape.topology << " free:";
    for (int s : shape.free) out << " " << index.slices()[s].name;
    out << "\n";
  }
  return out.str();
}

}  // namespace torus::sched::testing
