#include "torus/head/nodes/membership.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "torus/head/agents/fake_agent_pool.h"
#include "torus/head/placement/group_ops.h"
#include "torus/head/placement/placement_test_util.h"
#include "torus/head/state/journal.h"

namespace torus::head {
namespace membership_test {

using sched::Strategy;
using test_util::Bundle;
using test_util::Res;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int64_t kTimeoutMicros = 5'000'000;
constexpr uint64_t kOldAttempt = (uint64_t{1} << 32) | 1;  // reserved by the head of epoch 1

using Release = std::vector<std::pair<std::string, int>>;

class MembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(store_.Open().ok());
    store_.Subscribe([this](const std::vector<Record>& records) {
      absl::MutexLock lock(&mu_);
      for (const Record& r : records) records_.emplace_back(RecordName(r));
    });
    store_.StartDispatch();
  }
  void TearDown() override { store_.StopDispatch(); }

  static AgentReport Report(const std::string& node, std::vector<ReportedBundle> bundles = {},
                            std::vector<ReportedWorker> workers = {}) {
    AgentReport r;
    r.info = test_util::CpuHost(node);
    r.available = r.info.total;
    r.bundles = std::move(bundles);
    r.workers = std::move(workers);
    return r;
  }
  Registered Register(AgentReport report) {
    absl::StatusOr<Registered> r = membership_.Register(std::move(report));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : Registered{};
  }
  void Apply(const std::vector<Record>& records) {
    store_.Update([&](Txn& txn) {
      for (const Record& r : records) ASSERT_TRUE(txn.Apply(r).ok()) << RecordName(r);
    });
  }
  // A CREATED bundle group `id` holding `bundles`.
  void Place(const std::string& id, std::vector<HeldBundle> bundles) {
    Apply({GroupSubmitted{
               test_util::NewBundleGroup(id, test_util::BundleReq(Strategy::kSpread, {Res({{"CPU", 1}})}), ++seq_)},
           GroupPlaced{.group = GroupId(id), .bundles = std::move(bundles), .message = "placed"}});
  }
  // A worker on `node` in `phase` (pid 50 once started).
  void AddWorker(const std::string& id, const std::string& node, WorkerPhase phase) {
    Worker w;
    w.id = WorkerId(id);
    w.node = NodeId(node);
    std::vector<Record> records = {WorkerStarting{w}};
    if (phase != WorkerPhase::kStarting) records.push_back(WorkerStarted{w.id, 50, 1000});
    if (phase == WorkerPhase::kExited) records.push_back(WorkerExited{w.id, WorkerExit{.wall_ms = 1500}});
    Apply(records);
  }
  Node GetNode(const std::string& id) const {
    return store_.Read([&](const ClusterState& s) { return *s.FindNode(NodeId(id)); });
  }
  Group GetGroup(const std::string& id) const {
    return store_.Read([&](const ClusterState& s) { return *s.FindGroup(GroupId(id)); });
  }
  Worker GetWorker(const std::string& id) const {
    return store_.Read([&](const ClusterState& s) { return *s.FindWorker(WorkerId(id)); });
  }
  // The names of the records `f` committed.
  std::vector<std::string> RecordsOf(const std::function<void()>& f) {
    store_.WaitDelivered();
    size_t before = 0;
    {
      absl::MutexLock lock(&mu_);
      before = records_.size();
    }
    f();
    store_.WaitDelivered();
    absl::MutexLock lock(&mu_);
    return std::vector<std::string>(records_.begin() + static_cast<std::ptrdiff_t>(before), records_.end());
  }

  FakeClock clock_;
  StateStore store_{NewMemoryJournal(), clock_.WallMillis(), {}};
  Liveness liveness_{&clock_};
  FakeAgentPool agents_;
  PlacementScheduler scheduler_{&store_, &liveness_, &agents_, &clock_, {}};  // not started: releases queue
  Membership membership_{&store_, &liveness_, &scheduler_, &clock_, kTimeoutMicros};
  uint64_t seq_ = 0;
  absl::Mutex mu_;
  std::vector<std::string> records_ ABSL_GUARDED_BY(mu_);
};

// ---- Registration ----

TEST_F(MembershipTest, RegisterRecordsTheNodeAndConfirmsIt) {
  AgentReport report = Report("n1");
  report.available = Res({{"CPU", 6}});
  Registered r;
  EXPECT_THAT(RecordsOf([&] { r = Register(report); }), ElementsAre("NodeRegistered"));
  // Incarnations are the wall time in microseconds, or one more than the last given.
  EXPECT_EQ(r.incarnation, static_cast<uint64_t>(clock_.WallMillis()) * 1000);
  EXPECT_THAT(r.release, IsEmpty());
  EXPECT_THAT(r.stop, IsEmpty());
  const Node n = GetNode("n1");
  EXPECT_TRUE(n.alive());
  EXPECT_EQ(n.info, report.info);
  EXPECT_EQ(n.incarnation, r.incarnation);
  EXPECT_EQ(n.registered_wall_ms, clock_.WallMillis());
  EXPECT_TRUE(liveness_.Confirmed(NodeId("n1")));
  EXPECT_EQ(liveness_.ReportedAvailable(NodeId("n1")), Res({{"CPU", 6}}));
  EXPECT_EQ(liveness_.Heartbeat(NodeId("n1"), r.incarnation, nullptr), Liveness::Beat::kOk);

  EXPECT_EQ(Register(Report("n2")).incarnation, r.incarnation + 1);  // the same millisecond
  clock_.AdvanceMillis(1);
  EXPECT_EQ(Register(Report("n3")).incarnation, static_cast<uint64_t>(clock_.WallMillis()) * 1000);
}

TEST_F(MembershipTest, RegisterValidates) {
  struct Case {
    std::string name;
    std::function<void(AgentReport&)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"BadNodeId", [](AgentReport& r) { r.info.node_id = "bad id"; },
       "node_id \"bad id\" is invalid; use 1-64 letters, digits, '_' or '-'"},
      {"LongNodeId", [](AgentReport& r) { r.info.node_id = std::string(65, 'n'); },
       "node_id \"" + std::string(65, 'n') + "\" is invalid; use 1-64 letters, digits, '_' or '-'"},
      {"EmptyAddress", [](AgentReport& r) { r.info.address = ""; },
       "address must be 1-255 characters (an IP or host name)"},
      {"Port", [](AgentReport& r) { r.info.agent_port = 70000; }, "agent_port must be 0..65535"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    AgentReport report = Report("n1");
    c.change(report);
    EXPECT_EQ(membership_.Register(report).status(), absl::InvalidArgumentError(c.message));
  }
  EXPECT_TRUE(store_.Read([](const ClusterState& s) { return s.nodes().empty(); }));
  EXPECT_FALSE(liveness_.Confirmed(NodeId("n1")));
}

TEST_F(MembershipTest, ReRegistrationByAnotherAgentProcessFirstKillsTheNode) {
  for (const bool other_pid : {true, false}) {
    SCOPED_TRACE(other_pid ? "another pid" : "another start time");
    const std::string node = other_pid ? "n1" : "n2";
    const uint64_t old = Register(Report(node)).incarnation;
    const std::string group = "pg-" + node;
    Place(group, {Bundle(group, 0, node, Res({{"CPU", 1}}))});
    AddWorker("w-" + node, node, WorkerPhase::kRunning);

    AgentReport again = Report(node);
    (other_pid ? again.info.pid : again.info.start_time_ms) += 1;
    Registered r;
    EXPECT_THAT(RecordsOf([&] { r = Register(again); }),
                ElementsAre("NodeDied", "GroupBundlesLost", "WorkerExited", "NodeRegistered"));
    EXPECT_GT(r.incarnation, old);
    EXPECT_EQ(GetNode(node).info, again.info);
    EXPECT_TRUE(GetNode(node).alive());
    EXPECT_EQ(GetGroup(group).state, PgState::kRescheduling);
    EXPECT_EQ(GetGroup(group).reason, "node " + node + " died: bundle 0 lost; placing again");
    const Worker w = GetWorker("w-" + node);
    EXPECT_EQ(w.phase, WorkerPhase::kExited);
    ASSERT_TRUE(w.exit.has_value());
    EXPECT_EQ(w.exit->Describe(), "was lost: node " + node + " died: re-registered (agent restarted)");
  }
}

// ---- Reconciling what a registering agent holds (a head restart) ----

struct BundleCase {
  std::string name;
  std::vector<ReportedBundle> reported;
  Release release;
  bool kept = true;  // pg-a keeps its bundle 0 on n1
};
void PrintTo(const BundleCase& c, std::ostream* os) { *os << c.name; }

class ReconcileBundlesTest : public MembershipTest, public ::testing::WithParamInterface<BundleCase> {};

TEST_P(ReconcileBundlesTest, KeepsWhatTheStateHoldsAndReleasesTheRest) {
  // Epoch 1: pg-a reserved bundle 0 on n1 and bundle 1 on n2; pg-ended held n1 and was removed.
  Register(Report("n1"));
  Register(Report("n2"));
  Place("pg-a", {Bundle("pg-a", 0, "n1", Res({{"CPU", 1}}), {}, {}, kOldAttempt),
                 Bundle("pg-a", 1, "n2", Res({{"CPU", 1}}), {}, {}, kOldAttempt)});
  Place("pg-ended", {Bundle("pg-ended", 0, "n1", Res({{"CPU", 1}}), {}, {}, kOldAttempt)});
  Apply({GroupEnded{.group = GroupId("pg-ended"), .message = "removed"}});
  // The head restarts (epoch 2); n1's agent, still the same process, registers with its ledger.
  Apply({HeadStarted{2, clock_.WallMillis()}});
  const Registered r = Register(Report("n1", GetParam().reported));
  EXPECT_EQ(r.release, GetParam().release);
  EXPECT_THAT(r.stop, IsEmpty());
  const Group a = GetGroup("pg-a");
  if (GetParam().kept) {
    EXPECT_EQ(a.state, PgState::kCreated);
    EXPECT_THAT(test_util::Layout(a.bundles), ElementsAre(absl::StrCat("0 n1 pg-a:0 chips[] gpus[] a", kOldAttempt),
                                                          absl::StrCat("1 n2 pg-a:1 chips[] gpus[] a", kOldAttempt)));
  } else {
    EXPECT_EQ(a.state, PgState::kRescheduling);
    EXPECT_EQ(a.reason, "node n1 no longer holds them: bundle 0 lost; placing again");
    EXPECT_THAT(test_util::Layout(a.bundles),
                ElementsAre(absl::StrCat("0 n1 pg-a:0 chips[] gpus[] a", kOldAttempt, " lost"),
                            absl::StrCat("1 n2 pg-a:1 chips[] gpus[] a", kOldAttempt)));
  }
}

const ReportedBundle kHeld{"pg-a", 0, kOldAttempt, true};
constexpr uint64_t kEpoch2Attempt = (uint64_t{2} << 32) | 3;

INSTANTIATE_TEST_SUITE_P(
    Bundles, ReconcileBundlesTest,
    ::testing::Values(
        BundleCase{"SameAttemptCommittedIsKept", {kHeld}, {}},
        BundleCase{"AnotherAttemptCommittedIsReleasedAndTheBundleLost",
                   {{"pg-a", 0, (uint64_t{1} << 32) | 7, true}},
                   {{"pg-a", 0}},
                   false},
        BundleCase{"UnknownGroupIsReleased", {kHeld, {"pg-gone", 0, kOldAttempt, true}}, {{"pg-gone", 0}}},
        BundleCase{"EndedGroupIsReleased", {kHeld, {"pg-ended", 0, kOldAttempt, true}}, {{"pg-ended", 0}}},
        BundleCase{
            "PrepareOfAnOlderEpochIsReleased", {kHeld, {"pg-new", 0, (uint64_t{1} << 32) | 9, false}}, {{"pg-new", 0}}},
        BundleCase{"PrepareOfThisEpochIsLeftToFinish", {kHeld, {"pg-new", 0, kEpoch2Attempt, false}}, {}},
        BundleCase{"NotReportedIsLost", {}, {}, false},
        BundleCase{"SeveralInReportOrder",
                   {{"pg-gone", 1, kOldAttempt, true}, kHeld, {"pg-ended", 0, kOldAttempt, true}},
                   {{"pg-gone", 1}, {"pg-ended", 0}}}),
    [](const auto& info) { return info.param.name; });

struct WorkerCase {
  std::string name;
  std::string known_on;  // "" = the state does not know it
  WorkerPhase phase = WorkerPhase::kRunning;
  std::optional<ReportedWorker> reported;  // on n1
  bool stop = false;
  WorkerPhase phase_after = WorkerPhase::kRunning;
  int64_t pid_after = 50;
  std::string exit_after;            // WorkerExit::Describe(), "" when none
  std::vector<std::string> records;  // after NodeRegistered
};
void PrintTo(const WorkerCase& c, std::ostream* os) { *os << c.name; }

class ReconcileWorkersTest : public MembershipTest, public ::testing::WithParamInterface<WorkerCase> {};

TEST_P(ReconcileWorkersTest, AdoptsAppliesExitsStopsOrLoses) {
  const WorkerCase& c = GetParam();
  Register(Report("n1"));
  Register(Report("n2"));
  if (!c.known_on.empty()) AddWorker("w", c.known_on, c.phase);
  std::vector<ReportedWorker> reported;
  if (c.reported) reported.push_back(*c.reported);
  Registered r;
  std::vector<std::string> records = RecordsOf([&] { r = Register(Report("n1", {}, reported)); });
  std::vector<std::string> want = {"NodeRegistered"};
  want.insert(want.end(), c.records.begin(), c.records.end());
  EXPECT_EQ(records, want);
  EXPECT_EQ(r.stop, c.stop ? std::vector<WorkerId>{WorkerId("w")} : std::vector<WorkerId>{});
  if (c.known_on.empty()) return;
  const Worker w = GetWorker("w");
  EXPECT_EQ(WorkerPhaseName(w.phase), WorkerPhaseName(c.phase_after));
  EXPECT_EQ(w.pid, c.pid_after);
  EXPECT_EQ(w.exit ? w.exit->Describe() : "", c.exit_after);
}

ReportedWorker Running(int64_t pid) { return {.id = WorkerId("w"), .pid = pid, .running = true}; }
ReportedWorker Exited(int64_t pid, int code, int signal) {
  return {.id = WorkerId("w"), .pid = pid, .exit_code = code, .signal = signal, .end_time_ms = 5000};
}

INSTANTIATE_TEST_SUITE_P(
    Workers, ReconcileWorkersTest,
    ::testing::Values(
        WorkerCase{.name = "RunningIsAdopted", .known_on = "n1", .reported = Running(50)},
        WorkerCase{.name = "StartingIsAdoptedAsStarted",
                   .known_on = "n1",
                   .phase = WorkerPhase::kStarting,
                   .reported = Running(12),
                   .pid_after = 12,
                   .records = {"WorkerStarted"}},
        WorkerCase{.name = "ExitWhileTheHeadWasAwayIsApplied",
                   .known_on = "n1",
                   .reported = Exited(50, 3, 0),
                   .phase_after = WorkerPhase::kExited,
                   .exit_after = "exited with code 3",
                   .records = {"WorkerExited"}},
        WorkerCase{.name = "StartingThatWasKilled",
                   .known_on = "n1",
                   .phase = WorkerPhase::kStarting,
                   .reported = Exited(13, 0, 9),
                   .phase_after = WorkerPhase::kExited,
                   .pid_after = 13,
                   .exit_after = "was killed by signal 9",
                   .records = {"WorkerStarted", "WorkerExited"}},
        WorkerCase{.name = "UnknownRunningIsStopped", .reported = Running(7), .stop = true},
        WorkerCase{.name = "UnknownExitedIsIgnored", .reported = Exited(7, 1, 0)},
        WorkerCase{.name = "KnownAsExitedButRunningIsStopped",
                   .known_on = "n1",
                   .phase = WorkerPhase::kExited,
                   .reported = Running(50),
                   .stop = true,
                   .phase_after = WorkerPhase::kExited,
                   .exit_after = "exited with code 0"},
        WorkerCase{.name = "KnownOnAnotherNodeIsStopped", .known_on = "n2", .reported = Running(50), .stop = true},
        WorkerCase{.name = "ExpectedButNotReportedIsLost",
                   .known_on = "n1",
                   .phase_after = WorkerPhase::kExited,
                   .exit_after = "was lost: not found on node n1 when its agent registered again",
                   .records = {"WorkerExited"}}),
    [](const auto& info) { return info.param.name; });

// A start recorded with its launch that the agent never had (its head stopped before sending it) stays starting, to
// be sent again; one recorded without a launch (a journal from before launches were kept) is lost as before.
TEST_F(MembershipTest, AStartingWorkerTheAgentNeverHadStaysStartingWhenItsLaunchIsKept) {
  Register(Report("n1"));
  Worker w;
  w.id = WorkerId("w-cut");
  w.node = NodeId("n1");
  w.launch = WorkerLaunch{.owner_tag = "job:x", .argv = {"true"}};
  Apply({WorkerStarting{w}});
  AddWorker("w-old", "n1", WorkerPhase::kStarting);
  EXPECT_THAT(RecordsOf([&] { Register(Report("n1")); }), ElementsAre("NodeRegistered", "WorkerExited"));
  EXPECT_EQ(GetWorker("w-cut").phase, WorkerPhase::kStarting);
  EXPECT_EQ(GetWorker("w-cut").launch, w.launch);
  EXPECT_EQ(GetWorker("w-old").phase, WorkerPhase::kExited);
}

TEST_F(MembershipTest, ExitReportedWhileAwayKeepsTheAgentsEndTime) {
  Register(Report("n1"));
  AddWorker("w", "n1", WorkerPhase::kRunning);
  Register(Report("n1", {}, {Exited(50, 3, 0)}));
  EXPECT_EQ(GetWorker("w").exit->wall_ms, 5000);
}

// A reservation committed on an agent but not yet recorded, whose node is declared dead and registers again in
// between (its agent then drops the bundle no group held yet), is not recorded: the group is placed again, and what
// it holds its agent holds.
TEST_F(MembershipTest, ReservationInFlightIsNotLostWhenItsNodeRegistersAgain) {
  Register(Report("n1"));
  FakeAgentPool fake;
  fake.AddAgent(test_util::TargetOf("n1"));
  test_util::HookedAgentPool pool(&fake);
  std::atomic<bool> reregistered{false};
  pool.after_commit = [&](const std::vector<AgentBundles>& committed) {
    if (reregistered.exchange(true)) return;
    // Between the commit and its record: n1 is declared dead, and its agent registers again with its ledger, then
    // drops what the head tells it to.
    ASSERT_TRUE(membership_.MarkDead(NodeId("n1"), "no heartbeat").ok());
    std::vector<ReportedBundle> ledger;
    for (const AgentBundles& e : committed) {
      for (const HeldBundle& b : e.bundles) ledger.push_back({e.ledger_group, b.ledger_index, e.attempt, true});
    }
    for (const auto& [group, index] : Register(Report("n1", ledger)).release) {
      HeldBundle b;
      b.ledger_index = index;
      fake.Release({AgentBundles{.target = test_util::TargetOf("n1"), .ledger_group = group, .bundles = {b}}});
    }
  };
  SequentialIdGenerator ids;
  absl::StatusOr<GroupId> id = store_.Update([&](Txn& txn) {
    return SubmitBundleGroup(txn, ids, test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}})}),
                             {.wall_ms = clock_.WallMillis()});
  });
  ASSERT_TRUE(id.ok()) << id.status();
  PlacementScheduler placing(&store_, &liveness_, &pool, &clock_, {});
  placing.Start();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (GetGroup(id->str()).state != PgState::kCreated && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  placing.Stop();
  ASSERT_TRUE(reregistered);
  const Group g = GetGroup(id->str());
  ASSERT_EQ(g.state, PgState::kCreated);
  // What the group holds, its agent holds.
  std::vector<std::string> ledger;
  for (const auto& [key, e] : fake.Ledger(test_util::TargetOf("n1"))) {
    ledger.push_back(absl::StrCat(key.first, ":", key.second, " a", e.attempt, e.committed ? " committed" : ""));
  }
  EXPECT_THAT(ledger, ElementsAre(absl::StrCat(g.bundles[0].ledger_group, ":0 a", g.bundles[0].attempt, " committed")));
}

// ---- Deaths ----

TEST_F(MembershipTest, ExpireSilentKillsNodesSilentPastTheTimeout) {
  Register(Report("n1"));
  const uint64_t n2 = Register(Report("n2")).incarnation;
  Place("pg-a", {Bundle("pg-a", 0, "n1", Res({{"CPU", 1}})), Bundle("pg-a", 1, "n2", Res({{"CPU", 1}}))});
  AddWorker("w1", "n1", WorkerPhase::kRunning);
  AddWorker("w-done", "n1", WorkerPhase::kExited);
  clock_.AdvanceMillis(3000);
  ASSERT_EQ(liveness_.Heartbeat(NodeId("n2"), n2, nullptr), Liveness::Beat::kOk);
  clock_.AdvanceMillis(2000);
  EXPECT_THAT(membership_.ExpireSilent(), IsEmpty());  // silent exactly the timeout: not yet

  clock_.AdvanceMillis(1);
  EXPECT_THAT(membership_.ExpireSilent(), ElementsAre(NodeId("n1")));
  const Node n = GetNode("n1");
  EXPECT_FALSE(n.alive());
  EXPECT_EQ(n.death_reason, "no heartbeat for 5.0 s");
  EXPECT_EQ(n.died_wall_ms, clock_.WallMillis());
  EXPECT_EQ(GetWorker("w1").exit->Describe(), "was lost: node n1 died: no heartbeat for 5.0 s");
  EXPECT_EQ(GetWorker("w1").exit->host_loss, HostLoss::kSilent);
  EXPECT_EQ(GetWorker("w1").exit->host_last_seen_ms, clock_.WallMillis() - 5001);
  EXPECT_EQ(GetWorker("w-done").exit->Describe(), "exited with code 0");  // ended before: unchanged
  EXPECT_EQ(GetGroup("pg-a").reason, "node n1 died: bundle 0 lost; placing again");
  EXPECT_FALSE(liveness_.Confirmed(NodeId("n1")));
  EXPECT_EQ(liveness_.SilentMicros(NodeId("n1")), std::nullopt);
  EXPECT_TRUE(GetNode("n2").alive());
  EXPECT_THAT(membership_.ExpireSilent(), IsEmpty());
}

TEST_F(MembershipTest, MarkDeadReturnsWhetherTheNodeWasAlive) {
  Register(Report("n1"));
  Register(Report("n2"));
  AddWorker("w1", "n1", WorkerPhase::kStarting);
  absl::StatusOr<bool> first = membership_.MarkDead(NodeId("n1"), "maintenance");
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(*first);
  EXPECT_EQ(GetNode("n1").death_reason, "marked dead by an operator: maintenance");
  EXPECT_EQ(GetWorker("w1").exit->Describe(), "was lost: node n1 died: marked dead by an operator: maintenance");
  EXPECT_EQ(GetWorker("w1").exit->host_loss, HostLoss::kMarkedDead);
  EXPECT_FALSE(liveness_.Confirmed(NodeId("n1")));
  absl::StatusOr<bool> again = membership_.MarkDead(NodeId("n1"), "maintenance");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  ASSERT_TRUE(membership_.MarkDead(NodeId("n2"), "").ok());
  EXPECT_EQ(GetNode("n2").death_reason, "marked dead by an operator");
  EXPECT_EQ(membership_.MarkDead(NodeId("zz"), "x").status(), absl::NotFoundError("node zz is not registered"));
}

TEST_F(MembershipTest, UnregisterOfAStaleIncarnationIsIgnored) {
  const uint64_t old = Register(Report("n1")).incarnation;
  AgentReport restarted = Report("n1");
  restarted.info.pid = 101;
  const uint64_t now = Register(restarted).incarnation;
  EXPECT_THAT(RecordsOf([&] { EXPECT_TRUE(membership_.Unregister(NodeId("n1"), old, "bye").ok()); }), IsEmpty());
  EXPECT_TRUE(GetNode("n1").alive());
  EXPECT_TRUE(liveness_.Confirmed(NodeId("n1")));
  EXPECT_EQ(membership_.Unregister(NodeId("zz"), 1, ""), absl::NotFoundError("node zz is not registered"));

  EXPECT_TRUE(membership_.Unregister(NodeId("n1"), now, "shutting down").ok());
  EXPECT_FALSE(GetNode("n1").alive());
  EXPECT_EQ(GetNode("n1").death_reason, "unregistered: shutting down");
  EXPECT_FALSE(liveness_.Confirmed(NodeId("n1")));
  const uint64_t n2 = Register(Report("n2")).incarnation;
  EXPECT_TRUE(membership_.Unregister(NodeId("n2"), n2, "").ok());
  EXPECT_EQ(GetNode("n2").death_reason, "unregistered");
}

TEST_F(MembershipTest, ReportWorkerExit) {
  Register(Report("n1"));
  Register(Report("n2"));
  AddWorker("w1", "n1", WorkerPhase::kRunning);
  EXPECT_EQ(membership_.ReportWorkerExit(NodeId("n1"), WorkerId("w-x"), 1, 0, 0),
            absl::NotFoundError("worker w-x is not known on node n1"));
  EXPECT_EQ(membership_.ReportWorkerExit(NodeId("n2"), WorkerId("w1"), 1, 0, 0),
            absl::NotFoundError("worker w1 is not known on node n2"));
  EXPECT_EQ(GetWorker("w1").phase, WorkerPhase::kRunning);

  EXPECT_TRUE(membership_.ReportWorkerExit(NodeId("n1"), WorkerId("w1"), 2, 0, 0).ok());
  const Worker w = GetWorker("w1");
  EXPECT_EQ(w.phase, WorkerPhase::kExited);
  EXPECT_EQ(w.exit, (WorkerExit{.exit_code = 2, .wall_ms = clock_.WallMillis()}));
  // Known already: OK, nothing changes.
  EXPECT_THAT(
      RecordsOf([&] { EXPECT_TRUE(membership_.ReportWorkerExit(NodeId("n1"), WorkerId("w1"), 0, 15, 42).ok()); }),
      IsEmpty());
  EXPECT_EQ(GetWorker("w1"), w);
}

// An agent's batch: each exit answered as it would be alone, the known ones recorded in the order reported.
TEST_F(MembershipTest, ReportWorkerExitsAnswersEachExit) {
  Register(Report("n1"));
  Register(Report("n2"));
  AddWorker("w1", "n1", WorkerPhase::kRunning);
  AddWorker("w2", "n1", WorkerPhase::kStarting);
  AddWorker("w3", "n1", WorkerPhase::kExited);
  AddWorker("w4", "n2", WorkerPhase::kRunning);
  std::vector<Membership::ReportedExit> exits;
  exits.push_back({WorkerId("w2"), WorkerExit{.exit_code = 3}, 77, clock_.WallMillis() - 2});
  exits.push_back({WorkerId("w-x"), WorkerExit{}});
  exits.push_back({WorkerId("w1"), WorkerExit{.signal = 9, .wall_ms = 1234}});
  exits.push_back({WorkerId("w3"), WorkerExit{.exit_code = 5}});
  exits.push_back({WorkerId("w4"), WorkerExit{}});
  std::vector<absl::Status> results;
  EXPECT_THAT(RecordsOf([&] { results = membership_.ReportWorkerExits(NodeId("n1"), std::move(exits)); }),
              ElementsAre("WorkerStarted", "WorkerExited", "WorkerExited"));
  EXPECT_THAT(results, ElementsAre(absl::OkStatus(), absl::NotFoundError("worker w-x is not known on node n1"),
                                   absl::OkStatus(), absl::OkStatus(),
                                   absl::NotFoundError("worker w4 is not known on node n1")));
  EXPECT_EQ(GetWorker("w2").pid, 77);
  EXPECT_EQ(GetWorker("w2").exit, (WorkerExit{.exit_code = 3, .wall_ms = clock_.WallMillis()}));
  EXPECT_EQ(GetWorker("w1").exit, (WorkerExit{.signal = 9, .wall_ms = 1234}));
  EXPECT_EQ(GetWorker("w3").exit, (WorkerExit{.wall_ms = 1500}));  // known already: unchanged
  EXPECT_EQ(GetWorker("w4").phase, WorkerPhase::kRunning);
  EXPECT_THAT(membership_.ReportWorkerExits(NodeId("n1"), {}), IsEmpty());
}

TEST_F(MembershipTest, AnExitBeforeTheStartsReplyRecordsTheStartToo) {
  Register(Report("n1"));
  AddWorker("w1", "n1", WorkerPhase::kStarting);
  const int64_t started = clock_.WallMillis() - 5;
  EXPECT_TRUE(membership_.ReportWorkerExit(NodeId("n1"), WorkerId("w1"), 0, 0, clock_.WallMillis(), 4242, started).ok());
  const Worker w = GetWorker("w1");
  EXPECT_EQ(w.phase, WorkerPhase::kExited);
  EXPECT_EQ(w.pid, 4242);
  EXPECT_EQ(w.start_wall_ms, started);
  EXPECT_EQ(w.exit, (WorkerExit{.exit_code = 0, .wall_ms = clock_.WallMillis()}));
}

TEST_F(MembershipTest, RestoreLivenessMarksAliveNodesUnconfirmed) {
  Apply(test_util::Registrations({test_util::CpuHost("n1"), test_util::CpuHost("n2")}));
  Apply({NodeDied{NodeId("n2"), 2, "gone", 1000}});
  membership_.RestoreLiveness();
  EXPECT_FALSE(liveness_.Confirmed(NodeId("n1")));
  EXPECT_EQ(liveness_.SilentMicros(NodeId("n1")), 0);
  EXPECT_EQ(liveness_.Heartbeat(NodeId("n1"), 1, nullptr), Liveness::Beat::kReregister);
  EXPECT_EQ(liveness_.SilentMicros(NodeId("n2")), std::nullopt);
}

}  // namespace membership_test
}  // namespace torus::head
