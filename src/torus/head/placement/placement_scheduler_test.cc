#include "torus/head/placement/placement_scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "torus/head/agents/fake_agent_pool.h"
#include "torus/head/placement/group_ops.h"
#include "torus/head/placement/placement_test_util.h"
#include "torus/head/state/journal.h"

namespace torus::head {
namespace placement_scheduler_test {

using sched::Strategy;
using test_util::History;
using test_util::HookedAgentPool;
using test_util::Layout;
using test_util::Res;
using test_util::TargetOf;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr uint64_t kEpoch = 1;  // a fresh store serves epoch 1
constexpr uint64_t Attempt(uint64_t n) { return (kEpoch << 32) | n; }

// What a WaitSettled callback got; shared, so that a late call never touches a finished test's stack.
struct WaitResult {
  absl::Notification done;
  absl::StatusOr<Group> group = absl::UnknownError("not called");
};

class PlacementSchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(store_.Open().ok());
    store_.Subscribe([this](const std::vector<Record>& records) { scheduler_.OnRecords(records); });
    store_.StartDispatch();
  }
  void TearDown() override {
    scheduler_.Stop();
    store_.StopDispatch();
  }

  // Registers `hosts` in the state and adds their agents; confirmed in Liveness (registered with this head) or only
  // restored from the journal.
  void Join(const std::vector<NodeRegistration>& hosts, bool confirmed = true) {
    store_.Update([&](Txn& txn) {
      for (const Record& r : test_util::Registrations(hosts, next_incarnation_, clock_.WallMillis())) {
        ASSERT_TRUE(txn.Apply(r).ok());
      }
    });
    for (const NodeRegistration& h : hosts) {
      agents_.AddAgent(TargetOf(h));
      const uint64_t incarnation = next_incarnation_++;
      if (confirmed) {
        liveness_.Registered(NodeId(h.node_id), incarnation, h.total);
      } else {
        liveness_.Restored(NodeId(h.node_id), incarnation);
      }
    }
  }
  GroupId Submit(sched::BundleRequest request, double timeout_s = 0, const std::string& name = "") {
    absl::StatusOr<GroupId> id = store_.Update([&](Txn& txn) {
      return SubmitBundleGroup(txn, ids_, std::move(request),
                               {.name = name, .timeout_s = timeout_s, .wall_ms = clock_.WallMillis()});
    });
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : GroupId();
  }
  GroupId SubmitSlices(sched::SliceGroupRequest request) {
    absl::StatusOr<GroupId> id = store_.Update(
        [&](Txn& txn) { return SubmitSliceGroup(txn, ids_, std::move(request), {.wall_ms = clock_.WallMillis()}); });
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : GroupId();
  }
  Group Get(const GroupId& id) const {
    return store_.Read([&](const ClusterState& s) { return *s.FindGroup(id); });
  }
  // Polls (bounded) until `done` holds, after each check letting the store deliver what it committed.
  ::testing::AssertionResult Eventually(const std::function<bool()>& done, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      store_.WaitDelivered();
      if (done()) return ::testing::AssertionSuccess();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return ::testing::AssertionFailure() << "timed out waiting for " << what;
  }
  // Waits until the group satisfies `done`; on a timeout says where it stands.
  ::testing::AssertionResult WaitGroup(const GroupId& id, const std::function<bool(const Group&)>& done) {
    ::testing::AssertionResult r = Eventually([&] { return done(Get(id)); }, id.str());
    if (!r) {
      const Group g = Get(id);
      r << ": it is " << PgStateName(g.state) << " (" << g.reason << ")";
    }
    return r;
  }
  ::testing::AssertionResult WaitState(const GroupId& id, PgState state) {
    return WaitGroup(id, [&](const Group& g) { return g.state == state; });
  }
  std::shared_ptr<WaitResult> WaitSettled(const std::string& id_or_name, int64_t wait_ms) {
    auto result = std::make_shared<WaitResult>();
    scheduler_.WaitSettled(id_or_name, wait_ms, [result](absl::StatusOr<Group> g) {
      result->group = std::move(g);
      result->done.Notify();
    });
    return result;
  }
  // "<ledger group>:<index> a<attempt> committed|prepared gpus[..]" per entry of an agent's ledger.
  std::vector<std::string> LedgerOf(const std::string& node) const {
    std::vector<std::string> out;
    for (const auto& [key, e] : agents_.Ledger(TargetOf(node))) {
      out.push_back(absl::StrCat(key.first, ":", key.second, " a", e.attempt, e.committed ? " committed" : " prepared",
                                 " gpus[", absl::StrJoin(e.bundle.gpus, ","), "]"));
    }
    return out;
  }

  FakeClock clock_;
  StateStore store_{NewMemoryJournal(), clock_.WallMillis(), {}};
  Liveness liveness_{&clock_};
  FakeAgentPool agents_;
  HookedAgentPool pool_{&agents_};
  PlacementScheduler scheduler_{&store_, &liveness_, &pool_, &clock_, {}};
  SequentialIdGenerator ids_;
  uint64_t next_incarnation_ = 1;
};

TEST_F(PlacementSchedulerTest, SubmittedGroupIsCreatedWithItsBundlesCommittedOnTheAgents) {
  Join({test_util::CpuHost("c1"), test_util::GpuHost("g1", 4)});
  scheduler_.Start();
  const GroupId a = Submit(test_util::BundleReq(Strategy::kStrictSpread, {Res({{"CPU", 1}}), Res({{"GPU", 2}})}));
  ASSERT_TRUE(WaitState(a, PgState::kCreated));
  const Group g = Get(a);
  EXPECT_THAT(Layout(g.bundles), ElementsAre(absl::StrCat("0 c1 pg-0000000001:0 chips[] gpus[] a", Attempt(1)),
                                             absl::StrCat("1 g1 pg-0000000001:1 chips[] gpus[0,1] a", Attempt(1))));
  EXPECT_EQ(g.bundles[0].attempt >> 32, kEpoch);
  EXPECT_EQ(History(g).back(), absl::StrCat(clock_.WallMillis(), " CREATED placed 2 bundles on c1, g1"));
  EXPECT_THAT(LedgerOf("c1"), ElementsAre(absl::StrCat("pg-0000000001:0 a", Attempt(1), " committed gpus[]")));
  EXPECT_THAT(LedgerOf("g1"), ElementsAre(absl::StrCat("pg-0000000001:1 a", Attempt(1), " committed gpus[0,1]")));

  // The next reservation is the next attempt of the epoch, and takes the next GPUs.
  const GroupId b = Submit(test_util::BundleReq(Strategy::kPack, {Res({{"GPU", 2}})}));
  ASSERT_TRUE(WaitState(b, PgState::kCreated));
  EXPECT_THAT(LedgerOf("g1"), ElementsAre(absl::StrCat("pg-0000000001:1 a", Attempt(1), " committed gpus[0,1]"),
                                          absl::StrCat("pg-0000000002:0 a", Attempt(2), " committed gpus[2,3]")));
}

// Two-phase commit is for groups spread over several agents; a group held by one agent is committed by its prepare.
TEST_F(PlacementSchedulerTest, AGroupOnOneAgentIsHeldInOnePhaseAndOneOnTwoAgentsInTwo) {
  Join({test_util::CpuHost("c1"), test_util::CpuHost("c2")});
  scheduler_.Start();
  const GroupId packed = Submit(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}}), Res({{"CPU", 1}})}));
  ASSERT_TRUE(WaitState(packed, PgState::kCreated));
  EXPECT_EQ(agents_.prepare_calls(), 1);
  EXPECT_EQ(agents_.commit_calls(), 0);
  EXPECT_THAT(LedgerOf("c1"), ElementsAre(absl::StrCat("pg-0000000001:0 a", Attempt(1), " committed gpus[]"),
                                          absl::StrCat("pg-0000000001:1 a", Attempt(1), " committed gpus[]")));

  const GroupId spread = Submit(test_util::BundleReq(Strategy::kStrictSpread, {Res({{"CPU", 1}}), Res({{"CPU", 1}})}));
  ASSERT_TRUE(WaitState(spread, PgState::kCreated));
  EXPECT_EQ(agents_.prepare_calls(), 3);
  EXPECT_EQ(agents_.commit_calls(), 2);
  EXPECT_THAT(LedgerOf("c2"), ElementsAre(absl::StrCat("pg-0000000002:1 a", Attempt(2), " committed gpus[]")));
}

// A one-phase prepare that fails may still have been held (its answer lost): it is released, not cancelled, and the
// group waits holding nothing.
TEST_F(PlacementSchedulerTest, AFailedOnePhasePrepareIsReleasedAndTheGroupWaits) {
  Join({test_util::CpuHost("c1")});
  agents_.RefusePrepares(TargetOf("c1"), absl::DeadlineExceededError("no answer"));
  scheduler_.Start();
  const GroupId a = Submit(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}})}));
  ASSERT_TRUE(WaitGroup(
      a, [](const Group& g) { return g.reason == "prepare refused by node c1: no answer; retrying in 50 ms"; }));
  EXPECT_EQ(Get(a).state, PgState::kPending);
  EXPECT_TRUE(Eventually([&] { return pool_.releases.load() == 1; }, "the release of the failed prepare"));
  EXPECT_THAT(LedgerOf("c1"), IsEmpty());
  EXPECT_EQ(pool_.commits.load(), 0);
}

// FIFO with backfill (docs/architecture.md): a younger small request is placed past an older one that waits, until
// the older one has waited longer than fifo_after_ms (10 s); from then nothing behind it is placed until it is.
TEST_F(PlacementSchedulerTest, SmallRequestsBackfillPastAWaitingOneUntilItHasWaitedTenSeconds) {
  Join({test_util::CpuHost("c1", 4)});
  scheduler_.Start();
  const GroupId held = Submit(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 2}})}));
  ASSERT_TRUE(WaitState(held, PgState::kCreated));
  const GroupId big = Submit(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 4}})}));
  ASSERT_TRUE(WaitGroup(big, [](const Group& g) { return g.reason != "waiting to be scheduled"; }));
  EXPECT_EQ(Get(big).state, PgState::kPending);
  // Young: a small one behind it is placed on the free CPUs.
  const GroupId early = Submit(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}})}));
  ASSERT_TRUE(WaitState(early, PgState::kCreated));

  // Once the big one has waited past 10 s, a small one behind it waits although a CPU is free, and says why.
  clock_.AdvanceMillis(10'001);
  const GroupId late = Submit(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}})}));
  scheduler_.Wake();
  const std::string behind = absl::StrCat("queued behind placement group ", big.str(),
                                          ", which has waited more than 10 s and goes first");
  ASSERT_TRUE(WaitGroup(late, [&](const Group& g) { return g.reason == behind; }));
  EXPECT_EQ(Get(late).state, PgState::kPending);
  EXPECT_EQ(Get(big).state, PgState::kPending);

  // The big one is placed as soon as it fits, before the small one.
  for (const GroupId& id : {held, early}) {
    scheduler_.Release(store_.Update(
        [&](Txn& txn) { return EndGroup(txn, id, PgState::kRemoved, "removed by user", clock_.WallMillis()); }));
  }
  ASSERT_TRUE(WaitState(big, PgState::kCreated));
  EXPECT_EQ(Get(late).state, PgState::kPending);
}

// An infeasible request (no node could hold it, even idle) that has waited past fifo_after_ms holds up nobody: a
// group of a program that exited without removing it must not stop the cluster's placements.
TEST_F(PlacementSchedulerTest, AnInfeasibleRequestThatHasWaitedLongDoesNotHoldUpOthers) {
  Join({test_util::CpuHost("c1", 4)});
  scheduler_.Start();
  const GroupId never = Submit(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1000}})}));
  ASSERT_TRUE(WaitGroup(never, [](const Group& g) { return g.reason != "waiting to be scheduled"; }));
  clock_.AdvanceMillis(10'001);
  const GroupId later = Submit(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}})}));
  scheduler_.Wake();
  ASSERT_TRUE(WaitState(later, PgState::kCreated));
  EXPECT_EQ(Get(never).state, PgState::kPending);
  EXPECT_EQ(Get(never).reason.rfind("infeasible for now: ", 0), 0u) << Get(never).reason;
}

TEST_F(PlacementSchedulerTest, PrepareRefusalLeavesTheGroupPendingHoldingNothingAndItRetries) {
  Join({test_util::CpuHost("c1"), test_util::CpuHost("c2")});
  agents_.RefusePrepares(TargetOf("c2"), absl::UnavailableError("ledger is busy"));
  scheduler_.Start();
  const GroupId a = Submit(test_util::BundleReq(Strategy::kStrictSpread, {Res({{"CPU", 1}}), Res({{"CPU", 1}})}));
  ASSERT_TRUE(WaitGroup(
      a, [](const Group& g) { return g.reason == "prepare refused by node c2: ledger is busy; retrying in 50 ms"; }));
  EXPECT_EQ(Get(a).state, PgState::kPending);
  // c1 prepared and was cancelled: no agent holds anything.
  EXPECT_THAT(LedgerOf("c1"), IsEmpty());
  EXPECT_THAT(LedgerOf("c2"), IsEmpty());
  EXPECT_EQ(pool_.commits.load(), 0);

  // Refused again after the back-off: it doubles.
  clock_.AdvanceMillis(50);
  scheduler_.Wake();
  ASSERT_TRUE(WaitGroup(
      a, [](const Group& g) { return g.reason == "prepare refused by node c2: ledger is busy; retrying in 100 ms"; }));

  agents_.RefusePrepares(TargetOf("c2"), absl::OkStatus());
  clock_.AdvanceMillis(100);
  scheduler_.Wake();
  ASSERT_TRUE(WaitState(a, PgState::kCreated));
  EXPECT_THAT(LedgerOf("c1"), ElementsAre(absl::StrCat("pg-0000000001:0 a", Attempt(3), " committed gpus[]")));
  EXPECT_THAT(LedgerOf("c2"), ElementsAre(absl::StrCat("pg-0000000001:1 a", Attempt(3), " committed gpus[]")));
}

TEST_F(PlacementSchedulerTest, NodeNotConfirmedInLivenessIsNotPlacedOn) {
  Join({test_util::CpuHost("c1", 16)}, /*confirmed=*/false);  // restored from the journal; its agent not back yet
  Join({test_util::CpuHost("c2", 8)});
  scheduler_.Start();
  const GroupId small = Submit(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}})}));
  ASSERT_TRUE(WaitState(small, PgState::kCreated));
  EXPECT_EQ(Get(small).bundles[0].node, NodeId("c2"));  // c1 would win the tie
  const GroupId big = Submit(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 12}})}));
  ASSERT_TRUE(WaitGroup(big, [](const Group& g) { return g.reason != "waiting to be scheduled"; }));
  EXPECT_EQ(Get(big).state, PgState::kPending);
  EXPECT_EQ(Get(big).reason,
            "infeasible for now: PACK 1 bundle: bundle 0 {\"CPU\": 12}: no alive node has room for it, even with "
            "every node idle");
  EXPECT_THAT(LedgerOf("c1"), IsEmpty());

  liveness_.Registered(NodeId("c1"), 1, Res({{"CPU", 16}}));
  scheduler_.Wake();
  ASSERT_TRUE(WaitState(big, PgState::kCreated));
  EXPECT_EQ(Get(big).bundles[0].node, NodeId("c1"));
}

TEST_F(PlacementSchedulerTest, ReleaseSendsReleasesToTheAgents) {
  Join({test_util::CpuHost("c1"), test_util::CpuHost("c2")});
  scheduler_.Start();
  const GroupId a = Submit(test_util::BundleReq(Strategy::kStrictSpread, {Res({{"CPU", 1}}), Res({{"CPU", 1}})}));
  ASSERT_TRUE(WaitState(a, PgState::kCreated));
  ASSERT_EQ(LedgerOf("c1").size(), 1u);
  std::vector<HeldBundle> held = store_.Update(
      [&](Txn& txn) { return EndGroup(txn, a, PgState::kRemoved, "removed by user", clock_.WallMillis()); });
  ASSERT_EQ(held.size(), 2u);
  scheduler_.Release(std::move(held));
  EXPECT_TRUE(Eventually([&] { return LedgerOf("c1").empty() && LedgerOf("c2").empty(); }, "the releases"));
}

TEST_F(PlacementSchedulerTest, GroupRemovedWhileBeingReservedGivesItsBundlesBack) {
  Join({test_util::CpuHost("c1"), test_util::CpuHost("c2")});
  std::atomic<bool> removed{false};
  GroupId a;
  pool_.before_prepare = [&] {
    if (removed.exchange(true)) return;
    // The user removes the group between the decision and its prepares; it held nothing yet.
    EXPECT_THAT(store_.Update([&](Txn& txn) {
      return EndGroup(txn, a, PgState::kRemoved, "removed by user", clock_.WallMillis());
    }),
                IsEmpty());
  };
  a = Submit(test_util::BundleReq(Strategy::kStrictSpread, {Res({{"CPU", 1}}), Res({{"CPU", 1}})}));
  scheduler_.Start();
  // The agents committed the reservation, then were told to release it.
  ASSERT_TRUE(Eventually([&] { return pool_.commits.load() == 2 && pool_.releases.load() == 2; },
                         "a commit and a release on both agents"));
  EXPECT_THAT(LedgerOf("c1"), IsEmpty());
  EXPECT_THAT(LedgerOf("c2"), IsEmpty());
  const Group g = Get(a);
  EXPECT_EQ(g.state, PgState::kRemoved);
  EXPECT_THAT(History(g), ElementsAre(absl::StrCat(clock_.WallMillis(),
                                                   " PENDING submitted: STRICT_SPREAD, 2 bundles {\"CPU\": 1}, "
                                                   "{\"CPU\": 1}"),
                                      absl::StrCat(clock_.WallMillis(), " REMOVED removed by user")));
}

TEST_F(PlacementSchedulerTest, WaitingGroupFailsAtItsTimeout) {
  Join({test_util::CpuHost("c1")});
  scheduler_.Start();
  const GroupId a = Submit(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 64}})}), /*timeout_s=*/1);
  ASSERT_TRUE(WaitGroup(a, [](const Group& g) { return g.reason != "waiting to be scheduled"; }));
  const std::string why = Get(a).reason;
  EXPECT_EQ(why,
            "infeasible for now: PACK 1 bundle: bundle 0 {\"CPU\": 64}: no alive node has room for it, even with "
            "every node idle");
  clock_.AdvanceMillis(1000);
  scheduler_.Wake();
  ASSERT_TRUE(WaitState(a, PgState::kFailed));
  EXPECT_EQ(Get(a).reason, "timed out after 1 s: " + why);
  EXPECT_EQ(History(Get(a)).back(), absl::StrCat(clock_.WallMillis(), " FAILED timed out after 1 s: ", why));
}

TEST_F(PlacementSchedulerTest, WaitSettledAnswersOnceCreated) {
  Join({test_util::CpuHost("c1")}, /*confirmed=*/false);
  scheduler_.Start();
  const GroupId a = Submit(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}})}), 0, "train");
  auto by_id = WaitSettled(a.str(), 60'000);
  auto by_name = WaitSettled("train", 60'000);
  EXPECT_FALSE(by_id->done.HasBeenNotified());
  liveness_.Registered(NodeId("c1"), 1, Res({{"CPU", 8}}));
  scheduler_.Wake();
  for (const auto& r : {by_id, by_name}) {
    ASSERT_TRUE(r->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    ASSERT_TRUE(r->group.ok()) << r->group.status();
    EXPECT_EQ(r->group->id, a);
    EXPECT_EQ(r->group->state, PgState::kCreated);
  }
}

TEST_F(PlacementSchedulerTest, WaitSettledAnswersAtTheDeadlineWithTheStateThen) {
  Join({test_util::CpuHost("c1")});
  scheduler_.Start();
  const GroupId a = Submit(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 64}})}));
  ASSERT_TRUE(WaitGroup(a, [](const Group& g) { return g.reason != "waiting to be scheduled"; }));
  auto waiting = WaitSettled(a.str(), 500);
  EXPECT_FALSE(waiting->done.HasBeenNotified());
  clock_.AdvanceMillis(500);
  scheduler_.Wake();
  ASSERT_TRUE(waiting->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(waiting->group.ok()) << waiting->group.status();
  EXPECT_EQ(waiting->group->state, PgState::kPending);
  EXPECT_EQ(waiting->group->reason, Get(a).reason);

  // No wait: answered at once, on the caller's thread.
  auto now = WaitSettled(a.str(), 0);
  ASSERT_TRUE(now->done.HasBeenNotified());
  EXPECT_EQ(now->group->state, PgState::kPending);
}

TEST_F(PlacementSchedulerTest, WaitSettledOnAnUnknownGroupIsNotFound) {
  scheduler_.Start();
  auto r = WaitSettled("pg-nope", 1000);
  ASSERT_TRUE(r->done.HasBeenNotified());
  EXPECT_EQ(r->group.status(), absl::NotFoundError("placement group pg-nope does not exist"));
}

TEST_F(PlacementSchedulerTest, NodeDeathMakesASliceGroupReschedulingAndItGetsAReplacementSlice) {
  std::vector<NodeRegistration> hosts = test_util::V6eSlice("v6e-0");
  test_util::Append(hosts, test_util::V6eSlice("v6e-1"));
  Join(hosts);
  scheduler_.Start();
  const GroupId s = SubmitSlices(test_util::SliceReq("4x4", 1));
  ASSERT_TRUE(WaitState(s, PgState::kCreated));
  EXPECT_THAT(Get(s).slices, ElementsAre("v6e-0"));
  EXPECT_THAT(LedgerOf("v6e-0-w2"),
              ElementsAre(absl::StrCat("pg-0000000001/v6e-0:2 a", Attempt(1), " committed gpus[]")));

  // v6e-0-w1 dies (the records Membership writes for a death).
  const NodeId dead("v6e-0-w1");
  const uint64_t incarnation = store_.Read([&](const ClusterState& st) { return st.FindNode(dead)->incarnation; });
  PgState after_death = PgState::kCreated;
  std::vector<HeldBundle> release = store_.Update([&](Txn& txn) {
    EXPECT_TRUE(txn.Apply(NodeDied{dead, incarnation, "no heartbeat", clock_.WallMillis()}).ok());
    auto out = LoseBundles(
        txn, dead, [](const HeldBundle&) { return true; }, true, clock_.WallMillis());
    after_death = txn.state().FindGroup(s)->state;
    return out;
  });
  liveness_.Forget(dead, incarnation);
  EXPECT_EQ(after_death, PgState::kRescheduling);
  EXPECT_EQ(release.size(), 3u);
  scheduler_.Release(std::move(release));

  ASSERT_TRUE(WaitGroup(s, [](const Group& g) {
    return g.state == PgState::kCreated && g.slices.size() == 1 && g.slices[0] == "v6e-1";
  }));
  const Group g = Get(s);
  const std::vector<std::string> history = History(g);
  ASSERT_GE(history.size(), 2u);
  EXPECT_EQ(history[history.size() - 2],
            absl::StrCat(clock_.WallMillis(),
                         " RESCHEDULING slice v6e-0 degraded (a host died): released whole; reserving a replacement"));
  EXPECT_EQ(history.back(), absl::StrCat(clock_.WallMillis(), " CREATED reserved slice v6e-1"));
  EXPECT_THAT(Layout(g.bundles),
              ElementsAre(absl::StrCat("0 v6e-1-w0 pg-0000000001/v6e-1:0 chips[0,1,2,3] gpus[] w0 a", Attempt(2)),
                          absl::StrCat("1 v6e-1-w1 pg-0000000001/v6e-1:1 chips[0,1,2,3] gpus[] w1 a", Attempt(2)),
                          absl::StrCat("2 v6e-1-w2 pg-0000000001/v6e-1:2 chips[0,1,2,3] gpus[] w2 a", Attempt(2)),
                          absl::StrCat("3 v6e-1-w3 pg-0000000001/v6e-1:3 chips[0,1,2,3] gpus[] w3 a", Attempt(2))));
  EXPECT_THAT(LedgerOf("v6e-1-w3"),
              ElementsAre(absl::StrCat("pg-0000000001/v6e-1:3 a", Attempt(2), " committed gpus[]")));
  // The healthy hosts of the degraded slice are told to release it; the dead one is not called.
  EXPECT_TRUE(Eventually(
      [&] { return LedgerOf("v6e-0-w0").empty() && LedgerOf("v6e-0-w2").empty() && LedgerOf("v6e-0-w3").empty(); },
      "releases on v6e-0"));
  EXPECT_EQ(LedgerOf("v6e-0-w1").size(), 1u);
}

// A PENDING group decided after a RESCHEDULING one in the same pass sees what the rescheduled group was just given
// (the pass accounting is read again after it is reserved), so it does not take the same GPUs.
TEST_F(PlacementSchedulerTest, PendingGroupDecidedAfterAReschedulingOneDoesNotTakeItsDevices) {
  Join({test_util::GpuHost("a", 2), test_util::GpuHost("b", 2), test_util::GpuHost("c", 2)});
  const GroupId r = Submit(test_util::BundleReq(Strategy::kStrictSpread, {Res({{"GPU", 2}}), Res({{"GPU", 2}})}));
  store_.Update([&](Txn& txn) {
    ASSERT_TRUE(txn.Apply(GroupPlaced{.group = r,
                                      .bundles = {test_util::Bundle(r.str(), 0, "a", Res({{"GPU", 2}}), {}, {0, 1}),
                                                  test_util::Bundle(r.str(), 1, "b", Res({{"GPU", 2}}), {}, {0, 1})},
                                      .message = "placed"})
                    .ok());
    ASSERT_TRUE(txn.Apply(NodeDied{NodeId("b"), 2, "gone", clock_.WallMillis()}).ok());
    LoseBundles(
        txn, NodeId("b"), [](const HeldBundle&) { return true; }, true, clock_.WallMillis());
  });
  liveness_.Forget(NodeId("b"), 2);
  const GroupId p = Submit(test_util::BundleReq(Strategy::kPack, {Res({{"GPU", 2}})}));
  scheduler_.Start();  // one pass sees both waiting: r (RESCHEDULING) first, then p

  ASSERT_TRUE(Eventually(
      [&] {
        const Group gp = Get(p);
        return Get(r).state == PgState::kCreated &&
               (gp.state == PgState::kCreated || gp.reason != "waiting to be scheduled");
      },
      "both groups decided"));
  EXPECT_EQ(Get(r).bundles[1].node, NodeId("c"));
  EXPECT_EQ(Get(p).state, PgState::kPending) << Layout(Get(p).bundles)[0];
  EXPECT_EQ(store_.Read([](const ClusterState& s) { return s.HeldByNode()[NodeId("c")].resources.Get("GPU"); }), 2);
}

// timeout_s bounds the wait for creation: a group CREATED in time that loses a node later is placed again, not
// failed as timed out.
TEST_F(PlacementSchedulerTest, TimeoutDoesNotFailAGroupReschedulingAfterItWasCreated) {
  Join({test_util::CpuHost("c1"), test_util::CpuHost("c2"), test_util::CpuHost("c3")});
  // Submitted 5 s ago with a timeout of 1 s, CREATED in time on c1 and c2; now c2 dies. (Set up before the scheduler
  // starts, so that its first pass sees exactly this.)
  const int64_t now = clock_.WallMillis();
  absl::StatusOr<GroupId> a = store_.Update([&](Txn& txn) {
    return SubmitBundleGroup(txn, ids_,
                             test_util::BundleReq(Strategy::kStrictSpread, {Res({{"CPU", 1}}), Res({{"CPU", 1}})}),
                             {.timeout_s = 1, .wall_ms = now - 5000});
  });
  ASSERT_TRUE(a.ok()) << a.status();
  store_.Update([&](Txn& txn) {
    ASSERT_TRUE(txn.Apply(GroupPlaced{.group = *a,
                                      .bundles = {test_util::Bundle(a->str(), 0, "c1", Res({{"CPU", 1}})),
                                                  test_util::Bundle(a->str(), 1, "c2", Res({{"CPU", 1}}))},
                                      .message = "placed",
                                      .wall_ms = now - 4900})
                    .ok());
    ASSERT_TRUE(txn.Apply(NodeDied{NodeId("c2"), 2, "gone", now}).ok());
    LoseBundles(
        txn, NodeId("c2"), [](const HeldBundle&) { return true; }, true, now);
  });
  liveness_.Forget(NodeId("c2"), 2);
  ASSERT_EQ(Get(*a).state, PgState::kRescheduling);
  scheduler_.Start();
  ASSERT_TRUE(WaitGroup(*a, [](const Group& g) { return g.state == PgState::kCreated || !g.Live(); }));
  EXPECT_EQ(Get(*a).state, PgState::kCreated) << Get(*a).reason;
  EXPECT_THAT(Layout(Get(*a).bundles), ElementsAre("0 c1 pg-0000000001:0 chips[] gpus[] a1",
                                                   absl::StrCat("1 c3 pg-0000000001:1 chips[] gpus[] a", Attempt(1))));
}

}  // namespace placement_scheduler_test
}  // namespace torus::head
