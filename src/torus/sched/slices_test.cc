#include "torus/sched/slices.h"

#include <gtest/gtest.h>

#include "torus/common/well_known_labels.h"

namespace torus::sched {
namespace slices_test {

NodeSnapshot TpuHost(std::string id, std::string slice, int worker, bool alive = true,
                     std::string topology = "4x4", std::string type = "TPU-V6E", std::string pod = "v6e-16") {
  NodeSnapshot n;
  n.node_id = std::move(id);
  n.address = "127.0.0.1";
  n.alive = alive;
  n.labels = {{std::string(kLabelTpuSliceName), slice},
              {std::string(kLabelTpuWorkerId), std::to_string(worker)},
              {std::string(kLabelTpuTopology), topology},
              {std::string(kLabelAcceleratorType), type},
              {std::string(kLabelTpuPodType), pod},
              {std::string(kLabelTpuChipsPerHost), "4"}};
  n.total.Set("TPU", 4);
  n.total.Set("CPU", 8);
  return n;
}

std::vector<NodeSnapshot> FullSlice(const std::string& name) {
  std::vector<NodeSnapshot> v;
  for (int w = 0; w < 4; ++w) v.push_back(TpuHost(name + "-n" + std::to_string(w), name, w));
  return v;
}

TEST(SlicesTest, CompleteSliceIsReady) {
  auto slices = BuildSlices(FullSlice("a"));
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0].name, "a");
  EXPECT_EQ(slices[0].state, SliceState::kReady);
  EXPECT_EQ(slices[0].expected_hosts, 4);
  EXPECT_EQ(slices[0].hosts_alive, 4);
  EXPECT_EQ(slices[0].pod_type, "v6e-16");
  EXPECT_EQ(slices[0].reason, "");
  ASSERT_EQ(slices[0].hosts.size(), 4u);
  for (int w = 0; w < 4; ++w) EXPECT_EQ(slices[0].hosts[w].worker_id, w);
}

TEST(SlicesTest, CpuNodesAreIgnoredAndSlicesSortedByName) {
  auto nodes = FullSlice("b");
  auto a = FullSlice("a");
  nodes.insert(nodes.end(), a.begin(), a.end());
  NodeSnapshot cpu;
  cpu.node_id = "cpu";
  cpu.alive = true;
  nodes.push_back(cpu);
  auto slices = BuildSlices(nodes);
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0].name, "a");
  EXPECT_EQ(slices[1].name, "b");
}

TEST(SlicesTest, MissingWorkerIsIncomplete) {
  auto nodes = FullSlice("a");
  nodes.erase(nodes.begin() + 2);
  auto s = BuildSlices(nodes)[0];
  EXPECT_EQ(s.state, SliceState::kIncomplete);
  EXPECT_EQ(s.reason, "worker 2 missing");
  EXPECT_EQ(s.hosts_alive, 3);
}

TEST(SlicesTest, DeadWorkerDegrades) {
  auto nodes = FullSlice("a");
  nodes[2].alive = false;
  auto s = BuildSlices(nodes)[0];
  EXPECT_EQ(s.state, SliceState::kDegraded);
  EXPECT_EQ(s.reason, "worker 2 dead (node a-n2)");
  EXPECT_EQ(s.hosts_alive, 3);
}

TEST(SlicesTest, ReplacementHostRestoresReady) {
  auto nodes = FullSlice("a");
  nodes[2].alive = false;
  nodes.push_back(TpuHost("a-n2-new", "a", 2));
  auto s = BuildSlices(nodes)[0];
  EXPECT_EQ(s.state, SliceState::kReady);
  EXPECT_EQ(s.hosts[2].node_id, "a-n2-new");
}

TEST(SlicesTest, DuplicateAliveWorkerIsIncomplete) {
  auto nodes = FullSlice("a");
  nodes.push_back(TpuHost("dup", "a", 1));
  auto s = BuildSlices(nodes)[0];
  EXPECT_EQ(s.state, SliceState::kIncomplete);
  EXPECT_EQ(s.reason, "worker 1 claimed by nodes a-n1 and dup");
}

TEST(SlicesTest, WorkerIdOutOfRangeIsIncomplete) {
  auto nodes = FullSlice("a");
  nodes.push_back(TpuHost("extra", "a", 7));
  auto s = BuildSlices(nodes)[0];
  EXPECT_EQ(s.state, SliceState::kIncomplete);
  EXPECT_EQ(s.reason, "node extra has worker id \"7\" outside 0..3");
}

TEST(SlicesTest, DisagreeingShapesAreIncomplete) {
  auto nodes = FullSlice("a");
  nodes[2] = TpuHost("a-n2", "a", 2, true, "2x4", "TPU-V6E", "v6e-8");
  auto s = BuildSlices(nodes)[0];
  EXPECT_EQ(s.state, SliceState::kIncomplete);
  EXPECT_EQ(s.reason,
            "hosts disagree on topology: 2x4 (worker 2), 4x4 (workers 0,1,3); pod type: v6e-16 (workers 0,1,3), "
            "v6e-8 (worker 2)");
}

TEST(SlicesTest, MultiHostV4) {
  std::vector<NodeSnapshot> nodes = {TpuHost("x0", "v4", 0, true, "2x2x2", "TPU-V4", "v4-16"),
                                     TpuHost("x1", "v4", 1, true, "2x2x2", "TPU-V4", "v4-16")};
  auto s = BuildSlices(nodes)[0];
  EXPECT_EQ(s.state, SliceState::kReady) << s.reason;
  EXPECT_EQ(s.expected_hosts, 2);
}

TEST(SlicesTest, SingleEightChipHost) {
  NodeSnapshot n = TpuHost("e", "v5e", 0, true, "2x4", "TPU-V5LITEPOD", "v5litepod-8");
  n.labels[std::string(kLabelTpuChipsPerHost)] = "8";
  n.total.Set("TPU", 8);
  auto s = BuildSlices({n})[0];
  EXPECT_EQ(s.state, SliceState::kReady) << s.reason;
  EXPECT_EQ(s.expected_hosts, 1);
  EXPECT_EQ(s.hosts[0].chips, 8);
}

TEST(SlicesTest, StateNames) {
  EXPECT_EQ(SliceStateName(SliceState::kReady), "READY");
  EXPECT_EQ(SliceStateName(SliceState::kDegraded), "DEGRADED");
  EXPECT_EQ(SliceStateName(SliceState::kIncomplete), "INCOMPLETE");
  EXPECT_EQ(SliceStateName(SliceState::kReserved), "RESERVED");
}

}  // namespace slices_test
}  // namespace torus::sched
