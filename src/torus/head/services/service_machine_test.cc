#include "torus/head/services/service_machine.h"

#include <gtest/gtest.h>

namespace torus::head::service_machine_test {

ReplicaFacts Replica(const std::string& id, int64_t version, bool ready, int in_flight = 0) {
  ReplicaFacts r;
  r.run = RunId(id);
  r.version = version;
  r.running = true;
  r.running_since_ms = 1000;
  r.ready = ready;
  r.in_flight = in_flight;
  return r;
}

ServiceFacts Facts(int target, std::vector<ReplicaFacts> replicas, int64_t version = 2) {
  ServiceFacts f;
  f.version = version;
  f.target = target;
  f.readiness_timeout_ms = 60'000;
  f.graceful_shutdown_timeout_ms = 10'000;
  f.replicas = std::move(replicas);
  return f;
}

TEST(ServiceMachine, SubmitsTheMissingReplicas) {
  EXPECT_EQ(DecideService(Facts(3, {Replica("a", 2, true)}), 2000).submit, 2);
  EXPECT_EQ(DecideService(Facts(1, {}), 2000).submit, 1);
  EXPECT_EQ(DecideService(Facts(1, {Replica("a", 2, false)}), 2000), ServiceStep{});
}

TEST(ServiceMachine, ScalingDownStopsStartingReplicasFirstThenDrainsTheLeastBusy) {
  ServiceStep step = DecideService(Facts(1, {Replica("a", 2, true, 5), Replica("b", 2, false), Replica("c", 2, true, 1)}), 2000);
  EXPECT_EQ(step.submit, 0);
  ASSERT_EQ(step.stop.size(), 1u);
  EXPECT_EQ(step.stop[0], (ReplicaStop{RunId("b"), "scaled down"}));
  EXPECT_EQ(step.drain, std::vector<RunId>{RunId("c")});
}

TEST(ServiceMachine, RollingUpdateKeepsOldReplicasUntilNewOnesAreReady) {
  // Version 2 deployed over two READY replicas of version 1: two new ones, the old ones stay.
  ServiceStep step = DecideService(Facts(2, {Replica("o1", 1, true), Replica("o2", 1, true)}), 2000);
  EXPECT_EQ(step.submit, 2);
  EXPECT_TRUE(step.drain.empty());
  EXPECT_TRUE(step.stop.empty());
  // One new replica READY: one old one drains.
  step = DecideService(
      Facts(2, {Replica("o1", 1, true, 3), Replica("o2", 1, true, 1), Replica("n1", 2, true), Replica("n2", 2, false)}),
      2000);
  EXPECT_EQ(step.submit, 0);
  EXPECT_EQ(step.drain, std::vector<RunId>{RunId("o2")});
  // Both READY: the other drains too.
  step = DecideService(Facts(2, {Replica("o1", 1, true), Replica("n1", 2, true), Replica("n2", 2, true)}), 2000);
  EXPECT_EQ(step.drain, std::vector<RunId>{RunId("o1")});
}

TEST(ServiceMachine, ANewReplicaWithNoRoomReleasesOneOldReplicaAfterTheSurgeWait) {
  // A cluster whose only slice the READY version-1 replica holds: version 2's replica waits for room.
  ReplicaFacts waiting = Replica("n1", 2, false);
  waiting.running = false;
  waiting.placed = false;
  waiting.running_since_ms = 0;
  waiting.submitted_ms = 5'000;
  ServiceFacts facts = Facts(1, {Replica("o1", 1, true, 2), waiting});
  facts.surge_wait_ms = 10'000;
  EXPECT_EQ(DecideService(facts, 14'999), ServiceStep{}) << "within the surge wait the old replica stays";
  facts.replicas[1].placed = true;
  EXPECT_EQ(DecideService(facts, 60'000), ServiceStep{}) << "a placed replica that is still starting has room";
  facts.replicas[1].placed = false;
  ServiceStep step = DecideService(facts, 15'000);
  EXPECT_EQ(step.drain, std::vector<RunId>{RunId("o1")});
  EXPECT_TRUE(step.stop.empty());
  EXPECT_EQ(step.submit, 0);

  // Two of each: one waits past the surge wait, one old replica is released (the one with fewer in flight).
  ReplicaFacts placed = Replica("n2", 2, false);
  facts = Facts(2, {Replica("o1", 1, true, 4), Replica("o2", 1, true, 1), waiting, placed});
  step = DecideService(facts, 20'000);
  EXPECT_EQ(step.drain, std::vector<RunId>{RunId("o2")});
  // Once it drains (or is being stopped) no second one goes for the same waiting replica.
  facts.replicas[1].draining = true;
  facts.replicas[1].in_flight = 1;
  facts.replicas[1].draining_since_ms = 20'000;
  EXPECT_EQ(DecideService(facts, 21'000), ServiceStep{});
  facts.replicas.erase(facts.replicas.begin() + 1);
  EXPECT_EQ(DecideService(facts, 22'000), ServiceStep{});
  // Both new replicas wait: the second old one goes too.
  facts.replicas[2].running = false;
  facts.replicas[2].placed = false;
  facts.replicas[2].submitted_ms = 5'000;
  step = DecideService(facts, 22'000);
  EXPECT_EQ(step.drain, std::vector<RunId>{RunId("o1")});
}

TEST(ServiceMachine, OldReplicasThatAreNotReadyStopAtOnce) {
  ServiceStep step = DecideService(Facts(1, {Replica("o1", 1, false), Replica("n1", 2, true)}), 2000);
  ASSERT_EQ(step.stop.size(), 1u);
  EXPECT_EQ(step.stop[0], (ReplicaStop{RunId("o1"), "replaced by a newer version"}));
}

TEST(ServiceMachine, DrainingReplicaStopsWhenIdleOrAfterTheGracePeriod) {
  ReplicaFacts busy = Replica("a", 2, false, 2);
  busy.draining = true;
  busy.draining_since_ms = 1000;
  ReplicaFacts idle = Replica("b", 2, false, 0);
  idle.draining = true;
  idle.draining_since_ms = 1000;
  ServiceStep step = DecideService(Facts(0, {busy, idle}), 5000);
  EXPECT_EQ(step.stop, (std::vector<ReplicaStop>{{RunId("b"), "drained"}}));
  step = DecideService(Facts(0, {busy}), 11'000);
  ASSERT_EQ(step.stop.size(), 1u);
  EXPECT_EQ(step.stop[0].reason, "graceful_shutdown_timeout_s passed with 2 requests in flight");
  // A draining replica does not count toward the target.
  EXPECT_EQ(DecideService(Facts(1, {busy}), 5000).submit, 1);
}

TEST(ServiceMachine, ReplicaNotReadyInTimeOrUnhealthyIsStopped) {
  ServiceStep step = DecideService(Facts(1, {Replica("a", 2, false)}), 61'000);
  ASSERT_EQ(step.stop.size(), 1u);
  EXPECT_EQ(step.stop[0].reason, "not READY within readiness_timeout_s (60 s)");
  EXPECT_EQ(step.submit, 1);  // and replaced
  ReplicaFacts pending = Replica("p", 2, false);
  pending.running = false;  // waiting for a slice: no readiness timeout
  EXPECT_EQ(DecideService(Facts(1, {pending}), 1'000'000), ServiceStep{});
  ReplicaFacts sick = Replica("s", 2, false);
  sick.unhealthy = true;
  step = DecideService(Facts(1, {sick}), 2000);
  EXPECT_EQ(step.stop, (std::vector<ReplicaStop>{{RunId("s"), "failed its health checks"}}));
  EXPECT_EQ(step.submit, 1);
}

TEST(ServiceMachine, DeletedServiceDrainsEveryReplica) {
  ServiceStep step = DecideService(Facts(0, {Replica("a", -1, true), Replica("b", -1, false)}, 0), 2000);
  EXPECT_EQ(step.drain, std::vector<RunId>{RunId("a")});
  EXPECT_EQ(step.stop.size(), 1u);
}

train::AutoscalingConfig Config() {
  train::AutoscalingConfig c;
  c.min_replicas = 0;
  c.max_replicas = 4;
  c.target_ongoing_requests = 2;
  c.upscale_delay_ms = 1000;
  c.downscale_delay_ms = 5000;
  return c;
}

TEST(ServiceAutoscale, WantedIsOngoingOverTargetWithinBounds) {
  EXPECT_EQ(WantedReplicas(Config(), 0), 0);
  EXPECT_EQ(WantedReplicas(Config(), 1), 1);
  EXPECT_EQ(WantedReplicas(Config(), 4), 2);
  EXPECT_EQ(WantedReplicas(Config(), 5), 3);
  EXPECT_EQ(WantedReplicas(Config(), 100), 4);
}

TEST(ServiceAutoscale, UpscaleAfterDelayDownscaleAfterItsDelayFromZeroAtOnce) {
  AutoscaleState s{.target = 1};
  s = Autoscale(Config(), s, 6, 10'000);
  EXPECT_EQ(s.target, 1);
  EXPECT_EQ(s.above_since_ms, 10'000);
  s = Autoscale(Config(), s, 6, 10'999);
  EXPECT_EQ(s.target, 1);
  s = Autoscale(Config(), s, 6, 11'000);
  EXPECT_EQ(s.target, 3);
  // Demand falls: down only after downscale_delay, and a dip back resets it.
  s = Autoscale(Config(), s, 0, 12'000);
  EXPECT_EQ(s.target, 3);
  s = Autoscale(Config(), s, 6, 13'000);
  EXPECT_EQ(s.below_since_ms, 0);
  s = Autoscale(Config(), s, 0, 14'000);
  s = Autoscale(Config(), s, 0, 18'999);
  EXPECT_EQ(s.target, 3);
  s = Autoscale(Config(), s, 0, 19'000);
  EXPECT_EQ(s.target, 0);
  // From zero replicas a waiting request scales up at once.
  s = Autoscale(Config(), s, 1, 20'000);
  EXPECT_EQ(s.target, 1);
}

}  // namespace torus::head::service_machine_test
