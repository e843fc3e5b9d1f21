#include "torus/head/autoscaler/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "torus/head/placement/placement_test_util.h"

namespace torus::head {
namespace {

using autoscale::CapacityClass;
using test_util::ApplyAll;
using test_util::Res;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr char kConfig[] = R"(
provider: {type: local, session: /s}
failure_backoff_s: 300
node_types:
  - name: v6e
    tpu: {pod_type: v6e-16, topology: 4x4}
    max_slices: 4
    idle_timeout_s: 60
    capacity_classes:
      - {class: spot, provisioning_timeout_s: 10}
      - {class: flex-start, provisioning_timeout_s: 120}
)";

std::string Launches(const ScalingPlan& plan) {
  std::vector<std::string> out;
  for (const SliceLaunch& l : plan.launches) {
    out.push_back(absl::StrCat(l.slice, " ", l.node_type, " ", std::string(autoscale::CapacityClassName(l.capacity_class))));
  }
  return absl::StrJoin(out, "; ");
}

std::string Removals(const ScalingPlan& plan) {
  std::vector<std::string> out;
  for (const SliceRemoval& r : plan.removals) out.push_back(absl::StrCat(r.slice, ": ", r.why));
  return absl::StrJoin(out, "; ");
}

class PlanScalingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Configure(kConfig);
    ApplyAll(state_, {HeadStarted{1, 900}});
  }
  void Configure(const std::string& text) {
    auto config = autoscale::ParseAutoscalerConfig(text);
    ASSERT_TRUE(config.ok()) << config.status();
    config_ = *config;
  }
  void Register(const std::vector<NodeRegistration>& hosts) { ApplyAll(state_, test_util::Registrations(hosts)); }
  // The hosts of slice `name` of node type `type` as their agents register them.
  void RegisterSlice(const std::string& name, const std::string& type = "v6e",
                     CapacityClass c = CapacityClass::kSpot) {
    std::vector<NodeRegistration> hosts;
    for (const autoscale::HostPlan& h : autoscale::SliceHosts(*config_.Find(type), name, c)) {
      hosts.push_back(test_util::Host(h.name, h.resources, h.labels));
    }
    Register(hosts);
  }
  void Submit(const Group& g) { ApplyAll(state_, {GroupSubmitted{g}}); }
  ScaledSlice Slice(const std::string& name, ScaledSlice::Phase phase, CapacityClass c = CapacityClass::kSpot,
                    int64_t launched_ms = 0, int64_t idle_since_ms = 0, const std::string& type = "v6e") {
    return ScaledSlice{.name = name,
                       .node_type = type,
                       .capacity_class = c,
                       .phase = phase,
                       .launched_ms = launched_ms,
                       .idle_since_ms = idle_since_ms};
  }
  ScalingPlan Plan(int64_t now_ms) {
    ScalingInput in;
    in.config = &config_;
    in.cluster = BuildPassInput(state_, [](const sched::NodeSnapshot&) { return true; });
    for (const GroupId& id : state_.waiting_groups()) in.waiting.push_back(*state_.FindGroup(id));
    std::sort(in.waiting.begin(), in.waiting.end(), [](const Group& a, const Group& b) { return a.seq < b.seq; });
    for (const auto& [id, w] : state_.workers()) {
      if (w.phase != WorkerPhase::kExited) in.running_workers.insert(w.node);
    }
    in.slices = slices_;
    in.failures = failures_;
    in.now_ms = now_ms;
    in.new_slice_name = [this](const autoscale::NodeType& t) { return absl::StrCat(t.name, "-n", ++names_); };
    return PlanScaling(in);
  }

  autoscale::AutoscalerConfig config_;
  ClusterState state_;
  std::vector<ScaledSlice> slices_;
  std::vector<ClassFailure> failures_;
  int names_ = 0;
};

TEST_F(PlanScalingTest, AnEmptyPoolLaunchesWholeSlicesOfTheFirstClassForAWaitingGroup) {
  Submit(test_util::NewSliceGroup("pg-a", test_util::SliceReq("4x4", 2)));
  ScalingPlan plan = Plan(1000);
  EXPECT_EQ(Launches(plan), "v6e-n1 v6e spot; v6e-n2 v6e spot");
  EXPECT_EQ(plan.notes.at(GroupId("pg-a")), "autoscaler: launching slices v6e-n1, v6e-n2 (TPU-V6E 4x4, spot)");
  EXPECT_THAT(plan.removals, IsEmpty());
}

TEST_F(PlanScalingTest, SlicesBeingLaunchedCoverTheGroupAndAreNotLaunchedAgain) {
  Submit(test_util::NewSliceGroup("pg-a", test_util::SliceReq("4x4", 2)));
  slices_ = {Slice("v6e-a", ScaledSlice::Phase::kProvisioning), Slice("v6e-b", ScaledSlice::Phase::kProvisioning)};
  ScalingPlan plan = Plan(5000);
  EXPECT_EQ(Launches(plan), "");
  EXPECT_EQ(plan.notes.at(GroupId("pg-a")),
            "autoscaler: waiting for slices v6e-a (TPU-V6E 4x4, spot), v6e-b (TPU-V6E 4x4, spot) to start");
  EXPECT_THAT(plan.removals, IsEmpty());
}

TEST_F(PlanScalingTest, ASliceWhoseHostsAllRegisteredIsRunningAndAPartOneIsStillProvisioning) {
  slices_ = {Slice("v6e-a", ScaledSlice::Phase::kProvisioning), Slice("v6e-b", ScaledSlice::Phase::kProvisioning)};
  RegisterSlice("v6e-a");
  std::vector<NodeRegistration> part;
  for (const autoscale::HostPlan& h : autoscale::SliceHosts(*config_.Find("v6e"), "v6e-b", CapacityClass::kSpot)) {
    if (h.worker_id < 3) part.push_back(test_util::Host(h.name, h.resources, h.labels));
  }
  Register(part);
  ScalingPlan plan = Plan(5000);
  EXPECT_THAT(plan.now_running, ElementsAre("v6e-a"));
}

TEST_F(PlanScalingTest, AProvisioningTimeoutRemovesTheSlicesAndFallsBackToTheNextClass) {
  Submit(test_util::NewSliceGroup("pg-a", test_util::SliceReq("4x4", 2)));
  slices_ = {Slice("v6e-a", ScaledSlice::Phase::kProvisioning), Slice("v6e-b", ScaledSlice::Phase::kProvisioning)};
  ScalingPlan plan = Plan(10'000);
  EXPECT_EQ(Removals(plan), "v6e-a: no capacity within 10 s; v6e-b: no capacity within 10 s");
  ASSERT_EQ(plan.new_failures.size(), 1u);  // one failure of the class, not one per slice
  EXPECT_EQ(plan.new_failures[0].capacity_class, CapacityClass::kSpot);
  EXPECT_EQ(plan.new_failures[0].until_ms, 310'000);
  EXPECT_EQ(Launches(plan), "v6e-n1 v6e flex-start; v6e-n2 v6e flex-start");
  EXPECT_EQ(plan.notes.at(GroupId("pg-a")),
            "autoscaler: launching slices v6e-n1, v6e-n2 (TPU-V6E 4x4, flex-start); spot: no capacity within 10 s");
}

TEST_F(PlanScalingTest, AFailedClassIsSkippedUntilItsBackOffEnds) {
  Submit(test_util::NewSliceGroup("pg-a", test_util::SliceReq("4x4", 1)));
  failures_ = {{"v6e", CapacityClass::kSpot, "quota exceeded", 0, 300'000}};
  EXPECT_EQ(Launches(Plan(299'999)), "v6e-n1 v6e flex-start");
  EXPECT_EQ(Launches(Plan(300'000)), "v6e-n2 v6e spot");
}

TEST_F(PlanScalingTest, WhenEveryClassFailedTheNoteSaysSoAndNothingLaunches) {
  Submit(test_util::NewSliceGroup("pg-a", test_util::SliceReq("4x4", 1)));
  failures_ = {{"v6e", CapacityClass::kSpot, "no capacity within 10 s", 0, 300'000},
               {"v6e", CapacityClass::kFlexStart, "quota exceeded", 0, 300'000}};
  ScalingPlan plan = Plan(1000);
  EXPECT_EQ(Launches(plan), "");
  EXPECT_EQ(plan.notes.at(GroupId("pg-a")),
            "autoscaler: cannot launch for it: every capacity class of v6e failed lately (spot: no capacity within "
            "10 s; flex-start: quota exceeded); each is tried again 300 s after it failed");
}

TEST_F(PlanScalingTest, NeverMoreThanMaxSlicesLaunchingOnesIncluded) {
  Submit(test_util::NewSliceGroup("pg-a", test_util::SliceReq("4x4", 3)));
  slices_ = {Slice("v6e-a", ScaledSlice::Phase::kProvisioning), Slice("v6e-b", ScaledSlice::Phase::kProvisioning)};
  Configure(std::string(kConfig).replace(std::string(kConfig).find("max_slices: 4"), 13, "max_slices: 2"));
  ScalingPlan plan = Plan(1000);
  EXPECT_EQ(Launches(plan), "");
  EXPECT_EQ(plan.notes.at(GroupId("pg-a")), "autoscaler: cannot launch for it: v6e is at max_slices (2)");
}

TEST_F(PlanScalingTest, AShapeNoNodeTypeHasLaunchesNothing) {
  sched::SliceGroupRequest request = test_util::SliceReq("4x4", 1);
  request.primary.generation = TpuGeneration::kV5p;
  request.primary.topology = *ParseTopology(TpuGeneration::kV5p, "2x2x2");
  Submit(test_util::NewSliceGroup("pg-a", request));
  ScalingPlan plan = Plan(1000);
  EXPECT_EQ(Launches(plan), "");
  EXPECT_EQ(plan.notes.at(GroupId("pg-a")), "autoscaler: no node type can hold it");
}

TEST_F(PlanScalingTest, TheNodeTypeOfThePrimaryShapeWinsOverTheFallbacks) {
  Configure(std::string(kConfig) + R"(
  - name: v6e-big
    tpu: {pod_type: v6e-32, topology: 4x8}
)");
  sched::SliceGroupRequest request = test_util::SliceReq("4x8", 1);
  request.fallbacks.push_back(test_util::V6eShape("4x4", 2));
  Submit(test_util::NewSliceGroup("pg-a", request));
  EXPECT_EQ(Launches(Plan(1000)), "v6e-big-n1 v6e-big on-demand");
  // With the primary's only class failed, the fallback shape is launched.
  failures_ = {{"v6e-big", CapacityClass::kOnDemand, "quota exceeded", 0, 300'000}};
  EXPECT_EQ(Launches(Plan(1000)), "v6e-n2 v6e spot; v6e-n3 v6e spot");
}

TEST_F(PlanScalingTest, ASelectorOnTheMarketTypePicksThatClass) {
  sched::SliceGroupRequest request = test_util::SliceReq("4x4", 1);
  auto selector = LabelSelector::Parse({{"torus.io/market-type", "flex-start"}});
  ASSERT_TRUE(selector.ok()) << selector.status();
  request.primary.selector = *selector;
  Submit(test_util::NewSliceGroup("pg-a", request));
  EXPECT_EQ(Launches(Plan(1000)), "v6e-n1 v6e flex-start");
}

TEST_F(PlanScalingTest, EachWaitingGroupGetsItsOwnSlices) {
  Submit(test_util::NewSliceGroup("pg-a", test_util::SliceReq("4x4", 2), 1));
  Submit(test_util::NewSliceGroup("pg-b", test_util::SliceReq("4x4", 1), 2));
  EXPECT_EQ(Launches(Plan(1000)), "v6e-n1 v6e spot; v6e-n2 v6e spot; v6e-n3 v6e spot");
}

TEST_F(PlanScalingTest, ABundleGroupAskingForChipsGetsASlice) {
  Submit(test_util::NewBundleGroup("job-1", test_util::BundleReq(sched::Strategy::kPack, {Res({{"TPU", 4}})})));
  ScalingPlan plan = Plan(1000);
  EXPECT_EQ(Launches(plan), "v6e-n1 v6e spot");
  EXPECT_EQ(plan.notes.at(GroupId("job-1")), "autoscaler: launching slice v6e-n1 (TPU-V6E 4x4, spot)");
}

TEST_F(PlanScalingTest, AnIdleSliceIsRemovedAfterTheIdleTimeoutButNotBelowMinSlices) {
  RegisterSlice("v6e-a");
  slices_ = {Slice("v6e-a", ScaledSlice::Phase::kRunning, CapacityClass::kSpot, 0, /*idle_since_ms=*/0)};
  ScalingPlan first = Plan(1000);
  EXPECT_EQ(first.idle_since.at("v6e-a"), 1000);  // idle from now on
  EXPECT_EQ(Removals(first), "");
  slices_[0].idle_since_ms = 1000;
  EXPECT_EQ(Removals(Plan(60'999)), "");
  EXPECT_EQ(Removals(Plan(61'000)), "v6e-a: idle for 60 s");
  Configure(std::string(kConfig).replace(std::string(kConfig).find("max_slices: 4"), 13,
                                         "max_slices: 4\n    min_slices: 1"));
  EXPECT_EQ(Removals(Plan(61'000)), "");
}

TEST_F(PlanScalingTest, ASliceHoldingABundleIsNotIdle) {
  RegisterSlice("v6e-a");
  slices_ = {Slice("v6e-a", ScaledSlice::Phase::kRunning, CapacityClass::kSpot, 0, /*idle_since_ms=*/1)};
  Submit(test_util::NewSliceGroup("pg-a", test_util::SliceReq("4x4", 1)));
  ApplyAll(state_, {GroupPlaced{.group = GroupId("pg-a"),
                                .bundles = test_util::SliceBundles("pg-a", "v6e-a", 0),
                                .slices = {"v6e-a"},
                                .wall_ms = 1000}});
  ScalingPlan held = Plan(100'000);
  EXPECT_EQ(Removals(held), "");
  EXPECT_FALSE(held.idle_since.count("v6e-a"));
}

TEST_F(PlanScalingTest, ASliceRunningAWorkerOutsideAnyGroupIsNotIdle) {
  RegisterSlice("v6e-a");
  slices_ = {Slice("v6e-a", ScaledSlice::Phase::kRunning, CapacityClass::kSpot, 0, /*idle_since_ms=*/1)};
  Worker w;
  w.id = WorkerId("job-1-w");
  w.node = NodeId("v6e-a-w2");
  ApplyAll(state_, {WorkerStarting{w}});
  ScalingPlan plan = Plan(100'000);
  EXPECT_EQ(Removals(plan), "");
  EXPECT_FALSE(plan.idle_since.count("v6e-a"));
}

TEST_F(PlanScalingTest, AnIdleSliceAWaitingGroupWillUseIsKept) {
  RegisterSlice("v6e-a");
  slices_ = {Slice("v6e-a", ScaledSlice::Phase::kRunning, CapacityClass::kSpot, 0, /*idle_since_ms=*/1)};
  Submit(test_util::NewSliceGroup("pg-a", test_util::SliceReq("4x4", 1)));
  ScalingPlan plan = Plan(100'000);
  EXPECT_EQ(Removals(plan), "");
  EXPECT_EQ(Launches(plan), "");
  EXPECT_FALSE(plan.notes.count(GroupId("pg-a")));  // the scheduler places it; nothing to launch
}

TEST_F(PlanScalingTest, ARunningSliceThatLostAHostIsRemovedWholeAndItsGroupGetsANewOne) {
  RegisterSlice("v6e-a");
  slices_ = {Slice("v6e-a", ScaledSlice::Phase::kRunning)};
  Submit(test_util::NewSliceGroup("pg-a", test_util::SliceReq("4x4", 1)));
  ApplyAll(state_, {GroupPlaced{.group = GroupId("pg-a"),
                                .bundles = test_util::SliceBundles("pg-a", "v6e-a", 0),
                                .slices = {"v6e-a"},
                                .wall_ms = 1000}});
  EXPECT_EQ(Removals(Plan(2000)), "");
  const Node& w2 = *state_.FindNode(NodeId("v6e-a-w2"));
  ApplyAll(state_, {NodeDied{NodeId("v6e-a-w2"), w2.incarnation, "no heartbeat", 3000},
                    GroupBundlesLost{.group = GroupId("pg-a"), .dropped_slices = {"v6e-a"}, .wall_ms = 3000}});
  ScalingPlan plan = Plan(4000);
  EXPECT_EQ(Removals(plan), "v6e-a: host v6e-a-w2 was lost; the slice is replaced whole");
  EXPECT_EQ(Launches(plan), "v6e-n1 v6e spot");
  EXPECT_THAT(plan.new_failures, IsEmpty());  // a loss is not a class that failed to provision
}

TEST_F(PlanScalingTest, MinSlicesAreLaunchedWithoutDemand) {
  Configure(std::string(kConfig).replace(std::string(kConfig).find("max_slices: 4"), 13,
                                         "max_slices: 4\n    min_slices: 2"));
  slices_ = {Slice("v6e-a", ScaledSlice::Phase::kProvisioning)};
  ScalingPlan plan = Plan(1000);
  ASSERT_EQ(plan.launches.size(), 1u);
  EXPECT_EQ(plan.launches[0].why, "min_slices 2");
}

TEST_F(PlanScalingTest, ASliceOfANodeTypeNoLongerConfiguredIsRemoved) {
  slices_ = {Slice("old-a", ScaledSlice::Phase::kRunning, CapacityClass::kSpot, 0, 0, "old")};
  EXPECT_EQ(Removals(Plan(1000)), "old-a: node type old is no longer configured");
}

}  // namespace
}  // namespace torus::head
