#include "torus/core/lease_candidates.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/label_selector.h"

namespace torus::core {

std::string FormatShape(const std::map<std::string, int64_t>& resources) {
  std::vector<std::string> parts;
  for (const auto& [name, fixed] : resources) {
    const double amount = static_cast<double>(fixed) / 10000.0;
    parts.push_back(absl::StrCat("\"", name, "\": ", amount));
  }
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

bool ShapeFits(const std::map<std::string, int64_t>& want, const std::map<std::string, int64_t>& total) {
  for (const auto& [name, amount] : want) {
    if (amount == 0) continue;
    auto it = total.find(name);
    if (it == total.end() || it->second < amount) return false;
  }
  return true;
}

std::string TaskShape::Key() const {
  std::string key;
  for (const auto& [k, v] : resources) absl::StrAppend(&key, k, "=", v, ";");
  absl::StrAppend(&key, "|", working_dir, "|", strategy, "|");
  for (const auto& [k, v] : env) absl::StrAppend(&key, k, "=", v, "\n");
  absl::StrAppend(&key, "|");
  for (const auto& [k, v] : label_selector) absl::StrAppend(&key, k, "=", v, "\n");
  absl::StrAppend(&key, "|", placement_group, "#", bundle_index);
  return key;
}

const BundleLocation* FindBundle(const std::vector<BundleLocation>& bundles, int index) {
  for (const BundleLocation& b : bundles) {
    if (b.index == index) return &b;
  }
  return nullptr;
}

Candidates LeaseCandidates(const TaskShape& shape, const std::vector<LeaseNode>& nodes, const std::string& local_agent,
                           const std::string& what, const std::vector<BundleLocation>* bundles) {
  Candidates out;
  if (!shape.placement_group.empty()) {
    // Inside a placement group: the agents holding its bundles (the chosen one, or each in turn).
    int seen = 0;
    for (const BundleLocation& b : bundles ? *bundles : std::vector<BundleLocation>{}) {
      if (shape.bundle_index >= 0 && b.index != shape.bundle_index) continue;
      ++seen;
      for (const LeaseNode& n : nodes) {
        if (n.node_id != b.node_id) continue;
        out.agents.push_back(n.agent_address);
        out.bundles.push_back(b.index);
      }
    }
    if (out.agents.empty()) {
      const size_t count = bundles ? bundles->size() : 0;
      out.unschedulable =
          seen == 0 && shape.bundle_index >= 0
              ? absl::StrCat("placement group ", shape.placement_group, " has no bundle ", shape.bundle_index, " (it has ",
                             count, ")")
              : absl::StrCat("the nodes of placement group ", shape.placement_group, "'s bundles are not alive");
    }
    return out;
  }
  auto selector = LabelSelector::Parse(shape.label_selector);
  if (!selector.ok()) {
    out.unschedulable = std::string(selector.status().message());
    return out;
  }
  std::string pinned;
  bool soft = false;
  if (shape.strategy.rfind("NODE:", 0) == 0) pinned = shape.strategy.substr(5);
  if (shape.strategy.rfind("NODE_SOFT:", 0) == 0) {
    pinned = shape.strategy.substr(10);
    soft = true;
  }
  std::vector<std::string> totals;
  int matching = 0;
  bool pinned_seen = false;
  for (const LeaseNode& n : nodes) {
    if (!pinned.empty() && !soft && n.node_id != pinned) continue;
    pinned_seen = pinned_seen || n.node_id == pinned;
    Labels labels(n.labels.begin(), n.labels.end());
    if (!selector->Matches(labels)) continue;
    ++matching;
    if (!ShapeFits(shape.resources, n.total)) {
      totals.push_back(absl::StrCat(n.node_id, " ", FormatShape(n.total)));
      continue;
    }
    const bool first = !pinned.empty() ? n.node_id == pinned
                                       : shape.strategy != "SPREAD" && n.agent_address == local_agent;
    if (first) {
      out.agents.insert(out.agents.begin(), n.agent_address);
    } else {
      out.agents.push_back(n.agent_address);
    }
    out.bundles.push_back(-1);
  }
  if (!out.agents.empty()) return out;
  if (!pinned.empty() && !soft && !pinned_seen) {
    out.unschedulable = absl::StrCat("node ", pinned, " (its node affinity) is not an alive node of the cluster");
  } else if (nodes.empty()) {
    out.unschedulable = absl::StrCat("no node can ever hold ", what, ": the cluster has no nodes");
  } else if (matching == 0) {
    std::vector<std::string> parts;
    for (const auto& [k, v] : shape.label_selector) parts.push_back(absl::StrCat("\"", k, "\": \"", v, "\""));
    out.unschedulable = absl::StrCat("no alive node matches the label selector {", absl::StrJoin(parts, ", "), "}",
                                     pinned.empty() ? "" : absl::StrCat(" on node ", pinned));
  } else {
    out.unschedulable = absl::StrCat("no node can ever hold ", what, " of ", FormatShape(shape.resources),
                                     "; nodes have ", absl::StrJoin(totals, ", "));
  }
  return out;
}

}  // namespace torus::core
