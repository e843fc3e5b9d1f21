#include "torus/core/lease_candidates.h"

#include <gtest/gtest.h>

#include <set>

namespace torus::core {
namespace lease_candidates_test {

// The head host (CPUs), two TPU hosts of a v6e slice and a GPU host.
std::vector<LeaseNode> Nodes() {
  return {
      {.node_id = "head", .agent_address = "10.0.0.1:7001", .total = {{"CPU", 40000}}, .labels = {}},
      {.node_id = "tpu-0",
       .agent_address = "10.0.0.2:7001",
       .total = {{"CPU", 80000}, {"TPU", 40000}},
       .labels = {{"torus.io/accelerator-type", "TPU-V6E"}, {"torus.io/tpu-worker-id", "0"}}},
      {.node_id = "tpu-1",
       .agent_address = "10.0.0.3:7001",
       .total = {{"CPU", 80000}, {"TPU", 40000}},
       .labels = {{"torus.io/accelerator-type", "TPU-V6E"}, {"torus.io/tpu-worker-id", "1"}}},
      {.node_id = "gpu", .agent_address = "10.0.0.4:7001", .total = {{"CPU", 80000}, {"GPU", 20000}}, .labels = {}},
  };
}

TEST(LeaseCandidatesTest, TheLocalNodeComesFirstThenEveryNodeThatCanHoldTheShape) {
  TaskShape cpu{.resources = {{"CPU", 10000}}};
  EXPECT_EQ(LeaseCandidates(cpu, Nodes(), "10.0.0.3:7001", "a task").agents,
            (std::vector<std::string>{"10.0.0.3:7001", "10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.4:7001"}));
  TaskShape tpu{.resources = {{"CPU", 10000}, {"TPU", 10000}}};
  EXPECT_EQ(LeaseCandidates(tpu, Nodes(), "10.0.0.1:7001", "a task").agents,
            (std::vector<std::string>{"10.0.0.2:7001", "10.0.0.3:7001"}));
}

TEST(LeaseCandidatesTest, SpreadDoesNotPreferTheLocalNode) {
  TaskShape cpu{.resources = {{"CPU", 10000}}, .strategy = "SPREAD"};
  EXPECT_EQ(LeaseCandidates(cpu, Nodes(), "10.0.0.3:7001", "a task").agents,
            (std::vector<std::string>{"10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.3:7001", "10.0.0.4:7001"}));
}

TEST(LeaseCandidatesTest, NodeAffinityIsOnlyThatNodeOrThatNodeFirst) {
  TaskShape hard{.resources = {{"CPU", 10000}}, .strategy = "NODE:gpu"};
  EXPECT_EQ(LeaseCandidates(hard, Nodes(), "10.0.0.1:7001", "a task").agents,
            (std::vector<std::string>{"10.0.0.4:7001"}));
  TaskShape soft{.resources = {{"CPU", 10000}}, .strategy = "NODE_SOFT:gpu"};
  EXPECT_EQ(LeaseCandidates(soft, Nodes(), "10.0.0.1:7001", "a task").agents.front(), "10.0.0.4:7001");
  EXPECT_EQ(LeaseCandidates(soft, Nodes(), "10.0.0.1:7001", "a task").agents.size(), 4u);
  TaskShape missing{.resources = {{"CPU", 10000}}, .strategy = "NODE:gone"};
  EXPECT_EQ(LeaseCandidates(missing, Nodes(), "10.0.0.1:7001", "a task").unschedulable,
            "node gone (its node affinity) is not an alive node of the cluster");
  TaskShape too_big{.resources = {{"TPU", 10000}}, .strategy = "NODE:gpu"};
  EXPECT_EQ(LeaseCandidates(too_big, Nodes(), "10.0.0.1:7001", "a task").unschedulable,
            "no node can ever hold a task of {\"TPU\": 1}; nodes have gpu {\"CPU\": 8, \"GPU\": 2}");
}

TEST(LeaseCandidatesTest, TheLabelSelectorNarrowsTheNodesWithRayAliases) {
  TaskShape second{.resources = {{"CPU", 10000}}, .label_selector = {{"ray.io/tpu-worker-id", "1"}}};
  EXPECT_EQ(LeaseCandidates(second, Nodes(), "10.0.0.1:7001", "a task").agents,
            (std::vector<std::string>{"10.0.0.3:7001"}));
  TaskShape not_tpu{.resources = {{"CPU", 10000}}, .label_selector = {{"torus.io/accelerator-type", "!TPU-V6E"}}};
  EXPECT_EQ(LeaseCandidates(not_tpu, Nodes(), "10.0.0.2:7001", "a task").agents,
            (std::vector<std::string>{"10.0.0.1:7001", "10.0.0.4:7001"}));
  TaskShape none{.resources = {{"CPU", 10000}}, .label_selector = {{"team", "in(a,b)"}}};
  EXPECT_EQ(LeaseCandidates(none, Nodes(), "10.0.0.1:7001", "an actor").unschedulable,
            "no alive node matches the label selector {\"team\": \"in(a,b)\"}");
  TaskShape bad{.resources = {{"CPU", 10000}}, .label_selector = {{"team", "in()"}}};
  EXPECT_NE(LeaseCandidates(bad, Nodes(), "10.0.0.1:7001", "a task").unschedulable.find("label selector for \"team\""),
            std::string::npos);
}

TEST(LeaseCandidatesTest, AShapeNoNodeCanHoldNamesTheNodesTotals) {
  TaskShape eight{.resources = {{"CPU", 10000}, {"TPU", 80000}}};
  EXPECT_EQ(LeaseCandidates(eight, Nodes(), "10.0.0.1:7001", "an actor").unschedulable,
            "no node can ever hold an actor of {\"CPU\": 1, \"TPU\": 8}; nodes have head {\"CPU\": 4}, tpu-0 "
            "{\"CPU\": 8, \"TPU\": 4}, tpu-1 {\"CPU\": 8, \"TPU\": 4}, gpu {\"CPU\": 8, \"GPU\": 2}");
  EXPECT_EQ(LeaseCandidates(eight, {}, "10.0.0.1:7001", "a task").unschedulable,
            "no node can ever hold a task: the cluster has no nodes");
}

TEST(TaskShapeTest, KeysDifferByEveryPart) {
  TaskShape base{.resources = {{"CPU", 10000}}};
  std::set<std::string> keys = {base.Key()};
  TaskShape s = base;
  s.env = {{"A", "1"}};
  keys.insert(s.Key());
  s = base;
  s.working_dir = "/w";
  keys.insert(s.Key());
  s = base;
  s.label_selector = {{"team", "a"}};
  keys.insert(s.Key());
  s = base;
  s.strategy = "SPREAD";
  keys.insert(s.Key());
  s = base;
  s.fallback_selectors = {{{"team", "a"}}};
  keys.insert(s.Key());
  s.fallback_selectors = {{{"team", "a"}}, {}};
  keys.insert(s.Key());
  s = base;
  s.fallback_selectors = {{}};
  keys.insert(s.Key());
  EXPECT_EQ(keys.size(), 8u);
}

TEST(LeaseCandidatesTest, TheFirstSelectorThatSomeNodeCanHoldChoosesTheNodes) {
  // The primary matches: its nodes only, although a fallback matches others.
  TaskShape primary{.resources = {{"CPU", 10000}},
                    .label_selector = {{"ray.io/tpu-worker-id", "1"}},
                    .fallback_selectors = {{{"ray.io/tpu-worker-id", "0"}}}};
  EXPECT_EQ(LeaseCandidates(primary, Nodes(), "10.0.0.1:7001", "a task").agents,
            (std::vector<std::string>{"10.0.0.3:7001"}));
  // No node matches the primary: the first fallback that matches one, in order.
  TaskShape fallback{.resources = {{"CPU", 10000}},
                     .label_selector = {{"team", "a"}},
                     .fallback_selectors = {{{"team", "b"}}, {{"ray.io/tpu-worker-id", "0"}}, {}}};
  const Candidates c = LeaseCandidates(fallback, Nodes(), "10.0.0.1:7001", "a task");
  EXPECT_EQ(c.agents, (std::vector<std::string>{"10.0.0.2:7001"}));
  EXPECT_EQ(c.bundles, (std::vector<int>{-1}));
  // Nodes match the primary but none can hold the shape (resources stay the same): the fallback's nodes that can.
  TaskShape gpu{.resources = {{"GPU", 10000}},
                .label_selector = {{"ray.io/accelerator-type", "TPU-V6E"}},
                .fallback_selectors = {{{"ray.io/accelerator-type", "!TPU-V6E"}}}};
  EXPECT_EQ(LeaseCandidates(gpu, Nodes(), "10.0.0.1:7001", "an actor").agents,
            (std::vector<std::string>{"10.0.0.4:7001"}));
  // An empty fallback matches every node; the local one comes first as usual.
  TaskShape anywhere{.resources = {{"CPU", 10000}}, .label_selector = {{"team", "a"}}, .fallback_selectors = {{}}};
  EXPECT_EQ(LeaseCandidates(anywhere, Nodes(), "10.0.0.3:7001", "a task").agents,
            (std::vector<std::string>{"10.0.0.3:7001", "10.0.0.1:7001", "10.0.0.2:7001", "10.0.0.4:7001"}));
  // Strategies apply to the fallback's nodes too.
  TaskShape pinned = anywhere;
  pinned.strategy = "NODE:gpu";
  EXPECT_EQ(LeaseCandidates(pinned, Nodes(), "10.0.0.3:7001", "a task").agents,
            (std::vector<std::string>{"10.0.0.4:7001"}));
}

TEST(LeaseCandidatesTest, WhenNoSelectorHasANodeTheReasonNamesThemAll) {
  TaskShape none{.resources = {{"CPU", 10000}},
                 .label_selector = {{"team", "a"}},
                 .fallback_selectors = {{{"team", "b"}}, {{"zone", "in(x,y)"}}}};
  EXPECT_EQ(LeaseCandidates(none, Nodes(), "10.0.0.1:7001", "a task").unschedulable,
            "no alive node matches the label selector {\"team\": \"a\"} nor its fallbacks {\"team\": \"b\"}, "
            "{\"zone\": \"in(x,y)\"}");
  // Nodes match, none can hold it: the totals of every node that matched some selector.
  TaskShape big{.resources = {{"TPU", 80000}},
                .label_selector = {{"ray.io/tpu-worker-id", "1"}},
                .fallback_selectors = {{{"ray.io/tpu-worker-id", "0"}}}};
  EXPECT_EQ(LeaseCandidates(big, Nodes(), "10.0.0.1:7001", "a task").unschedulable,
            "no node can ever hold a task of {\"TPU\": 8}; nodes have tpu-0 {\"CPU\": 8, \"TPU\": 4}, tpu-1 "
            "{\"CPU\": 8, \"TPU\": 4}");
  // A bad fallback is named by its place.
  TaskShape bad{.resources = {{"CPU", 10000}}, .fallback_selectors = {{}, {{"team", "in()"}}}};
  EXPECT_EQ(LeaseCandidates(bad, Nodes(), "10.0.0.1:7001", "a task").unschedulable.rfind("fallback_strategy[1]: ", 0),
            0u);
}

}  // namespace lease_candidates_test
}  // namespace torus::core
