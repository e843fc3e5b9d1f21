#include "torus/head/workloads/run_machine.h"

#include <gtest/gtest.h>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "torus/train/run_spec.h"

namespace torus::head {
namespace run_machine_test {

constexpr int64_t kWall = 1'700'000'000'042;
const RunId kRun("run-0000000001");
const GroupId kGroup("pg-0000000002");

// A worker of the last attempt: still live (starting / running), or exited as `exit` says.
struct W {
  WorkerPhase phase = WorkerPhase::kRunning;
  WorkerExit exit;
};
W Live() { return W{}; }
W Starting() { return W{WorkerPhase::kStarting, {}}; }
W Code(int code, int64_t at) { return W{WorkerPhase::kExited, WorkerExit{.exit_code = code, .wall_ms = at}}; }
W Signal(int signal, int64_t at) { return W{WorkerPhase::kExited, WorkerExit{.signal = signal, .wall_ms = at}}; }
W Lost(const std::string& why, int64_t at) {
  return W{WorkerPhase::kExited, WorkerExit{.lost = true, .reason = why, .wall_ms = at}};
}
W StartFailed(const std::string& why, int64_t at) {
  return W{WorkerPhase::kExited, WorkerExit{.start_failed = true, .reason = why, .wall_ms = at}};
}

enum class Attempt { kNone, kRunning, kEnded };

struct Want {
  std::optional<std::string> end_attempt;  // the AttemptEnded reason
  std::optional<RunStatus> finish;
  std::string finish_message;
  bool start_attempt = false;
  bool stop_workers = false;
  bool release_group = false;
};

// One situation of a run, and the step its machine must take.
struct Row {
  std::string name;
  RunStatus status = RunStatus::kRunning;
  bool stop_requested = false;
  int max_failures = 3;
  int failures = 0;
  Attempt attempt = Attempt::kRunning;
  std::optional<PgState> group = PgState::kCreated;  // nullopt: forgotten
  std::string last_history;                           // the group's last history message ("" = no history)
  std::vector<W> workers;                             // rank i runs on node n<i+1>
  Want want;
};

void ExpectStep(const RunStep& got, const Want& want) {
  ASSERT_EQ(got.end_attempt.has_value(), want.end_attempt.has_value())
      << (got.end_attempt ? got.end_attempt->reason : "no AttemptEnded");
  if (want.end_attempt) {
    EXPECT_EQ(got.end_attempt->run, kRun);
    EXPECT_EQ(got.end_attempt->number, 1);
    EXPECT_EQ(got.end_attempt->reason, *want.end_attempt);
    EXPECT_EQ(got.end_attempt->wall_ms, kWall);
  }
  ASSERT_EQ(got.finish.has_value(), want.finish.has_value()) << (got.finish ? got.finish->message : "no RunFinished");
  if (want.finish) {
    EXPECT_EQ(got.finish->run, kRun);
    EXPECT_EQ(RunStatusName(got.finish->status), RunStatusName(*want.finish));
    EXPECT_EQ(got.finish->message, want.finish_message);
    EXPECT_EQ(got.finish->wall_ms, kWall);
  }
  EXPECT_EQ(got.start_attempt, want.start_attempt);
  EXPECT_EQ(got.stop_workers, want.stop_workers);
  EXPECT_EQ(got.release_group, want.release_group);
}

constexpr auto kCreated = PgState::kCreated;
constexpr auto kRestarting = RunStatus::kRestarting;
const std::string kSig9 = "rank 1 on n2 was killed by signal 9 (SIGKILL) from outside torus";

std::vector<Row> Rows() {
  return {
      // ---- Waiting to start ----
      {.name = "pending, group pending: waits",
       .status = RunStatus::kPending,
       .attempt = Attempt::kNone,
       .group = PgState::kPending,
       .want = {}},
      {.name = "pending, group created: first attempt",
       .status = RunStatus::kPending,
       .attempt = Attempt::kNone,
       .want = {.start_attempt = true}},
      {.name = "restarting, group created, a worker of attempt 1 still live: stop it, do not start",
       .status = kRestarting,
       .failures = 1,
       .attempt = Attempt::kEnded,
       .workers = {Code(0, 100), Signal(9, 90), Live(), Code(1, 95)},
       .want = {.stop_workers = true}},
      {.name = "restarting, a worker of attempt 1 still starting: stop it, do not start",
       .status = kRestarting,
       .failures = 1,
       .attempt = Attempt::kEnded,
       .workers = {Starting(), Signal(9, 90)},
       .want = {.stop_workers = true}},
      {.name = "restarting, group created, every worker gone: next attempt",
       .status = kRestarting,
       .failures = 1,
       .attempt = Attempt::kEnded,
       .workers = {Signal(15, 120), Signal(9, 90), Lost("node n3 died: gone", 100), Code(1, 95)},
       .want = {.start_attempt = true}},
      {.name = "restarting, group rescheduling, every worker gone: waits for the group",
       .status = kRestarting,
       .failures = 1,
       .attempt = Attempt::kEnded,
       .group = PgState::kRescheduling,
       .workers = {Signal(15, 120), Lost("node n2 died: gone", 100)},
       .want = {}},

      // ---- Running ----
      {.name = "all ranks still running: nothing", .workers = {Live(), Live(), Live(), Live()}, .want = {}},
      {.name = "some ranks exited 0, others run: nothing",
       .workers = {Code(0, 100), Live(), Code(0, 101), Starting()},
       .want = {}},
      {.name = "all 4 exited 0: SUCCEEDED and release",
       .workers = {Code(0, 100), Code(0, 104), Code(0, 102), Code(0, 101)},
       .want = {.finish = RunStatus::kSucceeded, .finish_message = "all 4 workers exited 0", .release_group = true}},
      {.name = "a rank killed by signal 9: attempt ends, the others stop",
       .workers = {Live(), Signal(9, 100), Live(), Code(0, 99)},
       .want = {.end_attempt = kSig9 + "; ranks 0, 2 still running; rank 3 exited 0", .stop_workers = true}},
      {.name = "the earliest failure by exit time names the reason, not the lowest rank",
       .workers = {Code(1, 300), Signal(9, 100), Code(2, 200), Code(0, 50)},
       .want = {.end_attempt = kSig9 + "; rank 0 exited 1 after its peer died; rank 2 exited 2 after its peer died; rank "
                                       "3 exited 0"}},
      {.name = "a tie on exit time goes to the lower rank",
       .workers = {Code(0, 50), Live(), Code(2, 100), Code(1, 100)},
       .want = {.end_attempt = "rank 2 on n3 exited with code 2; rank 3 exited 1 after its peer died; rank 0 exited 0; "
                               "rank 1 still running",
                .stop_workers = true}},
      {.name = "a rank lost with its host",
       .group = PgState::kRescheduling,
       .last_history = "node n3 died: bundle 2 lost; placing again",
       .workers = {Live(), Live(), Lost("node n3 died: silent for 10 s", 100)},
       .want = {.end_attempt = "rank 2 on n3 was lost: node n3 died: silent for 10 s; ranks 0, 1 still running",
                .stop_workers = true}},
      {.name = "a rank that failed to start",
       .workers = {StartFailed("agent refused: disk full", 100), Live()},
       .want = {.end_attempt = "rank 0 on n1 failed to start: agent refused: disk full; rank 1 still running",
                .stop_workers = true}},
      {.name = "group not CREATED while running (host lost): attempt ends with its last history message",
       .group = PgState::kRescheduling,
       .last_history = "node n3 died: bundle 2 lost; placing again",
       .workers = {Live(), Live(), Live()},
       .want = {.end_attempt = "its reservation lost a host: node n3 died: bundle 2 lost; placing again", .stop_workers = true}},
      {.name = "group pending with no history while running",
       .group = PgState::kPending,
       .workers = {Live(), Code(0, 10)},
       .want = {.end_attempt = "its reservation lost a host: a host was lost", .stop_workers = true}},

      // ---- max_failures ----
      {.name = "max_failures=1 exceeded: FAILED",
       .max_failures = 1,
       .failures = 1,
       .workers = {Live(), Signal(9, 100)},
       .want = {.end_attempt = kSig9 + "; rank 0 still running",
                .finish = RunStatus::kFailed,
                .finish_message = "failed 2 times (max_failures=1); last: " + kSig9 + "; rank 0 still running",
                .stop_workers = true,
                .release_group = true}},
      {.name = "max_failures=0: the first failure is fatal",
       .max_failures = 0,
       .workers = {Code(0, 10), Signal(9, 100)},
       .want = {.end_attempt = kSig9 + "; rank 0 exited 0",
                .finish = RunStatus::kFailed,
                .finish_message = "failed 1 time (max_failures=0); last: " + kSig9 + "; rank 0 exited 0",
                .release_group = true}},
      {.name = "max_failures=1, first failure: restart",
       .max_failures = 1,
       .workers = {Live(), Signal(9, 100)},
       .want = {.end_attempt = kSig9 + "; rank 0 still running", .stop_workers = true}},
      {.name = "max_failures=-1 never gives up",
       .max_failures = -1,
       .failures = 1000,
       .workers = {Signal(15, 101), Signal(9, 100)},
       .want = {.end_attempt = kSig9 + "; rank 0 killed by signal 15 (SIGTERM) after its peer died"}},

      // ---- Stop and removal ----
      {.name = "stop while running",
       .stop_requested = true,
       .workers = {Live(), Code(0, 10)},
       .want = {.finish = RunStatus::kStopped,
                .finish_message = "stopped by the user",
                .stop_workers = true,
                .release_group = true}},
      {.name = "stop while pending",
       .status = RunStatus::kPending,
       .stop_requested = true,
       .attempt = Attempt::kNone,
       .group = PgState::kPending,
       .want = {.finish = RunStatus::kStopped, .finish_message = "stopped by the user", .release_group = true}},
      {.name = "stop wins over a failure",
       .stop_requested = true,
       .workers = {Signal(15, 10), Signal(9, 5)},
       .want = {.finish = RunStatus::kStopped, .finish_message = "stopped by the user", .release_group = true}},
      {.name = "group removed while running",
       .group = PgState::kRemoved,
       .workers = {Live(), Live()},
       .want = {.finish = RunStatus::kFailed,
                .finish_message = "the run's placement group was removed",
                .stop_workers = true}},
      {.name = "group failed while pending",
       .status = RunStatus::kPending,
       .attempt = Attempt::kNone,
       .group = PgState::kFailed,
       .want = {.finish = RunStatus::kFailed, .finish_message = "the run's placement group was removed"}},
      {.name = "group forgotten while restarting",
       .status = kRestarting,
       .failures = 1,
       .attempt = Attempt::kEnded,
       .group = std::nullopt,
       .workers = {Signal(9, 5)},
       .want = {.finish = RunStatus::kFailed, .finish_message = "the run's placement group was removed"}},

      // ---- Terminal: give back what is still held ----
      {.name = "succeeded, nothing held",
       .status = RunStatus::kSucceeded,
       .group = PgState::kRemoved,
       .workers = {Code(0, 1), Code(0, 2)},
       .want = {}},
      {.name = "stopped, workers and group still held",
       .status = RunStatus::kStopped,
       .stop_requested = true,
       .workers = {Live(), Code(0, 2)},
       .want = {.stop_workers = true, .release_group = true}},
      {.name = "failed, group still held",
       .status = RunStatus::kFailed,
       .workers = {Signal(9, 1)},
       .want = {.release_group = true}},
  };
}

TEST(DecideRunTest, Table) {
  for (const Row& row : Rows()) {
    SCOPED_TRACE(row.name);
    head::Run run;
    run.id = kRun;
    run.group = kGroup;
    run.status = row.status;
    run.stop_requested = row.stop_requested;
    run.spec.run.max_failures = row.max_failures;
    run.failures = row.failures;
    if (row.attempt != Attempt::kNone) {
      RunAttempt a;
      a.number = 1;
      a.start_time_ms = 1;
      if (row.attempt == Attempt::kEnded) {
        a.end_time_ms = 200;
        a.end_reason = kSig9;
      }
      run.attempts.push_back(a);
    }
    Group group;
    group.id = kGroup;
    if (row.group) group.state = *row.group;
    if (!row.last_history.empty()) {
      group.history.push_back({1, "CREATED", "placed"});
      group.history.push_back({2, PgStateName(group.state), row.last_history});
    }
    std::vector<Worker> workers(row.workers.size());
    RunFacts facts;
    facts.run = &run;
    facts.group = row.group ? &group : nullptr;
    for (size_t i = 0; i < row.workers.size(); ++i) {
      Worker& w = workers[i];
      w.id = WorkerId(kRun.str() + "-a1-r" + std::to_string(i));
      w.owner = Owner::Run(kRun);
      w.attempt = 1;
      w.rank = static_cast<int>(i);
      w.node = NodeId("n" + std::to_string(i + 1));
      w.phase = row.workers[i].phase;
      if (w.phase == WorkerPhase::kExited) w.exit = row.workers[i].exit;
    }
    for (const Worker& w : workers) facts.workers.push_back(&w);
    ExpectStep(DecideRun(facts, kWall), row.want);
  }
}

TEST(DecideRunTest, AnUnknownWorkerIsNotLiveAndNotASuccess) {
  // A rank whose worker the state forgot does not hold the next attempt back, nor count as exited 0.
  head::Run run;
  run.id = kRun;
  run.group = kGroup;
  run.status = RunStatus::kRunning;
  run.spec.run.max_failures = 3;
  run.attempts.push_back(RunAttempt{.number = 1, .start_time_ms = 1});
  Group group;
  group.id = kGroup;
  group.state = PgState::kCreated;
  Worker ok;
  ok.id = WorkerId("w0");
  ok.phase = WorkerPhase::kExited;
  ok.exit = WorkerExit{};
  RunFacts facts{&run, &group, {&ok, nullptr}};
  ExpectStep(DecideRun(facts, kWall), {});

  run.attempts.back().end_time_ms = 5;
  run.status = RunStatus::kRestarting;
  ExpectStep(DecideRun(facts, kWall), {.start_attempt = true});
}

// Every rank exited 0 (the training finished), and before the driver looked a host of the group was lost (the group
// is RESCHEDULING): the run SUCCEEDED; the lost host does not make it a failed attempt (as a job's exit wins too).
TEST(DecideRunTest, AllRanksExitedZeroSucceedsEvenIfAHostWasLostAfterwards) {
  head::Run run;
  run.id = kRun;
  run.group = kGroup;
  run.status = RunStatus::kRunning;
  run.spec.run.max_failures = 0;
  run.attempts.push_back(RunAttempt{.number = 1, .start_time_ms = 1});
  Group group;
  group.id = kGroup;
  group.state = PgState::kRescheduling;
  group.history.push_back({2, "RESCHEDULING", "node n2 died: bundle 1 lost; placing again"});
  std::vector<Worker> workers(2);
  RunFacts facts{&run, &group, {}};
  for (size_t i = 0; i < workers.size(); ++i) {
    workers[i].id = WorkerId("w" + std::to_string(i));
    workers[i].rank = static_cast<int>(i);
    workers[i].node = NodeId("n" + std::to_string(i + 1));
    workers[i].phase = WorkerPhase::kExited;
    workers[i].exit = WorkerExit{.wall_ms = 100};
    facts.workers.push_back(&workers[i]);
  }
  ExpectStep(DecideRun(facts, kWall),
             {.finish = RunStatus::kSucceeded, .finish_message = "all 2 workers exited 0", .release_group = true});
}

// ---- RunFactsOf over a ClusterState ----

TEST(RunFactsOfTest, WorkersOfTheLastAttemptByRank) {
  train::RunSpec spec;
  spec.scaling.num_workers = 2;
  spec.run.name = "fit";
  spec.run.storage_path = "/tmp/torus-test-runs";
  spec.entrypoint = {"python3", "fit.py"};
  ClusterState state;
  Group g;
  g.id = kGroup;
  g.owner = Owner::Run(kRun);
  ASSERT_TRUE(state.Apply(GroupSubmitted{g}).ok());
  ASSERT_TRUE(state.Apply(RunSubmitted{kRun, train::RunSpecToJson(spec), "secret", kGroup, {}, kWall}).ok());

  RunFacts none = RunFactsOf(state, *state.FindRun(kRun));
  EXPECT_EQ(none.group, state.FindGroup(kGroup));
  EXPECT_TRUE(none.workers.empty());
  EXPECT_FALSE(DecideRun(none, kWall).start_attempt);  // the group is PENDING

  for (int n = 1; n <= 2; ++n) {
    RunAttempt a;
    a.number = n;
    a.start_time_ms = kWall + n;
    for (int r = 0; r < 2; ++r) {
      a.ranks.push_back(RankState{r, WorkerId(kRun.str() + "-a" + std::to_string(n) + "-r" + std::to_string(r)),
                                  NodeId("n1"), "10.0.0.1", "", {}, {}});
    }
    ASSERT_TRUE(state.Apply(AttemptStarted{kRun, a}).ok());
    // Only rank 1's worker is recorded: rank 0's is unknown to the state.
    Worker w;
    w.id = a.ranks[1].worker;
    w.owner = Owner::Run(kRun);
    w.attempt = n;
    w.rank = 1;
    ASSERT_TRUE(state.Apply(WorkerStarting{w}).ok());
    if (n == 1) {
      ASSERT_TRUE(state.Apply(AttemptEnded{kRun, 1, "rank 1 exited with code 1", kWall + 5}).ok());
    }
  }
  RunFacts facts = RunFactsOf(state, *state.FindRun(kRun));
  ASSERT_EQ(facts.workers.size(), 2u);
  EXPECT_EQ(facts.workers[0], nullptr);
  ASSERT_NE(facts.workers[1], nullptr);
  EXPECT_EQ(facts.workers[1]->id, WorkerId(kRun.str() + "-a2-r1"));
}

}  // namespace run_machine_test
}  // namespace torus::head

namespace torus::head {
namespace run_machine_test {

// A run waiting for its slices, `waited_ms` after its last attempt ended (or after its submission, with none).
RunStep WaitingForSlices(bool after_attempt, int timeout_s, int64_t waited_ms) {
  head::Run run;
  run.id = kRun;
  run.group = kGroup;
  run.status = after_attempt ? RunStatus::kRestarting : RunStatus::kPending;
  run.spec.run.max_failures = 3;
  run.spec.run.placement_timeout_s = timeout_s;
  run.created_time_ms = 1000;
  if (after_attempt) {
    run.failures = 1;
    run.attempts.push_back(RunAttempt{.number = 1, .start_time_ms = 2000, .end_time_ms = 5000,
                                      .end_reason = "host h1 lost (no heartbeat for 3.0 s)", .explained = true});
  }
  Group group;
  group.id = kGroup;
  group.state = after_attempt ? PgState::kRescheduling : PgState::kPending;
  group.reason = "no slice of v6e 4x4 is free";
  RunFacts facts;
  facts.run = &run;
  facts.group = &group;
  return DecideRun(facts, (after_attempt ? 5000 : 1000) + waited_ms);
}

TEST(DecideRunTest, APlacementThatCannotBeRenewedInTimeFailsTheRun) {
  RunStep waiting = WaitingForSlices(true, 30, 29'999);
  EXPECT_FALSE(waiting.finish.has_value());
  EXPECT_EQ(waiting.wake_at_ms, 35'000);
  RunStep failed = WaitingForSlices(true, 30, 30'000);
  ASSERT_TRUE(failed.finish.has_value());
  EXPECT_EQ(RunStatusName(failed.finish->status), "FAILED");
  EXPECT_EQ(failed.finish->message,
            "its placement could not be renewed within 30 s: no slice of v6e 4x4 is free (attempt 1 ended: host h1 "
            "lost (no heartbeat for 3.0 s))");
  EXPECT_TRUE(failed.release_group);
}

TEST(DecideRunTest, TheFirstPlacementTimesOutFromTheSubmission) {
  EXPECT_FALSE(WaitingForSlices(false, 5, 4999).finish.has_value());
  RunStep failed = WaitingForSlices(false, 5, 5000);
  ASSERT_TRUE(failed.finish.has_value());
  EXPECT_EQ(failed.finish->message, "its placement could not be made within 5 s: no slice of v6e 4x4 is free");
}

TEST(DecideRunTest, WithoutAPlacementTimeoutARunWaitsAsLongAsItTakes) {
  RunStep step = WaitingForSlices(true, 0, 86'400'000);
  EXPECT_FALSE(step.finish.has_value());
  EXPECT_EQ(step.wake_at_ms, 0);
}

TEST(DecideRunTest, AnEndedAttemptIsExplainedWhenItsWorkersAreGoneOrTheWindowPassed) {
  head::Run run;
  run.id = kRun;
  run.group = kGroup;
  run.status = RunStatus::kRestarting;
  run.spec.run.max_failures = 3;
  run.failures = 1;
  run.attempts.push_back(RunAttempt{.number = 1, .start_time_ms = 10, .end_time_ms = 1000,
                                    .end_reason = "rank 0 on n1 exited with code 1; rank 1 still running"});
  Group group;
  group.id = kGroup;
  group.state = PgState::kCreated;
  Worker r0, r1;
  r0.rank = 0;
  r0.node = NodeId("n1");
  r0.phase = WorkerPhase::kExited;
  r0.exit = WorkerExit{.exit_code = 1, .wall_ms = 990};
  r1.rank = 1;
  r1.node = NodeId("n2");
  r1.phase = WorkerPhase::kRunning;
  RunFacts facts{&run, &group, {&r0, &r1}, 4000};
  // Rank 1 still runs: wait, up to the window.
  RunStep step = DecideRun(facts, 2000);
  EXPECT_FALSE(step.explain.has_value());
  EXPECT_EQ(step.wake_at_ms, 5000);
  // The window passed: settled with what is known.
  step = DecideRun(facts, 5000);
  ASSERT_TRUE(step.explain.has_value());
  EXPECT_EQ(step.explain->reason, "rank 0 on n1 exited with code 1; rank 1 still running");
  // Rank 1 was stopped by torus: settled at once, and the next attempt may start in the same step.
  r1.phase = WorkerPhase::kExited;
  r1.exit = WorkerExit{.signal = 15, .wall_ms = 1100, .stopped = true};
  step = DecideRun(facts, 1200);
  ASSERT_TRUE(step.explain.has_value());
  EXPECT_EQ(step.explain->cause, "exit_code");
  EXPECT_EQ(step.explain->reason, "rank 0 on n1 exited with code 1; rank 1 stopped by torus");
  EXPECT_EQ(step.explain->run_message, "");
  EXPECT_TRUE(step.start_attempt);
}

}  // namespace run_machine_test
}  // namespace torus::head

namespace torus::head {
namespace run_machine_test {

TEST(DecideRunTest, ARunWhoseGroupWasRemovedIsExplainedByItsGroup) {
  head::Run run;
  run.id = kRun;
  run.group = kGroup;
  run.status = RunStatus::kFailed;
  run.end_time_ms = 1000;
  run.message = "the run's placement group was removed";
  run.attempts.push_back(RunAttempt{.number = 1, .start_time_ms = 10, .end_time_ms = 1000,
                                    .end_reason = "the run's placement group was removed"});
  Group group;
  group.id = kGroup;
  group.state = PgState::kRemoved;
  group.history.push_back({900, "REMOVED", "removed by the user"});
  Worker r0;
  r0.rank = 0;
  r0.node = NodeId("n1");
  r0.phase = WorkerPhase::kExited;
  r0.exit = WorkerExit{.signal = 15, .wall_ms = 1100, .stopped = true};
  RunFacts facts{&run, &group, {&r0}, 4000};
  const RunStep step = DecideRun(facts, 1200);
  ASSERT_TRUE(step.explain.has_value());
  EXPECT_EQ(step.explain->cause, "placement");
  EXPECT_EQ(step.explain->reason, "its placement group ended: removed by the user");
  EXPECT_EQ(step.explain->run_message, "");  // the run's own message stays
}

}  // namespace run_machine_test
}  // namespace torus::head
