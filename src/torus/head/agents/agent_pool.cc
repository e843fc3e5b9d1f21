#include "torus/head/agents/agent_pool.h"

namespace torus::head {

std::vector<AgentBundles> GroupByAgent(const std::vector<HeldBundle>& bundles,
                                       const std::map<NodeId, std::string>& targets) {
  std::map<std::pair<NodeId, std::string>, AgentBundles> grouped;
  for (const HeldBundle& b : bundles) {
    auto target = targets.find(b.node);
    if (target == targets.end()) continue;
    AgentBundles& entry = grouped[{b.node, b.ledger_group}];
    entry.node = b.node;
    entry.target = target->second;
    entry.ledger_group = b.ledger_group;
    entry.attempt = b.attempt;
    entry.bundles.push_back(b);
  }
  std::vector<AgentBundles> out;
  for (auto& [key, entry] : grouped) out.push_back(std::move(entry));
  return out;
}

}  // namespace torus::head
