// An index kept up to date change by change must be exactly the index built from the changed input.
#include <gtest/gtest.h>

#include <random>
#include <span>

#include "torus/sched/cluster_index.h"
#include "torus/sched/sched_test_util.h"

namespace torus::sched {
namespace cluster_index_upkeep_test {

using testing::Append;
using testing::CpuNode;
using testing::Res;
using testing::SliceSpec;
using testing::TpuSlice;

// A cluster of two shapes in three pools, a degraded slice, CPU nodes, and the same as an input to build from.
struct Cluster {
  IndexInput input;
  ClusterIndex kept;

  Cluster() {
    for (int s = 0; s < 9; ++s) {
      const std::string market = s % 3 == 0 ? "reserved" : (s % 3 == 1 ? "spot" : "on-demand");
      SliceSpec spec{.labels = {{std::string(kLabelMarketType), market}}};
      if (s >= 6) {
        spec.topology = "2x4";
        spec.pod_type = "v6e-8";
        spec.hosts = 2;
      }
      Append(input.nodes, TpuSlice("s" + std::to_string(s), spec));
    }
    input.nodes[5].alive = false;  // s1-w1: s1 is DEGRADED
    for (int i = 0; i < 6; ++i) input.nodes.push_back(CpuNode("cpu" + std::to_string(i), 8, {{"zone", i % 2 ? "a" : "b"}}));
    input.slice_holders["s3"] = "pg-early";
    kept = ClusterIndex::Build(input);
  }

  NodeSnapshot& Node(const std::string& id) { return *testing::Find(input.nodes, id); }
};

TEST(ClusterIndexUpkeepTest, RandomHoldsAndReleasesLeaveTheIndexAFreshBuildWouldMake) {
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    Cluster c;
    const ClusterIndex shared = c.kept;  // a copy taken before the changes must not see them
    const std::string before = testing::DescribeIndex(shared);
    for (int step = 0; step < 40; ++step) {
      SCOPED_TRACE(::testing::Message() << "round " << round << " step " << step);
      if (rng() % 3 == 0) {
        const std::string slice = "s" + std::to_string(rng() % 9);
        const std::string holder = rng() % 2 ? "" : "pg-" + std::to_string(rng() % 5);
        if (holder.empty()) {
          c.input.slice_holders.erase(slice);
        } else {
          c.input.slice_holders[slice] = holder;
        }
        ASSERT_TRUE(c.kept.SetSliceHolder(slice, holder));
      } else {
        NodeSnapshot& n = c.input.nodes[rng() % c.input.nodes.size()];
        n.available = n.total;
        std::vector<int> busy;
        if (rng() % 2) n.available.Set("CPU", n.total.Get("CPU") - 1 - rng() % 3);
        if (n.total.Get("TPU") > 0 && rng() % 2) {
          busy = {static_cast<int>(rng() % 4), static_cast<int>(rng() % 4)};
          n.available.Set("TPU", n.total.Get("TPU") - 2);
        }
        if (busy.empty()) {
          c.input.busy_chips.erase(n.node_id);
        } else {
          c.input.busy_chips[n.node_id] = busy;
        }
        ASSERT_TRUE(c.kept.UpdateHoldings(n.node_id, n.available, busy));
      }
      ASSERT_EQ(testing::DescribeIndex(c.kept), testing::DescribeIndex(ClusterIndex::Build(c.input)));
    }
    EXPECT_EQ(testing::DescribeIndex(shared), before);
  }
}

TEST(ClusterIndexUpkeepTest, AHeldSliceLeavesTheFreeListAndItsHostsMoveBehindTheOthers) {
  Cluster c;
  const int s0 = c.kept.SliceIndex("s0");
  const int host = c.kept.NodeIndex("s0-w0");
  ASSERT_EQ(c.kept.node_facts(host).tier, 2);
  ASSERT_GE(c.kept.slice_facts(s0).free_position, 0);
  ASSERT_TRUE(c.kept.SetSliceHolder("s0", "pg-1"));
  EXPECT_EQ(c.kept.slices()[s0].state, SliceState::kReserved);
  EXPECT_EQ(c.kept.slices()[s0].reason, "held by pg-1");
  EXPECT_EQ(c.kept.slice_facts(s0).free_position, -1);
  EXPECT_EQ(c.kept.node_facts(host).tier, 1);
  // Given back: READY and free again, its hosts last once more.
  ASSERT_TRUE(c.kept.SetSliceHolder("s0", ""));
  EXPECT_EQ(c.kept.slices()[s0].state, SliceState::kReady);
  EXPECT_EQ(c.kept.slices()[s0].reason, "");
  EXPECT_EQ(c.kept.node_facts(host).tier, 2);
  // A degraded slice stays DEGRADED when held.
  ASSERT_TRUE(c.kept.SetSliceHolder("s1", "pg-2"));
  EXPECT_EQ(c.kept.slices()[c.kept.SliceIndex("s1")].state, SliceState::kDegraded);
}

TEST(ClusterIndexUpkeepTest, ABusyChipTakesTheSliceOffTheFreeList) {
  Cluster c;
  const int s2 = c.kept.SliceIndex("s2");
  ASSERT_TRUE(c.kept.UpdateHoldings("s2-w3", Res({{"CPU", 8}, {"TPU", 3}}), {2}));
  EXPECT_FALSE(c.kept.slice_facts(s2).chips_idle);
  EXPECT_EQ(c.kept.slice_facts(s2).free_position, -1);
  EXPECT_EQ(c.kept.node_facts(c.kept.NodeIndex("s2-w0")).tier, 1);
  EXPECT_EQ(c.kept.node_facts(c.kept.NodeIndex("s2-w3")).busy_chips, std::vector<int>{2});
}

TEST(ClusterIndexUpkeepTest, UnknownNodesAndSlicesChangeNothing) {
  Cluster c;
  const std::string before = testing::DescribeIndex(c.kept);
  EXPECT_FALSE(c.kept.UpdateHoldings("nobody", Res({{"CPU", 1}}), {}));
  EXPECT_FALSE(c.kept.SetSliceHolder("no-slice", "pg-1"));
  EXPECT_EQ(testing::DescribeIndex(c.kept), before);
}

}  // namespace cluster_index_upkeep_test
}  // namespace torus::sched
