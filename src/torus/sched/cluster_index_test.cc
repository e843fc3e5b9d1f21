#include "torus/sched/cluster_index.h"

#include <gtest/gtest.h>

#include <span>

#include "torus/sched/sched_test_util.h"

namespace torus::sched {
namespace cluster_index_test {

using testing::Append;
using testing::CpuNode;
using testing::Find;
using testing::Index;
using testing::Sel;
using testing::SliceSpec;
using testing::TpuSlice;

std::vector<std::string> Ids(const ClusterIndex& index, std::span<const int> nodes) {
  std::vector<std::string> ids;
  for (int n : nodes) ids.push_back(index.nodes()[n].node_id);
  return ids;
}

std::vector<std::string> Names(const ClusterIndex& index, const std::vector<int>& slices) {
  std::vector<std::string> names;
  for (int s : slices) names.push_back(index.slices()[s].name);
  return names;
}

TEST(ClusterIndexTest, EmptyIndex) {
  ClusterIndex index;
  EXPECT_TRUE(index.nodes().empty());
  EXPECT_TRUE(index.slices().empty());
  EXPECT_EQ(index.FindNode("x"), nullptr);
  EXPECT_TRUE(index.NodesWithLabel("a", "b").empty());
  EXPECT_TRUE(index.CandidatesFor(LabelSelector()).nodes().empty());
}

TEST(ClusterIndexTest, NodesSortedByIdOneEntryPerIdAliveWins) {
  NodeSnapshot dead = CpuNode("b", 4);
  dead.alive = false;
  dead.address = "dead";
  ClusterIndex index = Index({CpuNode("c", 4), dead, CpuNode("a", 4), CpuNode("b", 4)});
  EXPECT_EQ(Ids(index, std::vector<int>{0, 1, 2}), (std::vector<std::string>{"a", "b", "c"}));
  ASSERT_NE(index.FindNode("b"), nullptr);
  EXPECT_TRUE(index.FindNode("b")->alive);
  EXPECT_EQ(index.NodeIndex("c"), 2);
  EXPECT_EQ(index.NodeIndex("zz"), -1);
}

TEST(ClusterIndexTest, AliveNodesPutHostsWithoutAcceleratorsFirst) {
  std::vector<NodeSnapshot> nodes = TpuSlice("s", {.hosts = 1, .chips_per_host = 8});
  nodes[0].labels[std::string(kLabelTpuTopology)] = "2x4";
  nodes.push_back(CpuNode("z-cpu", 4));
  nodes.push_back(CpuNode("a-cpu", 4));
  NodeSnapshot dead = CpuNode("b-cpu", 4);
  dead.alive = false;
  nodes.push_back(dead);
  NodeSnapshot gpu = CpuNode("0-gpu", 4);
  gpu.total.Set("GPU", 1);
  nodes.push_back(gpu);
  ClusterIndex index = Index(nodes);
  EXPECT_EQ(Ids(index, index.AliveNodes()), (std::vector<std::string>{"a-cpu", "z-cpu", "0-gpu", "s-w0"}));
  EXPECT_EQ(index.node_facts(index.NodeIndex("b-cpu")).rank, -1);
  EXPECT_EQ(index.node_facts(index.NodeIndex("a-cpu")).tier, 0);
  EXPECT_EQ(index.node_facts(index.NodeIndex("0-gpu")).tier, 1);
  EXPECT_EQ(index.node_facts(index.NodeIndex("s-w0")).tier, 2);  // host of a free slice
  // Accelerator-only candidates skip tier 0.
  EXPECT_EQ(Ids(index, index.CandidatesFor(LabelSelector(), true).nodes()),
            (std::vector<std::string>{"0-gpu", "s-w0"}));
  // A held slice's host is no longer kept back.
  ClusterIndex held = Index(nodes, {{"s", "pg 1"}});
  EXPECT_EQ(held.node_facts(held.NodeIndex("s-w0")).tier, 1);
  EXPECT_EQ(Ids(held, held.AliveNodes()), (std::vector<std::string>{"a-cpu", "z-cpu", "0-gpu", "s-w0"}));
  ClusterIndex busy = Index(nodes, {}, {{"s-w0", {3}}});  // a busy chip: the slice is not free either
  EXPECT_EQ(busy.node_facts(busy.NodeIndex("s-w0")).tier, 1);
  EXPECT_TRUE(index.node_facts(index.NodeIndex("0-gpu")).accelerator_host);
  EXPECT_FALSE(index.node_facts(index.NodeIndex("a-cpu")).accelerator_host);
}

TEST(ClusterIndexTest, LabelPostingsHoldAliveNodesInPreferenceOrder) {
  std::vector<NodeSnapshot> nodes = TpuSlice("s", {.labels = {{"zone", "a"}}});
  nodes.push_back(CpuNode("c2", 4, {{"zone", "a"}}));
  nodes.push_back(CpuNode("c1", 4, {{"zone", "b"}}));
  NodeSnapshot dead = CpuNode("c0", 4, {{"zone", "a"}});
  dead.alive = false;
  nodes.push_back(dead);
  ClusterIndex index = Index(nodes);
  EXPECT_EQ(Ids(index, index.NodesWithLabel("zone", "a")),
            (std::vector<std::string>{"c2", "s-w0", "s-w1", "s-w2", "s-w3"}));
  EXPECT_EQ(Ids(index, index.NodesWithLabel("zone", "b")), (std::vector<std::string>{"c1"}));
  EXPECT_EQ(index.NodesWithLabelKey("zone").size(), 6u);
  EXPECT_TRUE(index.NodesWithLabel("zone", "c").empty());
  EXPECT_TRUE(index.NodesWithLabelKey("rack").empty());
}

TEST(ClusterIndexTest, CandidatesComeFromTheSmallestPostingList) {
  std::vector<NodeSnapshot> nodes;
  for (int i = 0; i < 6; ++i) {
    nodes.push_back(CpuNode("n" + std::to_string(i), 4,
                            {{"zone", i < 4 ? "a" : "b"}, {"team", i % 3 == 0 ? "ml" : "web"}}));
  }
  ClusterIndex index = Index(nodes);
  struct Case {
    std::map<std::string, std::string> selector;
    std::vector<std::string> candidates;
    bool exact;
  };
  const std::vector<Case> cases = {
      {{}, {"n0", "n1", "n2", "n3", "n4", "n5"}, true},
      {{{"zone", "b"}}, {"n4", "n5"}, true},  // one positive expression: its list is exact
      {{{"zone", "a"}, {"team", "ml"}}, {"n0", "n3"}, false},     // team=ml (2) beats zone=a (4)
      {{{"team", "in(ml,web)"}, {"zone", "b"}}, {"n4", "n5"}, false},
      {{{"team", "in(ml,nope)"}}, {"n0", "n3"}, true},            // in(): lists merged
      {{{"zone", "!a"}}, {"n0", "n1", "n2", "n3", "n4", "n5"}, false},  // negatives do not narrow
      {{{"zone", "exists()"}}, {"n0", "n1", "n2", "n3", "n4", "n5"}, true},
      {{{"zone", "exists(),!c"}}, {"n0", "n1", "n2", "n3", "n4", "n5"}, false},
      {{{"zone", "c"}}, {}, true},
      {{{"rack", "exists()"}}, {}, true},
  };
  for (const Case& c : cases) {
    NodeCandidates got = index.CandidatesFor(Sel(c.selector));
    EXPECT_EQ(Ids(index, got.nodes()), c.candidates) << Sel(c.selector).ToString();
    EXPECT_EQ(got.exact(), c.exact) << Sel(c.selector).ToString();
  }
}

TEST(ClusterIndexTest, IndexLabelKeyReadsRayAliases) {
  std::string scratch;
  EXPECT_EQ(IndexLabelKey("ray.io/market-type", scratch), "torus.io/market-type");
  EXPECT_EQ(IndexLabelKey("ray.io/other", scratch), "ray.io/other");
  EXPECT_EQ(IndexLabelKey("team", scratch), "team");
}

TEST(ClusterIndexTest, SlicesByShapeWithReservedApplied) {
  std::vector<NodeSnapshot> nodes = TpuSlice("a");
  Append(nodes, TpuSlice("b"));
  Append(nodes, TpuSlice("c"));
  Append(nodes, TpuSlice("v4", {.type = "TPU-V4", .topology = "2x2x2", .pod_type = "v4-16", .hosts = 2}));
  Find(nodes, "c-w1")->alive = false;
  ClusterIndex index = Index(nodes, {{"b", "pg 7f3a"}, {"c", "pg 9"}});
  ASSERT_EQ(index.slices().size(), 4u);
  const Slice& b = index.slices()[index.SliceIndex("b")];
  EXPECT_EQ(b.state, SliceState::kReserved);
  EXPECT_EQ(index.slice_facts(index.SliceIndex("b")).holder, "pg 7f3a");
  const Slice& c = index.slices()[index.SliceIndex("c")];
  EXPECT_EQ(c.state, SliceState::kDegraded);  // held but degraded: DEGRADED says more
  EXPECT_EQ(c.reason, "worker 1 dead (node c-w1)");

  std::vector<const Slice*> v6e = index.SlicesOfShape("TPU-V6E", "4x4", 4);
  ASSERT_EQ(v6e.size(), 3u);
  EXPECT_EQ(v6e[0]->name, "a");
  EXPECT_EQ(v6e[2]->name, "c");
  EXPECT_EQ(index.SlicesOfShape("tpu-v4", "2x2x2", 4).size(), 1u);
  EXPECT_TRUE(index.SlicesOfShape("TPU-V6E", "4x4", 8).empty());
  EXPECT_TRUE(index.SlicesOfShape("TPU-V6E", "8x8", 4).empty());
  EXPECT_TRUE(index.SlicesOfShape("TPU-V9", "4x4", 4).empty());
  const ShapeEntry* shape = index.FindShape(TpuGeneration::kV6e, "4x4", 4);
  ASSERT_NE(shape, nullptr);
  EXPECT_EQ(Names(index, shape->free), (std::vector<std::string>{"a"}));
}

TEST(ClusterIndexTest, SliceFactsTrackBusyChipsUseAndPools) {
  std::vector<NodeSnapshot> nodes = TpuSlice("a", {.labels = {{std::string(kLabelMarketType), "spot"}}});
  Append(nodes, TpuSlice("b"));
  Find(nodes, "b-w2")->available = testing::Res({{"CPU", 6}, {"TPU", 4}});
  ClusterIndex index = Index(nodes, {}, {{"a-w3", {2, 1, 2}}});
  const SliceFacts& a = index.slice_facts(index.SliceIndex("a"));
  EXPECT_FALSE(a.chips_idle);
  EXPECT_EQ(index.node_facts(index.NodeIndex("a-w3")).busy_chips, (std::vector<int>{1, 2}));
  EXPECT_EQ(a.pool, "torus.io/market-type=spot");
  EXPECT_EQ(a.host_nodes.size(), 4u);
  EXPECT_EQ(index.node_facts(a.host_nodes[3]).slice, index.SliceIndex("a"));
  const SliceFacts& b = index.slice_facts(index.SliceIndex("b"));
  EXPECT_TRUE(b.chips_idle);
  EXPECT_FALSE(b.untouched);
  EXPECT_EQ(b.min_available, testing::Res({{"CPU", 6}, {"TPU", 4}}));
  EXPECT_EQ(b.varying_label_keys,
            (std::vector<std::string>{std::string(kLabelNodeId), std::string(kLabelTpuWorkerId)}));
  EXPECT_EQ(b.free_position, 0);
  EXPECT_EQ(a.free_position, -1);
}

TEST(ClusterIndexTest, FreeSlicesOrderedByPoolSizeThenPartlyUsedThenName) {
  const Labels spot = {{std::string(kLabelMarketType), "spot"}};
  const Labels reserved = {{std::string(kLabelMarketType), "reserved"}};
  std::vector<NodeSnapshot> nodes;
  Append(nodes, TpuSlice("r1", {.labels = reserved}));
  Append(nodes, TpuSlice("s1", {.labels = spot}));
  Append(nodes, TpuSlice("s2", {.labels = spot}));
  Append(nodes, TpuSlice("s3", {.labels = spot}));
  Find(nodes, "s3-w0")->available = testing::Res({{"CPU", 7}, {"TPU", 4}});  // partly used
  ClusterIndex index = Index(nodes);
  const ShapeEntry* shape = index.FindShape(TpuGeneration::kV6e, "4x4", 4);
  ASSERT_NE(shape, nullptr);
  EXPECT_EQ(Names(index, shape->free), (std::vector<std::string>{"s3", "s1", "s2", "r1"}));
}

TEST(ClusterIndexTest, SelectorHoldsOnEveryHost) {
  std::vector<NodeSnapshot> nodes = TpuSlice("a", {.labels = {{"team", "ml"}}});
  Append(nodes, TpuSlice("b", {.labels = {{"team", "ml"}}}));
  Find(nodes, "b-w3")->labels["team"] = "web";
  ClusterIndex index = Index(nodes);
  const int a = index.SliceIndex("a"), b = index.SliceIndex("b");
  EXPECT_TRUE(SelectorHoldsOnSlice(index, a, Sel({{"team", "ml"}})));
  EXPECT_FALSE(SelectorHoldsOnSlice(index, b, Sel({{"team", "ml"}})));
  EXPECT_TRUE(SelectorHoldsOnSlice(index, b, LabelSelector()));
  // Keys that differ between hosts are checked on every host.
  EXPECT_FALSE(SelectorHoldsOnSlice(index, a, Sel({{std::string(kLabelTpuWorkerId), "0"}})));
  EXPECT_TRUE(SelectorHoldsOnSlice(index, a, Sel({{std::string(kLabelTpuWorkerId), "in(0,1,2,3)"}})));
}

TEST(ClusterIndexTest, ShuffledInputBuildsTheSameIndex) {
  std::vector<NodeSnapshot> nodes = TpuSlice("a");
  Append(nodes, TpuSlice("b"));
  for (int i = 0; i < 10; ++i) nodes.push_back(CpuNode("c" + std::to_string(i), 4, {{"zone", i % 2 ? "x" : "y"}}));
  ClusterIndex one = Index(nodes);
  for (unsigned seed = 1; seed <= 5; ++seed) {
    ClusterIndex two = Index(testing::Shuffled(nodes, seed));
    EXPECT_EQ(Ids(one, one.AliveNodes()), Ids(two, two.AliveNodes()));
    EXPECT_EQ(Ids(one, one.NodesWithLabel("zone", "x")), Ids(two, two.NodesWithLabel("zone", "x")));
    ASSERT_EQ(one.slices().size(), two.slices().size());
    for (size_t s = 0; s < one.slices().size(); ++s) EXPECT_EQ(one.slices()[s].name, two.slices()[s].name);
  }
}

}  // namespace cluster_index_test
}  // namespace torus::sched
