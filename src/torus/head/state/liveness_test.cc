#include "torus/head/state/liveness.h"

#include <gtest/gtest.h>

namespace torus::head {
namespace liveness_test {

using Beat = Liveness::Beat;

ResourceSet Cpu(double cpu) {
  ResourceSet r;
  r.Set("CPU", cpu);
  return r;
}

// "node:incarnation:silent_micros" per expired node.
std::vector<std::string> Describe(const std::vector<Liveness::Silent>& silent) {
  std::vector<std::string> out;
  for (const auto& s : silent) {
    out.push_back(s.node.str() + ":" + std::to_string(s.incarnation) + ":" + std::to_string(s.silent_micros));
  }
  return out;
}

class LivenessTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  Liveness liveness_{&clock_};
  const NodeId a_{"a"};
  const NodeId b_{"b"};
  const NodeId c_{"c"};
};

TEST_F(LivenessTest, RegisteredNodeHeartbeatsAsItsIncarnation) {
  liveness_.Registered(a_, 3, Cpu(8));
  EXPECT_TRUE(liveness_.Confirmed(a_));
  EXPECT_EQ(liveness_.SilentMicros(a_), 0);
  EXPECT_EQ(liveness_.ReportedAvailable(a_), Cpu(8));

  clock_.AdvanceMillis(400);
  EXPECT_EQ(liveness_.SilentMicros(a_), 400'000);
  EXPECT_EQ(liveness_.Heartbeat(a_, 3, nullptr), Beat::kOk);
  EXPECT_EQ(liveness_.SilentMicros(a_), 0);

  // Another incarnation (an agent restarted, or an old one still talking) must register again; it is not heard.
  clock_.AdvanceMillis(100);
  EXPECT_EQ(liveness_.Heartbeat(a_, 2, nullptr), Beat::kReregister);
  EXPECT_EQ(liveness_.Heartbeat(a_, 4, nullptr), Beat::kReregister);
  EXPECT_EQ(liveness_.SilentMicros(a_), 100'000);
  EXPECT_TRUE(liveness_.Confirmed(a_));

  // A node the table does not know registers first.
  EXPECT_EQ(liveness_.Heartbeat(b_, 1, nullptr), Beat::kReregister);
  EXPECT_FALSE(liveness_.Confirmed(b_));
  EXPECT_EQ(liveness_.SilentMicros(b_), std::nullopt);
  EXPECT_EQ(liveness_.ReportedAvailable(b_), std::nullopt);
}

TEST_F(LivenessTest, RestoredNodeMustRegisterAgain) {
  liveness_.Restored(a_, 5);
  EXPECT_FALSE(liveness_.Confirmed(a_));
  EXPECT_EQ(liveness_.SilentMicros(a_), 0);  // heard "now" at restore
  EXPECT_EQ(liveness_.ReportedAvailable(a_), std::nullopt);

  clock_.AdvanceMillis(300);
  const ResourceSet free = Cpu(2);
  EXPECT_EQ(liveness_.Heartbeat(a_, 5, &free), Beat::kReregister);
  EXPECT_EQ(liveness_.SilentMicros(a_), 300'000);  // unconfirmed heartbeats do not count
  EXPECT_EQ(liveness_.ReportedAvailable(a_), std::nullopt);

  liveness_.Registered(a_, 6, Cpu(4));
  EXPECT_TRUE(liveness_.Confirmed(a_));
  EXPECT_EQ(liveness_.Heartbeat(a_, 5, nullptr), Beat::kReregister);
  EXPECT_EQ(liveness_.Heartbeat(a_, 6, nullptr), Beat::kOk);

  // Restoring again (a new head replayed its journal) unconfirms it.
  liveness_.Restored(a_, 6);
  EXPECT_FALSE(liveness_.Confirmed(a_));
  EXPECT_EQ(liveness_.Heartbeat(a_, 6, nullptr), Beat::kReregister);
  EXPECT_EQ(liveness_.ReportedAvailable(a_), std::nullopt);
}

TEST_F(LivenessTest, ARestoredNodesSilenceCountsOnlyAfterItsAllowance) {
  liveness_.Restored(b_, 1, /*allowance_micros=*/2'000'000);
  clock_.AdvanceMillis(2'500);
  EXPECT_TRUE(liveness_.Expired(1'000'000).empty());  // silent 0.5 s past its allowance
  clock_.AdvanceMillis(600);
  EXPECT_EQ(Describe(liveness_.Expired(1'000'000)), (std::vector<std::string>{"b:1:1100000"}));
}

TEST_F(LivenessTest, ExpiredAfterStrictlyMoreThanTheTimeoutOrderedByNode) {
  constexpr int64_t kTimeout = 30'000'000;
  liveness_.Registered(c_, 3, {});
  liveness_.Restored(b_, 2);  // unconfirmed nodes expire too
  clock_.AdvanceMicros(1'000);
  liveness_.Registered(a_, 1, {});
  clock_.AdvanceMicros(kTimeout - 1'000);  // c and b silent exactly the timeout: not yet
  EXPECT_TRUE(liveness_.Expired(kTimeout).empty());

  clock_.AdvanceMicros(1);
  EXPECT_EQ(Describe(liveness_.Expired(kTimeout)), (std::vector<std::string>{"b:2:30000001", "c:3:30000001"}));
  EXPECT_EQ(liveness_.Heartbeat(c_, 3, nullptr), Beat::kOk);
  EXPECT_EQ(Describe(liveness_.Expired(kTimeout)), (std::vector<std::string>{"b:2:30000001"}));

  clock_.AdvanceMicros(1'000);
  EXPECT_EQ(Describe(liveness_.Expired(kTimeout)), (std::vector<std::string>{"a:1:30000001", "b:2:30001001"}));
  // Expired only reports; the caller decides.
  EXPECT_EQ(Describe(liveness_.Expired(kTimeout)).size(), 2u);
}

TEST_F(LivenessTest, ForgetDropsTheNodeOfThatIncarnation) {
  liveness_.Registered(a_, 1, Cpu(1));
  liveness_.Registered(b_, 2, Cpu(1));
  liveness_.Forget(a_, 1);
  liveness_.Forget(c_, 1);  // unknown: nothing happens
  EXPECT_FALSE(liveness_.Confirmed(a_));
  EXPECT_EQ(liveness_.SilentMicros(a_), std::nullopt);
  EXPECT_EQ(liveness_.ReportedAvailable(a_), std::nullopt);
  EXPECT_EQ(liveness_.Heartbeat(a_, 1, nullptr), Beat::kReregister);

  // b died as incarnation 1 but has registered since as 2: it stays.
  liveness_.Forget(b_, 1);
  EXPECT_TRUE(liveness_.Confirmed(b_));
  EXPECT_EQ(liveness_.Heartbeat(b_, 2, nullptr), Beat::kOk);
  clock_.AdvanceMillis(10);
  EXPECT_EQ(Describe(liveness_.Expired(0)), (std::vector<std::string>{"b:2:10000"}));
  liveness_.Forget(b_, 2);
  EXPECT_TRUE(liveness_.Expired(0).empty());
}

TEST_F(LivenessTest, ReportedAvailableChangesOnlyWhenAHeartbeatCarriesIt) {
  liveness_.Registered(a_, 1, Cpu(8));
  EXPECT_EQ(liveness_.Heartbeat(a_, 1, nullptr), Beat::kOk);
  EXPECT_EQ(liveness_.ReportedAvailable(a_), Cpu(8));
  const ResourceSet three = Cpu(3);
  EXPECT_EQ(liveness_.Heartbeat(a_, 1, &three), Beat::kOk);
  EXPECT_EQ(liveness_.ReportedAvailable(a_), Cpu(3));
  EXPECT_EQ(liveness_.Heartbeat(a_, 1, nullptr), Beat::kOk);
  EXPECT_EQ(liveness_.ReportedAvailable(a_), Cpu(3));
  const ResourceSet none;
  EXPECT_EQ(liveness_.Heartbeat(a_, 1, &none), Beat::kOk);
  EXPECT_EQ(liveness_.ReportedAvailable(a_), ResourceSet());
  // A refused heartbeat stores nothing.
  const ResourceSet nine = Cpu(9);
  EXPECT_EQ(liveness_.Heartbeat(a_, 2, &nine), Beat::kReregister);
  EXPECT_EQ(liveness_.ReportedAvailable(a_), ResourceSet());
}

TEST_F(LivenessTest, LeaseHoldingsOfConfirmedNodesAreKeptAndChangesAnnounced) {
  int announced = 0;
  liveness_.OnLeasesChanged([&] { ++announced; });
  liveness_.Registered(a_, 1, Cpu(8));
  liveness_.Registered(b_, 1, Cpu(8));
  EXPECT_TRUE(liveness_.Leased().empty());

  const LeaseHoldings two_chips{Cpu(1), {0, 1}, {}};
  EXPECT_EQ(liveness_.Heartbeat(a_, 1, nullptr, &two_chips), Beat::kOk);
  EXPECT_EQ(announced, 1);
  ASSERT_EQ(liveness_.Leased().size(), 1u);
  EXPECT_EQ(liveness_.Leased().at(a_), two_chips);
  // The same holdings again, or none reported (unchanged): no announcement.
  EXPECT_EQ(liveness_.Heartbeat(a_, 1, nullptr, &two_chips), Beat::kOk);
  EXPECT_EQ(liveness_.Heartbeat(a_, 1, nullptr, nullptr), Beat::kOk);
  EXPECT_EQ(announced, 1);
  // Given back: announced (a waiting group may fit now), and the node is left out.
  const LeaseHoldings none;
  EXPECT_EQ(liveness_.Heartbeat(a_, 1, nullptr, &none), Beat::kOk);
  EXPECT_EQ(announced, 2);
  EXPECT_TRUE(liveness_.Leased().empty());

  // A heartbeat of a stale incarnation changes nothing.
  EXPECT_EQ(liveness_.Heartbeat(b_, 7, nullptr, &two_chips), Beat::kReregister);
  EXPECT_TRUE(liveness_.Leased().empty());
  EXPECT_EQ(announced, 2);

  // Registering again forgets the holdings until the agent's next heartbeat reports them.
  EXPECT_EQ(liveness_.Heartbeat(b_, 1, nullptr, &two_chips), Beat::kOk);
  EXPECT_EQ(announced, 3);
  liveness_.Registered(b_, 2, Cpu(8));
  EXPECT_TRUE(liveness_.Leased().empty());
  EXPECT_EQ(announced, 4);
}

}  // namespace liveness_test
}  // namespace torus::head
