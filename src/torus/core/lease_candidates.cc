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
  for (const auto& fallback : fallback_selectors) {
    absl::StrAppend(&key, "|or");
    for (const auto& [k, v] : fallback) absl::StrAppend(&key, k, "=", v, "\n");
  }
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
  // The primary selector, then its fallbacks: each parsed once.
  std::vector<const std::map<std::string, std::string>*> texts{&shape.label_selector};
  for (const auto& f : shape.fallback_selectors) texts.push_back(&f);
  std::vector<LabelSelector> selectors;
  selectors.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    auto parsed = LabelSelector::Parse(*texts[i]);
    if (!parsed.ok()) {
      out.unschedulable = i == 0 ? std::string(parsed.status().message())
                                 : absl::StrCat("fallback_strategy[", i - 1, "]: ", parsed.status().message());
      return out;
    }
    selectors.push_back(*std::move(parsed));
  }
  std::string pinned;
  bool soft = false;
  if (shape.strategy.rfind("NODE:", 0) == 0) pinned = shape.strategy.substr(5);
  if (shape.strategy.rfind("NODE_SOFT:", 0) == 0) {
    pinned = shape.strategy.substr(10);
    soft = true;
  }
  std::vector<Labels> labels;
  labels.reserve(nodes.size());
  for (const LeaseNode& n : nodes) labels.emplace_back(n.labels.begin(), n.labels.end());
  std::vector<bool> matched(nodes.size(), false);  // by any selector
  bool pinned_seen = false;
  for (const LabelSelector& selector : selectors) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      const LeaseNode& n = nodes[i];
      if (!pinned.empty() && !soft && n.node_id != pinned) continue;
      pinned_seen = pinned_seen || n.node_id == pinned;
      if (!selector.Matches(labels[i])) continue;
      matched[i] = true;
      if (!ShapeFits(shape.resources, n.total)) continue;
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
  }
  std::vector<std::string> totals;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (matched[i]) totals.push_back(absl::StrCat(nodes[i].node_id, " ", FormatShape(nodes[i].total)));
  }
  if (!pinned.empty() && !soft && !pinned_seen) {
    out.unschedulable = absl::StrCat("node ", pinned, " (its node affinity) is not an alive node of the cluster");
  } else if (nodes.empty()) {
    out.unschedulable = absl::StrCat("no node can ever hold ", what, ": the cluster has no nodes");
  } else if (totals.empty()) {
    auto format = [](const std::map<std::string, std::string>& selector) {
      std::vector<std::string> parts;
      for (const auto& [k, v] : selector) parts.push_back(absl::StrCat("\"", k, "\": \"", v, "\""));
      return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
    };
    std::vector<std::string> fallbacks;
    for (const auto& f : shape.fallback_selectors) fallbacks.push_back(format(f));
    out.unschedulable =
        absl::StrCat("no alive node matches the label selector ", format(shape.label_selector),
                     fallbacks.empty() ? "" : absl::StrCat(" nor its fallbacks ", absl::StrJoin(fallbacks, ", ")),
                     pinned.empty() ? "" : absl::StrCat(" on node ", pinned));
  } else {
    out.unschedulable = absl::StrCat("no node can ever hold ", what, " of ", FormatShape(shape.resources),
                                     "; nodes have ", absl::StrJoin(totals, ", "));
  }
  return out;
}

}  // namespace torus::core
