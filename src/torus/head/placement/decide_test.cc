#include "torus/head/placement/decide.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "torus/head/placement/placement_test_util.h"
#include "torus/sched/sched_test_util.h"

namespace torus::head {
namespace decide_test {

using sched::Strategy;
using test_util::ApplyAll;
using test_util::Bundle;
using test_util::Layout;
using test_util::Res;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

class DecideTest : public ::testing::Test {
 protected:
  void Register(const std::vector<NodeRegistration>& hosts) {
    ApplyAll(state_, {HeadStarted{1, 900}});
    ApplyAll(state_, test_util::Registrations(hosts));
  }
  // Submits `g` (PENDING) and returns it as the state holds it.
  Group Submit(const Group& g) {
    ApplyAll(state_, {GroupSubmitted{g}});
    return *state_.FindGroup(g.id);
  }
  void Place(const std::string& group, std::vector<HeldBundle> bundles, std::vector<std::string> slices = {}) {
    ApplyAll(state_, {GroupPlaced{.group = GroupId(group),
                                  .bundles = std::move(bundles),
                                  .slices = std::move(slices),
                                  .message = "placed",
                                  .wall_ms = 1000}});
  }
  // Another group, CREATED, holding `bundles`.
  void Other(const std::string& id, std::vector<HeldBundle> bundles, uint64_t seq = 90) {
    Submit(test_util::NewBundleGroup(id, test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}})}), seq));
    Place(id, std::move(bundles));
  }
  const Group& Current(const std::string& id) { return *state_.FindGroup(GroupId(id)); }
  PassInput Input() {
    return BuildPassInput(state_, [](const sched::NodeSnapshot&) { return true; });
  }
  // The decision (a copy, so that it outlives the outcome); an empty one, and a failure, when not placed.
  static Decision Decided(const DecideOutcome& outcome) {
    if (const auto* n = std::get_if<NotPlaced>(&outcome)) ADD_FAILURE() << "not placed: " << n->reason;
    const auto* d = std::get_if<Decision>(&outcome);
    return d == nullptr ? Decision{} : *d;
  }
  static std::string Reason(const DecideOutcome& outcome) {
    const auto* n = std::get_if<NotPlaced>(&outcome);
    return n == nullptr ? "placed: " + std::get<Decision>(outcome).message : n->reason;
  }

  ClusterState state_;
};

// ---- Devices of new bundles ----

struct ChipCase {
  std::string name;
  std::vector<int> held;  // chips another group holds on t1 (TPU amount = their count)
  int tpu = 0;
  std::vector<int> want;
};
void PrintTo(const ChipCase& c, std::ostream* os) { *os << c.name; }

class TpuBlockTest : public DecideTest, public ::testing::WithParamInterface<ChipCase> {};

TEST_P(TpuBlockTest, TpuBundleWithoutChipsGetsAnAlignedBlock) {
  const ChipCase& c = GetParam();
  Register({test_util::TpuHost("t1", 4)});
  if (!c.held.empty()) {
    Other("pg-other",
          {Bundle("pg-other", 0, "t1", Res({{"CPU", 1}, {"TPU", static_cast<double>(c.held.size())}}), c.held)});
  }
  const Group g = Submit(test_util::NewBundleGroup(
      "pg-a", test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}, {"TPU", static_cast<double>(c.tpu)}})})));
  PassInput input = Input();
  const Decision& d = Decided(Decide(g, input));
  ASSERT_EQ(d.fresh.size(), 1u);
  EXPECT_EQ(d.fresh[0].chips, c.want);
  EXPECT_EQ(d.bundles, d.fresh);
  EXPECT_EQ(d.fresh[0].node, NodeId("t1"));
  EXPECT_EQ(d.fresh[0].attempt, 0u);  // the scheduler numbers the reservation
  EXPECT_EQ(d.message, "placed 1 bundle on t1");
}

INSTANTIATE_TEST_SUITE_P(Blocks, TpuBlockTest,
                         ::testing::Values(ChipCase{"IdleHostOneChip", {}, 1, {0}},
                                           ChipCase{"IdleHostWhole", {}, 4, {0, 1, 2, 3}},
                                           ChipCase{"PairSkipsTheHalfWithABusyChip", {0}, 2, {2, 3}},
                                           ChipCase{"PairBelowABusyPair", {2, 3}, 2, {0, 1}},
                                           ChipCase{"OneChipIsTheLowestFree", {0, 1}, 1, {2}},
                                           // Three is no block size: the lowest free chips.
                                           ChipCase{"ThreeChipsTakeTheLowestFree", {1}, 3, {0, 2, 3}}),
                         [](const auto& info) { return info.param.name; });

struct GpuCase {
  std::string name;
  std::vector<int> held;  // GPU indices another group holds on g1
  int gpus = 0;
  std::vector<int> want;
};
void PrintTo(const GpuCase& c, std::ostream* os) { *os << c.name; }

class GpuIndexTest : public DecideTest, public ::testing::WithParamInterface<GpuCase> {};

TEST_P(GpuIndexTest, GpuBundlesGetTheLowestFreeIndices) {
  const GpuCase& c = GetParam();
  Register({test_util::GpuHost("g1", 4)});
  if (!c.held.empty()) {
    Other("pg-other",
          {Bundle("pg-other", 0, "g1", Res({{"CPU", 1}, {"GPU", static_cast<double>(c.held.size())}}), {}, c.held)});
  }
  const Group g = Submit(test_util::NewBundleGroup(
      "pg-a", test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}, {"GPU", static_cast<double>(c.gpus)}})})));
  PassInput input = Input();
  const Decision& d = Decided(Decide(g, input));
  ASSERT_EQ(d.fresh.size(), 1u);
  EXPECT_EQ(d.fresh[0].gpus, c.want);
  EXPECT_THAT(d.fresh[0].chips, IsEmpty());
}

INSTANTIATE_TEST_SUITE_P(Indices, GpuIndexTest,
                         ::testing::Values(GpuCase{"IdleHost", {}, 2, {0, 1}},
                                           GpuCase{"HeldByAnotherGroupAreSkipped", {0, 2}, 2, {1, 3}},
                                           GpuCase{"HoleBelowAHeldOne", {1}, 1, {0}},
                                           GpuCase{"LastFree", {0, 1, 2}, 1, {3}}),
                         [](const auto& info) { return info.param.name; });

// ---- What task leases hold (reported by agents, held by no group) ----

TEST_F(DecideTest, ChipsHeldByLeasesAreBusyAndTheirResourcesNotAvailable) {
  Register({test_util::TpuHost("t1", 4), test_util::TpuHost("t2", 4)});
  // t1's agent leases chips 0 and 1 to tasks: a pair goes to t1's free half; the whole host goes to t2.
  const std::map<NodeId, LeaseHoldings> leased = {
      {NodeId("t1"), LeaseHoldings{Res({{"CPU", 1}, {"TPU", 2}}), {0, 1}, {}}}};
  PassInput input = BuildPassInput(state_, [](const sched::NodeSnapshot&) { return true; }, leased);
  EXPECT_THAT(input.devices[NodeId("t1")].busy_chips, ElementsAre(0, 1));
  EXPECT_THAT(input.index.busy_chips["t1"], ElementsAre(0, 1));
  const Group pair = Submit(test_util::NewBundleGroup(
      "pg-pair", test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}, {"TPU", 2}})})));
  EXPECT_THAT(Layout(Decided(Decide(pair, input)).fresh), ElementsAre("0 t1 pg-pair:0 chips[2,3] gpus[]"));
  const Group whole = Submit(test_util::NewBundleGroup(
      "pg-whole", test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}, {"TPU", 4}})}), 2));
  EXPECT_THAT(Layout(Decided(Decide(whole, input)).fresh), ElementsAre("0 t2 pg-whole:0 chips[0,1,2,3] gpus[]"));
}

TEST_F(DecideTest, AGroupWaitsWhileLeasesHoldWhatItNeeds) {
  Register({test_util::TpuHost("t1", 4)});
  const std::map<NodeId, LeaseHoldings> leased = {{NodeId("t1"), LeaseHoldings{Res({{"TPU", 1}}), {3}, {}}}};
  PassInput input = BuildPassInput(state_, [](const sched::NodeSnapshot&) { return true; }, leased);
  const Group g = Submit(test_util::NewBundleGroup(
      "pg-a", test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}, {"TPU", 4}})})));
  const std::string reason = Reason(Decide(g, input));
  EXPECT_EQ(reason.rfind("placed", 0), std::string::npos) << reason;
  // Once the leases are gone it fits.
  PassInput freed = Input();
  EXPECT_THAT(Layout(Decided(Decide(g, freed)).fresh), ElementsAre("0 t1 pg-a:0 chips[0,1,2,3] gpus[]"));
}

TEST_F(DecideTest, GpusHeldByLeasesAreSkipped) {
  Register({test_util::GpuHost("g1", 4)});
  const std::map<NodeId, LeaseHoldings> leased = {{NodeId("g1"), LeaseHoldings{Res({{"GPU", 1}}), {}, {0}}}};
  PassInput input = BuildPassInput(state_, [](const sched::NodeSnapshot&) { return true; }, leased);
  const Group g = Submit(
      test_util::NewBundleGroup("pg-a", test_util::BundleReq(Strategy::kPack, {Res({{"GPU", 2}})})));
  EXPECT_THAT(Layout(Decided(Decide(g, input)).fresh), ElementsAre("0 g1 pg-a:0 chips[] gpus[1,2]"));
}

TEST_F(DecideTest, BundlesOfOneDecisionTakeDifferentGpus) {
  Register({test_util::GpuHost("g1", 4)});
  const Group g = Submit(
      test_util::NewBundleGroup("pg-a", test_util::BundleReq(Strategy::kPack, {Res({{"GPU", 1}}), Res({{"GPU", 2}})})));
  PassInput input = Input();
  const Decision& d = Decided(Decide(g, input));
  EXPECT_THAT(Layout(d.fresh), ElementsAre("0 g1 pg-a:0 chips[] gpus[0]", "1 g1 pg-a:1 chips[] gpus[1,2]"));
  EXPECT_EQ(d.message, "placed 2 bundles on g1");
}

TEST_F(DecideTest, PassInputHoldsEachDecisionForTheNextOne) {
  Register({test_util::GpuHost("g1", 4), test_util::TpuHost("t1", 4)});
  auto gpu_group = [](const std::string& id, uint64_t seq) {
    return test_util::NewBundleGroup(id, test_util::BundleReq(Strategy::kPack, {Res({{"GPU", 2}})}), seq);
  };
  auto tpu_group = [](const std::string& id, uint64_t seq) {
    return test_util::NewBundleGroup(id, test_util::BundleReq(Strategy::kPack, {Res({{"TPU", 2}})}), seq);
  };
  const Group a = Submit(gpu_group("pg-a", 1)), b = Submit(gpu_group("pg-b", 2)), c = Submit(gpu_group("pg-c", 3));
  const Group x = Submit(tpu_group("pg-x", 4)), y = Submit(tpu_group("pg-y", 5));
  PassInput input = Input();

  EXPECT_THAT(Layout(Decided(Decide(a, input)).fresh), ElementsAre("0 g1 pg-a:0 chips[] gpus[0,1]"));
  EXPECT_THAT(Layout(Decided(Decide(b, input)).fresh), ElementsAre("0 g1 pg-b:0 chips[] gpus[2,3]"));
  EXPECT_THAT(Layout(Decided(Decide(x, input)).fresh), ElementsAre("0 t1 pg-x:0 chips[0,1] gpus[]"));
  EXPECT_THAT(Layout(Decided(Decide(y, input)).fresh), ElementsAre("0 t1 pg-y:0 chips[2,3] gpus[]"));
  EXPECT_EQ(input.devices[NodeId("g1")].busy_gpus, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(input.devices[NodeId("t1")].busy_chips, (std::set<int>{0, 1, 2, 3}));
  // The GPUs of g1 are all held in this pass: a third group waits.
  EXPECT_TRUE(std::holds_alternative<NotPlaced>(Decide(c, input)));
}

// ---- Slice groups ----

TEST_F(DecideTest, SliceGroupGetsOneBundlePerHostInWorkerOrder) {
  std::vector<NodeRegistration> hosts;
  // Node ids that sort against worker order: worker 0 is "v6e-0-h3".
  test_util::Append(hosts, test_util::V6eSlice("v6e-0", {"v6e-0-h3", "v6e-0-h2", "v6e-0-h1", "v6e-0-h0"}));
  test_util::Append(hosts, test_util::V6eSlice("v6e-1"));
  test_util::Append(hosts, test_util::V6eSlice("v6e-2"));
  Register(hosts);
  const Group g = Submit(test_util::NewSliceGroup("pg-s", test_util::SliceReq("4x4", 2)));
  PassInput input = Input();
  const Decision& d = Decided(Decide(g, input));
  EXPECT_THAT(d.slices, ElementsAre("v6e-0", "v6e-1"));
  EXPECT_THAT(
      Layout(d.bundles),
      ElementsAre(
          "0 v6e-0-h3 pg-s/v6e-0:0 chips[0,1,2,3] gpus[] w0", "1 v6e-0-h2 pg-s/v6e-0:1 chips[0,1,2,3] gpus[] w1",
          "2 v6e-0-h1 pg-s/v6e-0:2 chips[0,1,2,3] gpus[] w2", "3 v6e-0-h0 pg-s/v6e-0:3 chips[0,1,2,3] gpus[] w3",
          "4 v6e-1-w0 pg-s/v6e-1:0 chips[0,1,2,3] gpus[] w0", "5 v6e-1-w1 pg-s/v6e-1:1 chips[0,1,2,3] gpus[] w1",
          "6 v6e-1-w2 pg-s/v6e-1:2 chips[0,1,2,3] gpus[] w2", "7 v6e-1-w3 pg-s/v6e-1:3 chips[0,1,2,3] gpus[] w3"));
  EXPECT_EQ(d.fresh.size(), 8u);
  EXPECT_THAT(d.moved, IsEmpty());
  EXPECT_EQ(d.message, "reserved slices v6e-0, v6e-1");
  EXPECT_EQ(d.fresh[0].resources, Res({{"CPU", 1}, {"TPU", 4}}));
  // Held in the pass: the slices and their chips.
  EXPECT_EQ(input.index.slice_holders["v6e-0"], "pg-s");
  EXPECT_EQ(input.index.slice_holders["v6e-1"], "pg-s");
  EXPECT_EQ(input.devices[NodeId("v6e-1-w3")].busy_chips, (std::set<int>{0, 1, 2, 3}));
  const Group next = Submit(test_util::NewSliceGroup("pg-t", test_util::SliceReq("4x4", 1), 2));
  EXPECT_THAT(Decided(Decide(next, input)).slices, ElementsAre("v6e-2"));
}

// ---- Rescheduling ----

TEST_F(DecideTest, BundleGroupWithALostBundlePlacesOnlyThatOne) {
  Register({test_util::CpuHost("c1"), test_util::CpuHost("c2"), test_util::CpuHost("c3")});
  Submit(test_util::NewBundleGroup("pg-a",
                                   test_util::BundleReq(Strategy::kSpread, {Res({{"CPU", 1}}), Res({{"CPU", 1}})})));
  Place("pg-a", {Bundle("pg-a", 0, "c1", Res({{"CPU", 1}}), {}, {}, 77),
                 Bundle("pg-a", 1, "c2", Res({{"CPU", 1}}), {}, {}, 77)});
  ApplyAll(state_,
           {NodeDied{NodeId("c2"), 2, "gone", 2000},
            GroupBundlesLost{.group = GroupId("pg-a"), .lost_indices = {1}, .message = "lost", .wall_ms = 2000}});
  PassInput input = Input();
  const Decision& d = Decided(Decide(Current("pg-a"), input));
  EXPECT_THAT(Layout(d.fresh), ElementsAre("1 c3 pg-a:1 chips[] gpus[]"));
  EXPECT_THAT(Layout(d.bundles), ElementsAre("0 c1 pg-a:0 chips[] gpus[] a77", "1 c3 pg-a:1 chips[] gpus[]"));
  EXPECT_THAT(d.moved, IsEmpty());
  EXPECT_EQ(d.message, "placed 1 bundle on c3");
}

TEST_F(DecideTest, StrictPackLostBundleJoinsItsSurvivorWhenTheNodeHoldsIt) {
  Register({test_util::CpuHost("c1", 8), test_util::CpuHost("c2", 16)});
  Submit(test_util::NewBundleGroup(
      "pg-a", test_util::BundleReq(Strategy::kStrictPack, {Res({{"CPU", 4}}), Res({{"CPU", 4}})})));
  Place("pg-a",
        {Bundle("pg-a", 0, "c1", Res({{"CPU", 4}}), {}, {}, 5), Bundle("pg-a", 1, "c1", Res({{"CPU", 4}}), {}, {}, 5)});
  ApplyAll(state_, {GroupBundlesLost{.group = GroupId("pg-a"), .lost_indices = {1}, .message = "lost"}});
  PassInput input = Input();
  const Decision& d = Decided(Decide(Current("pg-a"), input));
  EXPECT_THAT(Layout(d.fresh), ElementsAre("1 c1 pg-a:1 chips[] gpus[]"));
  EXPECT_THAT(d.moved, IsEmpty());
}

TEST_F(DecideTest, StrictPackMovingItsSurvivorsReportsThemMoved) {
  Register({test_util::CpuHost("c1", 8), test_util::CpuHost("c2", 16)});
  Submit(test_util::NewBundleGroup(
      "pg-a", test_util::BundleReq(Strategy::kStrictPack, {Res({{"CPU", 4}}), Res({{"CPU", 4}})})));
  Place("pg-a",
        {Bundle("pg-a", 0, "c1", Res({{"CPU", 4}}), {}, {}, 5), Bundle("pg-a", 1, "c1", Res({{"CPU", 4}}), {}, {}, 5)});
  ApplyAll(state_, {GroupBundlesLost{.group = GroupId("pg-a"), .lost_indices = {1}, .message = "lost"}});
  // Meanwhile another group takes what bundle 1 held on c1: the pair no longer fits there.
  Other("pg-other", {Bundle("pg-other", 0, "c1", Res({{"CPU", 4}}))});
  PassInput input = Input();
  const Decision& d = Decided(Decide(Current("pg-a"), input));
  EXPECT_THAT(Layout(d.fresh), ElementsAre("0 c2 pg-a:0 chips[] gpus[]", "1 c2 pg-a:1 chips[] gpus[]"));
  EXPECT_THAT(Layout(d.moved), ElementsAre("0 c1 pg-a:0 chips[] gpus[] a5"));
  EXPECT_EQ(Layout(d.bundles), Layout(d.fresh));
  EXPECT_EQ(d.message, "placed 2 bundles on c2");
}

class SliceRescheduleTest : public DecideTest {
 protected:
  // Slices v6e-0..2 (4x4) and a free 2x4 slice v6e8-0; pg-s (4x4 x2, fallback 2x4 x1) held v6e-0 and v6e-1 and
  // lost v6e-1 with its worker 2.
  void SetUp() override {
    std::vector<NodeRegistration> hosts;
    for (const char* s : {"v6e-0", "v6e-1", "v6e-2"}) test_util::Append(hosts, test_util::V6eSlice(s));
    test_util::Append(hosts, test_util::V6e8Slice("v6e8-0"));
    Register(hosts);
    sched::SliceGroupRequest request = test_util::SliceReq("4x4", 2);
    request.fallbacks.push_back(test_util::V6eShape("2x4", 1));
    Submit(test_util::NewSliceGroup("pg-s", request));
    std::vector<HeldBundle> held = test_util::SliceBundles("pg-s", "v6e-0", 0, 9);
    for (HeldBundle& b : test_util::SliceBundles("pg-s", "v6e-1", 4, 9)) held.push_back(b);
    Place("pg-s", held, {"v6e-0", "v6e-1"});
    const uint64_t w2 = state_.FindNode(NodeId("v6e-1-w2"))->incarnation;
    ApplyAll(state_, {NodeDied{NodeId("v6e-1-w2"), w2, "gone", 2000},
                      GroupBundlesLost{.group = GroupId("pg-s"), .dropped_slices = {"v6e-1"}, .message = "degraded"}});
  }
};

TEST_F(SliceRescheduleTest, KeepsItsHealthySliceAndGetsAReplacementOfTheSameShape) {
  PassInput input = Input();
  const Decision& d = Decided(Decide(Current("pg-s"), input));
  EXPECT_THAT(d.slices, ElementsAre("v6e-0", "v6e-2"));
  EXPECT_EQ(d.alternative, 0);
  EXPECT_THAT(
      Layout(d.bundles),
      ElementsAre(
          "0 v6e-0-w0 pg-s/v6e-0:0 chips[0,1,2,3] gpus[] w0 a9", "1 v6e-0-w1 pg-s/v6e-0:1 chips[0,1,2,3] gpus[] w1 a9",
          "2 v6e-0-w2 pg-s/v6e-0:2 chips[0,1,2,3] gpus[] w2 a9", "3 v6e-0-w3 pg-s/v6e-0:3 chips[0,1,2,3] gpus[] w3 a9",
          "4 v6e-2-w0 pg-s/v6e-2:0 chips[0,1,2,3] gpus[] w0", "5 v6e-2-w1 pg-s/v6e-2:1 chips[0,1,2,3] gpus[] w1",
          "6 v6e-2-w2 pg-s/v6e-2:2 chips[0,1,2,3] gpus[] w2", "7 v6e-2-w3 pg-s/v6e-2:3 chips[0,1,2,3] gpus[] w3"));
  ASSERT_EQ(d.fresh.size(), 4u);
  for (const HeldBundle& b : d.fresh) EXPECT_EQ(b.ledger_group, "pg-s/v6e-2");
  EXPECT_THAT(d.moved, IsEmpty());
  EXPECT_EQ(d.message, "reserved slices v6e-0, v6e-2");
}

TEST_F(SliceRescheduleTest, WaitsForTheSameShapeRatherThanTakingTheFallback) {
  Submit(test_util::NewSliceGroup("pg-other", test_util::SliceReq("4x4", 1), 2));
  Place("pg-other", test_util::SliceBundles("pg-other", "v6e-2", 0), {"v6e-2"});
  PassInput input = Input();
  const DecideOutcome outcome = Decide(Current("pg-s"), input);
  // One line, of the primary's shape: the fallback (2x4, free on v6e8-0) is not tried.
  EXPECT_EQ(Reason(outcome),
            "TPU-V6E 4x4 x2: 1 of 2 slices available (keeping v6e-0; v6e-1 DEGRADED: worker 2 dead (node v6e-1-w2); "
            "v6e-2 RESERVED by pg-other)");
  EXPECT_EQ(input.index.slice_holders.count("v6e8-0"), 0u);
}

// The index a pass decides against is built once and kept up to date by each decision: after a rescheduled group
// (its own holdings given back while it is decided, then taken again), a group that cannot be placed and a new one,
// it is the index a fresh build of the pass input makes.
TEST_F(SliceRescheduleTest, ThePassIndexIsKeptAsAFreshBuildOfThePassInputWouldBe) {
  Submit(test_util::NewBundleGroup("pg-cpu", test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}})}), 3));
  Submit(test_util::NewSliceGroup("pg-big", test_util::SliceReq("4x4", 3), 4));
  Submit(test_util::NewSliceGroup("pg-8", test_util::SliceReq("2x4", 1), 5));
  PassInput input = Input();
  const std::string at_start = sched::testing::DescribeIndex(input.Index());
  const sched::ClusterIndex first = input.Index();
  auto expect_fresh = [&](const std::string& step) {
    SCOPED_TRACE(step);
    ASSERT_TRUE(input.built.has_value());
    EXPECT_EQ(sched::testing::DescribeIndex(*input.built),
              sched::testing::DescribeIndex(sched::ClusterIndex::Build(input.index)));
  };
  EXPECT_THAT(Decided(Decide(Current("pg-s"), input)).slices, ElementsAre("v6e-0", "v6e-2"));
  expect_fresh("rescheduled pg-s");
  EXPECT_TRUE(std::holds_alternative<NotPlaced>(Decide(Current("pg-big"), input)));
  expect_fresh("pg-big not placed");
  EXPECT_THAT(Decided(Decide(Current("pg-8"), input)).slices, ElementsAre("v6e8-0"));
  expect_fresh("pg-8 placed");
  Decided(Decide(Current("pg-cpu"), input));
  expect_fresh("pg-cpu placed");
  // A copy taken before the decisions still describes the pass's start.
  EXPECT_EQ(sched::testing::DescribeIndex(first), at_start);
}

// The next pass starts from the last pass's index when the nodes are the same: what groups placed, released or
// rescheduled meanwhile is applied to it, and it is the index a fresh build would make. A node that died makes it
// build anew.
TEST_F(SliceRescheduleTest, TheNextPassUpdatesTheLastPassIndexWhileTheNodesAreTheSame) {
  PassInput last = Input();
  const std::string before = sched::testing::DescribeIndex(last.Index());
  // Meanwhile: pg-s is placed again (v6e-0 kept, v6e-2 taken) and removed, pg-new holds v6e-2, and another group
  // holds a CPU of v6e8-0's first host.
  const Decision d = Decided(Decide(Current("pg-s"), last));
  Place("pg-s", d.bundles, d.slices);
  Submit(test_util::NewBundleGroup("pg-cpu", test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}})}), 3));
  Place("pg-cpu", {Bundle("pg-cpu", 0, "v6e8-0-w0", Res({{"CPU", 1}}))});
  ApplyAll(state_, {GroupEnded{.group = GroupId("pg-s"), .message = "removed", .wall_ms = 3000}});
  Submit(test_util::NewSliceGroup("pg-new", test_util::SliceReq("4x4", 1), 4));
  Place("pg-new", test_util::SliceBundles("pg-new", "v6e-2", 0), {"v6e-2"});

  PassInput next = BuildPassInput(state_, [](const sched::NodeSnapshot&) { return true; }, {}, &last);
  ASSERT_TRUE(next.built.has_value());
  // The labels taken from the last pass's input are the nodes' labels.
  const PassInput copied = Input();
  ASSERT_EQ(next.index.nodes.size(), copied.index.nodes.size());
  for (size_t i = 0; i < copied.index.nodes.size(); ++i) {
    EXPECT_EQ(next.index.nodes[i].labels, copied.index.nodes[i].labels) << copied.index.nodes[i].node_id;
    EXPECT_EQ(next.index.nodes[i].available, copied.index.nodes[i].available) << copied.index.nodes[i].node_id;
  }
  const std::string updated = sched::testing::DescribeIndex(*next.built);
  EXPECT_NE(updated, before);
  EXPECT_EQ(updated, sched::testing::DescribeIndex(sched::ClusterIndex::Build(next.index)));

  // A node died: the nodes differ, and the pass builds its own index.
  const uint64_t w0 = state_.FindNode(NodeId("v6e-2-w0"))->incarnation;
  ApplyAll(state_, {NodeDied{NodeId("v6e-2-w0"), w0, "gone", 4000}});
  PassInput after_death = BuildPassInput(state_, [](const sched::NodeSnapshot&) { return true; }, {}, &next);
  EXPECT_FALSE(after_death.built.has_value());
}

// A kept slice whose hosts no longer match (they re-registered with other labels) makes the core choose every slice
// afresh; the old slice's bundles are in `moved`, to be released.
TEST_F(DecideTest, SliceGroupWhoseKeptSliceNoLongerFitsReleasesIt) {
  std::vector<NodeRegistration> hosts;
  for (const char* s : {"v6e-0", "v6e-1", "v6e-2", "v6e-3"}) test_util::Append(hosts, test_util::V6eSlice(s));
  for (NodeRegistration& h : hosts) h.labels["pool"] = "a";
  Register(hosts);
  sched::SliceGroupRequest request = test_util::SliceReq("4x4", 2);
  auto selector = LabelSelector::Parse(std::map<std::string, std::string>{{"pool", "a"}});
  ASSERT_TRUE(selector.ok()) << selector.status();
  request.primary.selector = *selector;
  Submit(test_util::NewSliceGroup("pg-s", request));
  std::vector<HeldBundle> held = test_util::SliceBundles("pg-s", "v6e-0", 0, 9);
  for (HeldBundle& b : test_util::SliceBundles("pg-s", "v6e-1", 4, 9)) held.push_back(b);
  Place("pg-s", held, {"v6e-0", "v6e-1"});
  // v6e-0's hosts re-register (same processes) relabelled; then v6e-1 degrades.
  std::vector<Record> relabelled;
  for (int w = 0; w < 4; ++w) {
    NodeRegistration h = hosts[static_cast<size_t>(w)];
    h.labels["pool"] = "b";
    relabelled.push_back(NodeRegistered{h, 100 + static_cast<uint64_t>(w), 3000});
  }
  ApplyAll(state_, relabelled);
  const uint64_t w2 = state_.FindNode(NodeId("v6e-1-w2"))->incarnation;
  ApplyAll(state_, {NodeDied{NodeId("v6e-1-w2"), w2, "gone", 4000},
                    GroupBundlesLost{.group = GroupId("pg-s"), .dropped_slices = {"v6e-1"}, .message = "degraded"}});
  PassInput input = Input();
  const Decision& d = Decided(Decide(Current("pg-s"), input));
  EXPECT_THAT(d.slices, ElementsAre("v6e-2", "v6e-3"));
  // v6e-0 is no longer the group's: its bundles must be given back once the new slices are reserved.
  EXPECT_THAT(Layout(d.moved), ElementsAre("0 v6e-0-w0 pg-s/v6e-0:0 chips[0,1,2,3] gpus[] w0 a9",
                                           "1 v6e-0-w1 pg-s/v6e-0:1 chips[0,1,2,3] gpus[] w1 a9",
                                           "2 v6e-0-w2 pg-s/v6e-0:2 chips[0,1,2,3] gpus[] w2 a9",
                                           "3 v6e-0-w3 pg-s/v6e-0:3 chips[0,1,2,3] gpus[] w3 a9"));
}

// ---- Not placed ----

TEST_F(DecideTest, NotPlacedReasons) {
  Register(
      {test_util::CpuHost("c1"), test_util::CpuHost("c2"), test_util::GpuHost("g2", 2), test_util::TpuHost("t1", 4)});
  struct Case {
    std::string name;
    sched::BundleRequest request;
    std::function<void(PassInput&)> tweak;
    std::string reason;
  };
  const std::vector<Case> cases = {
      // c2's CPUs are all held: 3 of the 4 nodes can take a bundle now, all 4 when idle.
      {"PendingFromTheCore",
       test_util::BundleReq(Strategy::kStrictSpread,
                            {Res({{"CPU", 1}}), Res({{"CPU", 1}}), Res({{"CPU", 1}}), Res({{"CPU", 1}})}),
       [](PassInput& in) {
         for (sched::NodeSnapshot& n : in.index.nodes) {
           if (n.node_id == "c2") n.available = ResourceSet();
         }
       },
       "STRICT_SPREAD 4 bundles: at most 3 of the 4 bundles fit on distinct nodes now"},
      {"InfeasibleFromTheCore", test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 64}})}), nullptr,
       "infeasible for now: PACK 1 bundle: bundle 0 {\"CPU\": 64}: no alive node has room for it, even with every node "
       "idle"},
      // The accounting holds both GPUs of g2 (devices the resources do not show): the core's choice cannot be given
      // its devices.
      {"GpusHeld", test_util::BundleReq(Strategy::kPack, {Res({{"GPU", 2}})}),
       [](PassInput& in) {
         in.devices[NodeId("g2")].busy_gpus = {0, 1};
       },
       "node g2 has no 2 free GPUs (2 of 2 are held)"},
      {"ChipsHeld", test_util::BundleReq(Strategy::kPack, {Res({{"TPU", 3}})}),
       [](PassInput& in) {
         in.devices[NodeId("t1")].busy_chips = {0, 1};
       },
       "node t1 has no 3 free TPU chips (2 of 4 are held)"},
  };
  uint64_t seq = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Group g = Submit(test_util::NewBundleGroup("pg-" + c.name, c.request, seq++));
    PassInput input = Input();
    if (c.tweak) c.tweak(input);
    const PassInput before = input;
    EXPECT_EQ(Reason(Decide(g, input)), c.reason);
    // Nothing of a group not placed is held in the pass.
    EXPECT_EQ(input.devices[NodeId("g2")].busy_gpus, before.devices.at(NodeId("g2")).busy_gpus);
    EXPECT_EQ(input.devices[NodeId("t1")].busy_chips, before.devices.at(NodeId("t1")).busy_chips);
    for (size_t i = 0; i < input.index.nodes.size(); ++i) {
      EXPECT_EQ(input.index.nodes[i].available, before.index.nodes[i].available) << input.index.nodes[i].node_id;
    }
  }
}

TEST_F(DecideTest, UnplaceableNodesAreNotPlacedOn) {
  Register({test_util::CpuHost("c1"), test_util::CpuHost("c2")});
  const Group g = Submit(test_util::NewBundleGroup("pg-a", test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}})})));
  PassInput input = BuildPassInput(state_, [](const sched::NodeSnapshot& n) { return n.node_id != "c1"; });
  EXPECT_THAT(Layout(Decided(Decide(g, input)).fresh), ElementsAre("0 c2 pg-a:0 chips[] gpus[]"));
}

}  // namespace decide_test
}  // namespace torus::head
