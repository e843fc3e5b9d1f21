#include "torus/sched/single_policy.h"

#include <gtest/gtest.h>

#include "torus/sched/sched_test_util.h"

namespace torus::sched {
namespace single_policy_test {

using testing::CpuNode;
using testing::Index;
using testing::Res;
using testing::Sel;
using testing::SliceSpec;
using testing::TpuSlice;

std::string Describe(const SingleOutcome& o) {
  if (auto* p = std::get_if<SinglePlacement>(&o)) return "placed on " + p->node_id + " alt " + std::to_string(p->alternative);
  if (auto* p = std::get_if<Pending>(&o)) return "pending: " + p->reason;
  return "infeasible: " + std::get<Infeasible>(o).reason;
}

SingleRequest Cpu(double cpus, std::map<std::string, std::string> selector = {}) {
  SingleRequest r;
  r.resources = Res({{"CPU", cpus}});
  r.selector = Sel(selector);
  return r;
}

// A TPU host "t<i>" with 4 chips (a single-host v6e 2x2 slice).
NodeSnapshot TpuHost(const std::string& id) {
  NodeSnapshot n = TpuSlice(id, {.topology = "2x2", .pod_type = "v6e-4", .hosts = 1})[0];
  n.node_id = id;
  return n;
}

struct Case {
  std::string name;
  std::vector<NodeSnapshot> nodes;
  SingleRequest request;
  SingleOutcome expected;
  std::map<std::string, std::vector<int>> busy_chips = {};
};

TEST(PlaceSingleTest, Table) {
  SingleRequest tpu2;
  tpu2.resources = Res({{"CPU", 1}, {"TPU", 2}});
  SingleRequest with_fallback = Cpu(2, {{"zone", "a"}});
  with_fallback.fallback_selectors = {Sel({{"zone", "b"}}), Sel({{"zone", "c"}})};
  SingleRequest fallback_nowhere = Cpu(2, {{"zone", "a"}});
  fallback_nowhere.fallback_selectors = {Sel({{"zone", "zz"}})};

  const std::vector<Case> cases = {
      {"packs onto the lowest id under the threshold",
       {CpuNode("b", 8), CpuNode("a", 8, {}, 1)}, Cpu(2), SinglePlacement{"a", 0}},
      {"exactly at the threshold still packs",
       {CpuNode("b", 8), CpuNode("a", 8, {}, 2)}, Cpu(2), SinglePlacement{"a", 0}},
      {"over the threshold moves to the next node under it",
       {CpuNode("b", 8), CpuNode("a", 8, {}, 3)}, Cpu(2), SinglePlacement{"b", 0}},
      {"all over the threshold: least utilised",
       {CpuNode("a", 8, {}, 6), CpuNode("b", 8, {}, 4), CpuNode("c", 8, {}, 5)}, Cpu(1),
       SinglePlacement{"b", 0}},
      {"least utilised ties break by node id",
       {CpuNode("c", 8, {}, 4), CpuNode("b", 8, {}, 4), CpuNode("a", 8, {}, 7)}, Cpu(1), SinglePlacement{"b", 0}},
      {"dead nodes are not candidates",
       [] { auto n = CpuNode("a", 8); n.alive = false; return std::vector{n, CpuNode("b", 8)}; }(), Cpu(1),
       SinglePlacement{"b", 0}},
      {"CPU work avoids TPU hosts",
       {TpuHost("a-tpu"), CpuNode("z-cpu", 8)}, Cpu(1), SinglePlacement{"z-cpu", 0}},
      {"CPU work avoids TPU hosts even when the CPU node is busier",
       {TpuHost("a-tpu"), CpuNode("z-cpu", 8, {}, 6)}, Cpu(1), SinglePlacement{"z-cpu", 0}},
      {"CPU work uses a TPU host when no CPU node fits",
       {TpuHost("a-tpu"), CpuNode("z-cpu", 8, {}, 8)}, Cpu(1), SinglePlacement{"a-tpu", 0}},
      {"TPU work goes to a TPU host", {CpuNode("a", 8), TpuHost("t1")}, tpu2, SinglePlacement{"t1", 0}},
      {"TPU work takes an aligned free block", {TpuHost("t1"), TpuHost("t2")}, tpu2, SinglePlacement{"t1", 0},
       {{"t1", {1}}}},
      {"TPU work skips a host with no aligned free block", {TpuHost("t1"), TpuHost("t2")}, tpu2,
       SinglePlacement{"t2", 0}, {{"t1", {1, 2}}}},
      {"1-chip work keeps whole free slices: a used slice's host first", {TpuHost("t1"), TpuHost("t2")},
       [] { SingleRequest r; r.resources = Res({{"TPU", 1}}); return r; }(), SinglePlacement{"t2", 0},
       {{"t2", {3}}}},
      {"selector filters", {CpuNode("a", 8, {{"zone", "b"}}), CpuNode("b", 8, {{"zone", "a"}})},
       Cpu(1, {{"zone", "a"}}), SinglePlacement{"b", 0}},
      {"negative selector", {CpuNode("a", 8, {{"zone", "b"}}), CpuNode("b", 8, {{"zone", "a"}})},
       Cpu(1, {{"zone", "!b"}}), SinglePlacement{"b", 0}},
      {"first fallback that fits wins",
       {CpuNode("a", 8, {{"zone", "a"}}, 8), CpuNode("b", 8, {{"zone", "b"}}, 7), CpuNode("c", 8, {{"zone", "c"}})},
       with_fallback, SinglePlacement{"c", 2}},
      {"busy now: pending",
       {CpuNode("a", 8, {}, 7), CpuNode("b", 4, {}, 3), CpuNode("c", 1)}, Cpu(2),
       Pending{"no alive node has {\"CPU\": 2} free now; 2 nodes could hold it once free"}},
      {"busy TPU chips: pending", {TpuHost("t1")}, tpu2,
       Pending{"no alive node has {\"CPU\": 1, \"TPU\": 2} free now; 1 node could hold it once free"},
       {{"t1", {0, 3}}}},
      {"too large for any node: infeasible", {CpuNode("a", 8), CpuNode("b", 4)}, Cpu(16),
       Infeasible{"no alive node is large enough for {\"CPU\": 16}"}},
      {"nothing matches: infeasible", {CpuNode("a", 8)}, Cpu(1, {{"zone", "a"}}),
       Infeasible{"no alive node matches {\"zone\": \"a\"}"}},
      {"empty cluster: infeasible", {}, Cpu(1), Infeasible{"no alive node"}},
      {"TPU work on a cluster without TPU: infeasible", {CpuNode("a", 8)}, tpu2,
       Infeasible{"no alive node is large enough for {\"CPU\": 1, \"TPU\": 2}"}},
      {"one pending alternative makes the whole pending",
       {CpuNode("a", 8, {{"zone", "a"}}, 7)}, fallback_nowhere,
       Pending{"no alive node matching {\"zone\": \"a\"} has {\"CPU\": 2} free now; 1 matching node could hold it "
               "once free\nfallback 1: no alive node matches {\"zone\": \"zz\"}"}},
  };
  for (const Case& c : cases) {
    SingleOutcome got = PlaceSingle(Index(c.nodes, {}, c.busy_chips), c.request);
    EXPECT_EQ(got, c.expected) << c.name << ": got " << Describe(got);
  }
}

TEST(PlaceSingleTest, ThresholdZeroAlwaysSpreadsToTheLeastUtilised) {
  SingleRequest r = Cpu(1);
  r.spread_threshold = 0;
  EXPECT_EQ(PlaceSingle(Index({CpuNode("a", 8, {}, 1), CpuNode("b", 8)}), r), SingleOutcome(SinglePlacement{"b", 0}));
  r.spread_threshold = 1;
  EXPECT_EQ(PlaceSingle(Index({CpuNode("a", 8, {}, 7), CpuNode("b", 8)}), r), SingleOutcome(SinglePlacement{"a", 0}));
}

TEST(PlaceSingleTest, UtilisationCountsResourcesTheRequestDoesNotTouch) {
  NodeSnapshot a = CpuNode("a", 8);
  a.available.Set("memory", 0.1 * (1 << 30));  // memory 90% used
  EXPECT_EQ(PlaceSingle(Index({a, CpuNode("b", 8)}), Cpu(1)), SingleOutcome(SinglePlacement{"b", 0}));
}

TEST(PlaceSingleTest, SameInputSameOutputWhateverTheNodeOrder) {
  std::vector<NodeSnapshot> nodes;
  for (int i = 0; i < 40; ++i) {
    nodes.push_back(CpuNode("n" + std::to_string(i), 8, {{"zone", i % 3 ? "a" : "b"}}, (i * 7) % 9));
  }
  for (const SingleRequest& r : {Cpu(1), Cpu(3, {{"zone", "b"}}), Cpu(8)}) {
    SingleOutcome first = PlaceSingle(Index(nodes), r);
    for (unsigned seed = 1; seed <= 8; ++seed) {
      EXPECT_EQ(PlaceSingle(Index(testing::Shuffled(nodes, seed)), r), first) << Describe(first);
    }
  }
}

TEST(ValidateSingleRequestTest, Table) {
  struct Case {
    double tpu;
    double threshold;
    std::string error;  // "" = OK
  };
  const std::vector<Case> cases = {
      {0, 0.5, ""},
      {1, 0.5, ""},
      {8, 0, ""},
      {3, 0.5, "TPU request of 3 chips is not supported; use 1, 2, 4 or 8 chips, or a whole host"},
      {0.5, 0.5,
       "TPU request of 0.5 chips is not supported; TPU is counted in whole chips; use 1, 2, 4 or 8 chips, or a "
       "whole host"},
      {16, 0.5, "TPU request of 16 chips is not supported; a host has at most 8 chips; use a slice group"},
      {1, 1.5, "spread_threshold 1.5 is outside the accepted range 0..1"},
      {1, -0.1, "spread_threshold -0.1 is outside the accepted range 0..1"},
  };
  for (const Case& c : cases) {
    SingleRequest r;
    r.resources = Res({{"CPU", 1}, {"TPU", c.tpu}});
    r.spread_threshold = c.threshold;
    absl::Status s = ValidateSingleRequest(r);
    if (c.error.empty()) {
      EXPECT_TRUE(s.ok()) << c.tpu << ": " << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(s.message(), c.error);
    }
  }
}

}  // namespace single_policy_test
}  // namespace torus::sched
