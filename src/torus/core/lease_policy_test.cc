// The lease policy: how many requests a queue sends (slow start, enough to finish the queue before a new worker would
// start) and which candidate each goes to (in order up to each node's room; turns for SPREAD and bundles).
#include "torus/core/lease_policy.h"

#include "gtest/gtest.h"

namespace torus::core {
namespace lease_policy_test {

TEST(LeasesToRequestTest, NothingWhileTheLeasesHeldAndAskedForTakeTheQueue) {
  EXPECT_EQ(LeasesToRequest({.queued = 0}), 0);
  EXPECT_EQ(LeasesToRequest({.queued = 5, .spare = 5, .held = 1}), 0);
  EXPECT_EQ(LeasesToRequest({.queued = 5, .spare = 3, .held = 4, .requested = 2}), 0);
}

TEST(LeasesToRequestTest, StartsWithOneAndGrowsWithTheLeasesGranted) {
  // A deep queue of tasks whose time is unknown: one request first, then as many in flight as leases held.
  EXPECT_EQ(LeasesToRequest({.queued = 10'000}), 1);
  EXPECT_EQ(LeasesToRequest({.queued = 10'000, .requested = 1}), 0);
  EXPECT_EQ(LeasesToRequest({.queued = 10'000, .held = 1}), 1);
  EXPECT_EQ(LeasesToRequest({.queued = 10'000, .held = 2}), 2);
  EXPECT_EQ(LeasesToRequest({.queued = 10'000, .held = 8, .requested = 3}), 5);
  EXPECT_EQ(LeasesToRequest({.queued = 10'000, .held = 40, .max_requests = 16}), 16);
  EXPECT_EQ(LeasesToRequest({.queued = 3, .held = 8}), 3) << "never more than the tasks waiting";
}

TEST(LeasesToRequestTest, NoNewWorkerWhenTheLeasesHeldFinishTheQueueBeforeItWouldStart) {
  // The header's example: 0.1 ms tasks, grants of 300 ms.
  const LeaseDemand two{.queued = 9'000, .held = 2, .task_ms = 0.1, .grant_ms = 300};
  EXPECT_EQ(LeasesToRequest(two), 2) << "9,000 x 0.1 ms over 2 leases is 450 ms: more than a grant";
  const LeaseDemand four{.queued = 9'000, .held = 4, .task_ms = 0.1, .grant_ms = 300};
  EXPECT_EQ(LeasesToRequest(four), 0) << "225 ms over 4 leases: done before a new worker would be";
  // Long tasks: the window grows as leases come.
  EXPECT_EQ(LeasesToRequest({.queued = 100, .held = 4, .task_ms = 10'000, .grant_ms = 300}), 4);
  // A grant not yet timed does not stop the window.
  EXPECT_EQ(LeasesToRequest({.queued = 9'000, .held = 4, .task_ms = 0.1}), 4);
}

TEST(WorkersFittingTest, TheFewestOfAnyResourceAskedFor) {
  EXPECT_EQ(WorkersFitting({{"CPU", 10'000}}, {{"CPU", 40'000}, {"memory", 1}}), 4);
  EXPECT_EQ(WorkersFitting({{"CPU", 10'000}, {"TPU", 40'000}}, {{"CPU", 80'000}, {"TPU", 40'000}}), 1);
  EXPECT_EQ(WorkersFitting({{"GPU", 10'000}}, {{"CPU", 80'000}}), 0);
  EXPECT_EQ(WorkersFitting({}, {{"CPU", 80'000}}), -1);
  EXPECT_EQ(WorkersFitting({{"CPU", 0}}, {{"CPU", 80'000}}), -1);
}

TEST(NextCandidateTest, FillsTheCandidatesInOrderThenTakesTurns) {
  size_t turn = 0;
  EXPECT_EQ(NextCandidate({2, 4, 4}, {0, 0, 0}, false, turn), 0u) << "the local agent first";
  EXPECT_EQ(NextCandidate({2, 4, 4}, {1, 0, 0}, false, turn), 0u);
  EXPECT_EQ(NextCandidate({2, 4, 4}, {2, 0, 0}, false, turn), 1u) << "then the next with room";
  EXPECT_EQ(NextCandidate({0, 4, 4}, {0, 0, 0}, false, turn), 1u) << "a busy agent has no room";
  EXPECT_EQ(NextCandidate({-1, 4}, {50, 0}, false, turn), 0u) << "unbounded room";
  EXPECT_EQ(turn, 0u);
  EXPECT_EQ(NextCandidate({2, 4, 4}, {2, 4, 4}, false, turn), 0u) << "all full: round robin";
  EXPECT_EQ(NextCandidate({2, 4, 4}, {2, 4, 4}, false, turn), 1u);
  EXPECT_EQ(turn, 2u);
  size_t spread = 0;
  EXPECT_EQ(NextCandidate({2, 4, 4}, {0, 0, 0}, true, spread), 0u) << "SPREAD takes turns from the start";
  EXPECT_EQ(NextCandidate({2, 4, 4}, {1, 0, 0}, true, spread), 1u);
  EXPECT_EQ(NextCandidate({2, 4, 4}, {1, 1, 0}, true, spread), 2u);
}

}  // namespace lease_policy_test
}  // namespace torus::core
