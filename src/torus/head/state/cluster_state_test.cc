#include "torus/head/state/cluster_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "torus/head/state/codec.h"
#include "torus/train/run_spec.h"

namespace torus::head {
namespace cluster_state_test {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

ResourceSet Res(double cpu, double gpu = 0) {
  ResourceSet r;
  r.Set("CPU", cpu);
  r.Set("GPU", gpu);
  return r;
}

NodeRegistered Reg(const std::string& id, uint64_t incarnation, int64_t wall_ms = 1000, double gpus = 4) {
  NodeRegistered r;
  r.info.node_id = id;
  r.info.address = "10.0.0." + id;
  r.info.hostname = "host-" + id;
  r.info.total = Res(8, gpus);
  r.info.labels = {{"zone", "z1"}};
  r.info.agent_port = 7000;
  r.incarnation = incarnation;
  r.wall_ms = wall_ms;
  return r;
}

Group NewGroup(const std::string& id, const std::string& name, uint64_t seq, PgKind kind = PgKind::kBundles) {
  Group g;
  g.id = GroupId(id);
  g.name = name;
  g.kind = kind;
  g.seq = seq;
  g.created_wall_ms = 500;
  return g;
}

HeldBundle Bundle(int index, const std::string& node, double cpu, std::vector<int> gpus, std::vector<int> chips = {},
                  const std::string& slice = "") {
  HeldBundle b;
  b.index = index;
  b.ledger_index = index;
  b.node = NodeId(node);
  b.slice_name = slice;
  b.gpus = std::move(gpus);
  b.chips = std::move(chips);
  b.resources = Res(cpu, static_cast<double>(b.gpus.size()));
  return b;
}

Worker NewWorker(const std::string& id, Owner owner, const std::string& node) {
  Worker w;
  w.id = WorkerId(id);
  w.owner = std::move(owner);
  w.node = NodeId(node);
  return w;
}

Job NewJob(const std::string& id) {
  Job j;
  j.id = JobId(id);
  j.request.entrypoint = "echo hi";
  j.request.submission_id = id;
  j.submit_time_ms = 50;
  return j;
}

train::RunSpec CpuRunSpec() {
  train::RunSpec spec;
  spec.scaling.num_workers = 2;
  spec.entrypoint = {"python3", "x.py"};
  spec.run.name = "r";
  spec.run.storage_path = "/tmp/x";
  return spec;
}

RunAttempt Attempt(int number, int ranks, const std::string& checkpoint = "") {
  RunAttempt a;
  a.number = number;
  a.start_time_ms = 1000 * number;
  a.checkpoint_dir = checkpoint;
  for (int i = 0; i < ranks; ++i) a.ranks.push_back({i, WorkerId(absl::StrCat("w", number, "-", i)), NodeId("a")});
  return a;
}

// "time STATE message" per history entry, for readable comparisons.
std::vector<std::string> History(const Group& g) {
  std::vector<std::string> out;
  for (const PgEvent& e : g.history) out.push_back(absl::StrCat(e.time_ms, " ", e.state, " ", e.message));
  return out;
}

class ClusterStateTest : public ::testing::Test {
 protected:
  // Applies records that must fit; a refusal fails the test and names the record.
  void Ok(const std::vector<Record>& records) {
    for (const Record& r : records) {
      const absl::Status st = s_.Apply(r);
      ASSERT_TRUE(st.ok()) << StateCodec::EncodeRecord(r) << ": " << st;
    }
  }

  // One of everything: node a alive (incarnation 1), b dead; group pg-1 "train" CREATED on a; ended group pg-old;
  // job j1 PENDING with worker w-j1 starting; job j2 SUCCEEDED with worker w-j2 exited; run r1 RUNNING attempt 1 of
  // 2 ranks; run r-done SUCCEEDED.
  void ApplyBase() {
    const std::string spec = train::RunSpecToJson(CpuRunSpec());
    Ok({HeadStarted{1, 900}, Reg("a", 1), Reg("b", 2),
        NodeDied{.node = NodeId("b"), .incarnation = 2, .reason = "silent", .wall_ms = 2000},
        GroupSubmitted{NewGroup("pg-1", "train", 1)},
        GroupPlaced{.group = GroupId("pg-1"), .bundles = {Bundle(0, "a", 2, {0, 1})}, .message = "placed"},
        GroupSubmitted{NewGroup("pg-old", "", 2)},
        GroupEnded{.group = GroupId("pg-old"), .state = PgState::kRemoved, .message = "removed"},
        JobSubmitted{NewJob("j1")}, JobSubmitted{NewJob("j2")},
        WorkerStarting{NewWorker("w-j1", Owner::Job(JobId("j1")), "a")},
        WorkerStarting{NewWorker("w-j2", Owner::Job(JobId("j2")), "a")},
        WorkerExited{.worker = WorkerId("w-j2"), .exit = {.wall_ms = 1300}},
        JobUpdated{.job = JobId("j2"), .status = JobStatus::kSucceeded, .message = "done", .wall_ms = 1300},
        RunSubmitted{.run = RunId("r1"), .spec_json = spec, .token = "tok", .group = GroupId("pg-1")},
        AttemptStarted{RunId("r1"), Attempt(1, 2)},
        RunSubmitted{.run = RunId("r-done"), .spec_json = spec, .token = "tok2"},
        RunFinished{.run = RunId("r-done"), .status = RunStatus::kSucceeded, .message = "ok", .wall_ms = 950}});
  }
  ClusterState s_;
};

TEST_F(ClusterStateTest, ARemovedDeadNodeIsForgotten) {
  ApplyBase();
  ASSERT_NE(s_.FindNode(NodeId("b")), nullptr);
  Ok({NodeRemoved{.node = NodeId("b"), .reason = "its slice was removed by the autoscaler", .wall_ms = 3000}});
  EXPECT_EQ(s_.FindNode(NodeId("b")), nullptr);
  EXPECT_EQ(s_.alive_nodes(), 1u);
  EXPECT_NE(s_.FindNode(NodeId("a")), nullptr);
}

struct RefusedCase {
  Record record;
  absl::StatusCode code;
  std::string message;
};

TEST_F(ClusterStateTest, RefusedRecordsNameTheProblemAndLeaveTheStateUnchanged) {
  using C = absl::StatusCode;
  train::RunSpec zero_workers = CpuRunSpec();
  zero_workers.scaling.num_workers = 0;
  const std::string bad_plan = train::RunSpecToJson(zero_workers);
  const std::string spec = train::RunSpecToJson(CpuRunSpec());
  const std::vector<RefusedCase> cases = {
      {HeadStarted{1, 5}, C::kInvalidArgument, "HeadStarted: epoch 1 is not after 1"},
      {Reg("", 3), C::kInvalidArgument, "NodeRegistered: empty node id"},
      {NodeDied{.node = NodeId("zz"), .incarnation = 1}, C::kNotFound, "NodeDied: unknown node zz"},
      {NodeDied{.node = NodeId("b"), .incarnation = 2}, C::kFailedPrecondition,
       "NodeDied: node b incarnation 2 is not alive"},
      {NodeDied{.node = NodeId("a"), .incarnation = 9}, C::kFailedPrecondition,
       "NodeDied: node a incarnation 9 is not alive"},
      {NodeRemoved{.node = NodeId("zz")}, C::kNotFound, "NodeRemoved: unknown node zz"},
      {NodeRemoved{.node = NodeId("a")}, C::kFailedPrecondition, "NodeRemoved: node a is alive"},
      {GroupSubmitted{NewGroup("", "x", 3)}, C::kInvalidArgument, "GroupSubmitted: empty group id"},
      {GroupSubmitted{NewGroup("pg-old", "", 3)}, C::kAlreadyExists, "GroupSubmitted: group pg-old exists"},
      {GroupSubmitted{NewGroup("pg-2", "train", 3)}, C::kAlreadyExists, "GroupSubmitted: a live group is named train"},
      {GroupPlaced{.group = GroupId("pg-x")}, C::kNotFound, "GroupPlaced: unknown group pg-x"},
      {GroupPlaced{.group = GroupId("pg-old")}, C::kFailedPrecondition, "GroupPlaced: group pg-old ended"},
      {GroupWaiting{.group = GroupId("pg-x")}, C::kNotFound, "GroupWaiting: unknown group pg-x"},
      {GroupWaiting{.group = GroupId("pg-old")}, C::kFailedPrecondition, "GroupWaiting: group pg-old ended"},
      {GroupBundlesLost{.group = GroupId("pg-x")}, C::kNotFound, "GroupBundlesLost: unknown group pg-x"},
      {GroupBundlesLost{.group = GroupId("pg-old")}, C::kFailedPrecondition, "GroupBundlesLost: group pg-old ended"},
      {GroupEnded{.group = GroupId("pg-x")}, C::kNotFound, "GroupEnded: unknown group pg-x"},
      {GroupEnded{.group = GroupId("pg-old")}, C::kFailedPrecondition, "GroupEnded: group pg-old ended"},
      {GroupEnded{.group = GroupId("pg-1"), .state = PgState::kCreated}, C::kInvalidArgument,
       "GroupEnded: state must be REMOVED or FAILED"},
      {WorkerStarting{NewWorker("", Owner(), "a")}, C::kInvalidArgument, "WorkerStarting: empty worker id"},
      {WorkerStarting{NewWorker("w-j1", Owner(), "a")}, C::kAlreadyExists, "WorkerStarting: worker w-j1 is running"},
      {WorkerStarting{NewWorker("w-9", Owner::Job(JobId("nope")), "a")}, C::kNotFound,
       "WorkerStarting: unknown job nope"},
      {WorkerStarting{NewWorker("w-9", Owner::Run(RunId("nope")), "a")}, C::kNotFound,
       "WorkerStarting: unknown run nope"},
      {WorkerStarted{.worker = WorkerId("w-9")}, C::kNotFound, "WorkerStarted: unknown worker w-9"},
      {WorkerExited{.worker = WorkerId("w-9")}, C::kNotFound, "WorkerExited: unknown worker w-9"},
      {WorkerExited{.worker = WorkerId("w-j2"), .exit = {.signal = 9}}, C::kFailedPrecondition,
       "WorkerExited: worker w-j2 already exited"},
      {JobSubmitted{NewJob("")}, C::kInvalidArgument, "JobSubmitted: empty job id"},
      {JobSubmitted{NewJob("j1")}, C::kAlreadyExists, "JobSubmitted: job j1 exists"},
      {JobUpdated{.job = JobId("nope")}, C::kNotFound, "JobUpdated: unknown job nope"},
      {JobUpdated{.job = JobId("j2"), .status = JobStatus::kFailed}, C::kFailedPrecondition,
       "JobUpdated: job j2 is SUCCEEDED already"},
      {JobStopRequested{JobId("nope")}, C::kNotFound, "JobStopRequested: unknown job nope"},
      {JobDeleted{JobId("nope")}, C::kNotFound, "JobDeleted: unknown job nope"},
      {JobDeleted{JobId("j1")}, C::kFailedPrecondition, "JobDeleted: job j1 has not ended"},
      {RunSubmitted{.spec_json = spec}, C::kInvalidArgument, "RunSubmitted: empty run id"},
      {RunSubmitted{.run = RunId("r1"), .spec_json = spec}, C::kAlreadyExists, "RunSubmitted: run r1 exists"},
      {RunSubmitted{.run = RunId("r2"), .spec_json = "{"}, C::kInvalidArgument,
       absl::StrCat("RunSubmitted: spec: ", train::RunSpecFromJson("{").status().message())},
      {RunSubmitted{.run = RunId("r2"), .spec_json = bad_plan}, C::kInvalidArgument,
       absl::StrCat("RunSubmitted: plan: ", train::PlanRun(zero_workers).status().message())},
      {AttemptStarted{RunId("nope"), Attempt(1, 2)}, C::kNotFound, "AttemptStarted: unknown run nope"},
      {AttemptStarted{RunId("r1"), Attempt(3, 2)}, C::kInvalidArgument,
       "AttemptStarted: attempt 3 of run r1 is not the next one"},
      {AttemptStarted{RunId("r-done"), Attempt(1, 2)}, C::kFailedPrecondition, "AttemptStarted: run r-done has ended"},
      {AttemptEnded{.run = RunId("r1"), .number = 2}, C::kFailedPrecondition,
       "AttemptEnded: attempt 2 of run r1 is not the running one"},
      {RunFinished{.run = RunId("r1"), .status = RunStatus::kRunning}, C::kInvalidArgument,
       "RunFinished: status must be SUCCEEDED, FAILED or STOPPED"},
      {RunFinished{.run = RunId("r-done")}, C::kFailedPrecondition, "RunFinished: run r-done has ended"},
      {RunStopRequested{RunId("nope")}, C::kNotFound, "RunStopRequested: unknown run nope"},
      {RunReported{.run = RunId("r1"), .attempt = 2}, C::kFailedPrecondition,
       "RunReported: attempt 2 of run r1 is not the running one"},
      {RunReported{.run = RunId("r1"), .attempt = 1, .rank = 2}, C::kInvalidArgument,
       "RunReported: rank 2 is out of range"},
      {RunReported{.run = RunId("r1"), .attempt = 1, .rank = -1}, C::kInvalidArgument,
       "RunReported: rank -1 is out of range"},
      {CheckpointCommitted{.run = RunId("nope")}, C::kNotFound, "CheckpointCommitted: unknown run nope"},
  };
  for (const RefusedCase& c : cases) {
    SCOPED_TRACE(c.message);
    s_ = ClusterState();
    ApplyBase();
    const std::string before = StateCodec::EncodeState(s_);
    const absl::Status st = s_.Apply(c.record);
    EXPECT_EQ(st.code(), c.code) << st;
    EXPECT_EQ(st.message(), c.message);
    EXPECT_EQ(StateCodec::EncodeState(s_), before);
    EXPECT_EQ(s_.alive_nodes(), 1u);
  }
}

TEST_F(ClusterStateTest, NodesRegisterDieAndComeBack) {
  Ok({Reg("a", 1, 1000), Reg("b", 2, 1100)});
  EXPECT_EQ(s_.alive_nodes(), 2u);
  EXPECT_EQ(s_.last_incarnation(), 2u);
  const Node* a = s_.FindNode(NodeId("a"));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->info, Reg("a", 1).info);
  EXPECT_EQ(a->state, NodeState::kAlive);
  EXPECT_EQ(a->incarnation, 1u);
  EXPECT_EQ(a->registered_wall_ms, 1000);
  EXPECT_EQ(a->target(), "10.0.0.a:7000");

  Ok({NodeDied{NodeId("a"), 1, "missed heartbeats", 5000}});
  EXPECT_EQ(s_.alive_nodes(), 1u);
  EXPECT_EQ(a->state, NodeState::kDead);
  EXPECT_EQ(a->death_reason, "missed heartbeats");
  EXPECT_EQ(a->died_wall_ms, 5000);
  EXPECT_EQ(s_.nodes().size(), 2u);  // dead nodes stay shown

  Ok({Reg("a", 3, 6000)});
  EXPECT_EQ(s_.alive_nodes(), 2u);
  EXPECT_EQ(a->state, NodeState::kAlive);
  EXPECT_EQ(a->incarnation, 3u);
  EXPECT_EQ(a->registered_wall_ms, 6000);
  EXPECT_EQ(a->died_wall_ms, 0);
  EXPECT_EQ(a->death_reason, "");
  EXPECT_EQ(s_.last_incarnation(), 3u);

  // An alive node registering again is counted once; the highest incarnation given is kept.
  Ok({Reg("b", 1, 7000)});
  EXPECT_EQ(s_.alive_nodes(), 2u);
  EXPECT_EQ(s_.FindNode(NodeId("b"))->incarnation, 1u);
  EXPECT_EQ(s_.last_incarnation(), 3u);
  EXPECT_EQ(s_.FindNode(NodeId("zz")), nullptr);
}

TEST_F(ClusterStateTest, DeadNodesBeyondTheLimitAreForgottenOldestDeathFirst) {
  constexpr size_t kLimit = ClusterState::kMaxDeadNodes;
  ASSERT_EQ(kLimit, 1000u);
  Ok({Reg("alive", 1)});
  auto id = [](size_t i) { return absl::StrCat("n", 10000 + i); };
  for (size_t i = 0; i < kLimit + 2; ++i) Ok({Reg(id(i), i + 2)});
  // They die in descending id order, so that the oldest deaths are the highest ids.
  int64_t wall = 10'000;
  for (size_t k = 0; k < kLimit + 2; ++k) {
    const size_t i = kLimit + 1 - k;
    Ok({NodeDied{NodeId(id(i)), i + 2, "gone", wall++}});
    if (k + 1 == kLimit) {
      EXPECT_EQ(s_.nodes().size(), kLimit + 3);  // exactly the limit dead: nothing forgotten yet
    }
  }
  EXPECT_EQ(s_.nodes().size(), kLimit + 1);
  EXPECT_EQ(s_.alive_nodes(), 1u);
  EXPECT_EQ(s_.FindNode(NodeId(id(kLimit + 1))), nullptr);
  EXPECT_EQ(s_.FindNode(NodeId(id(kLimit))), nullptr);
  EXPECT_NE(s_.FindNode(NodeId(id(kLimit - 1))), nullptr);
  EXPECT_NE(s_.FindNode(NodeId(id(0))), nullptr);
  EXPECT_NE(s_.FindNode(NodeId("alive")), nullptr);
}

TEST_F(ClusterStateTest, BundleGroupLifecycle) {
  Ok({GroupSubmitted{NewGroup("pg-1", "train", 5)}});
  EXPECT_EQ(s_.next_group_seq(), 6u);
  const Group* g = s_.FindGroup(GroupId("pg-1"));
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(s_.FindGroup("pg-1"), g);
  EXPECT_EQ(s_.FindGroup("train"), g);
  EXPECT_EQ(s_.FindGroup("nope"), nullptr);
  EXPECT_EQ(g->state, PgState::kPending);
  EXPECT_THAT(g->history, IsEmpty());

  // History gains an entry only when the state or the reason changes.
  Ok({GroupWaiting{GroupId("pg-1"), "no node has 4 GPU", 10}, GroupWaiting{GroupId("pg-1"), "no node has 4 GPU", 11},
      GroupWaiting{GroupId("pg-1"), "2 of 3 bundles fit", 12}});
  EXPECT_EQ(g->reason, "2 of 3 bundles fit");
  EXPECT_THAT(History(*g), ElementsAre("10 PENDING no node has 4 GPU", "12 PENDING 2 of 3 bundles fit"));

  Ok({GroupPlaced{GroupId("pg-1"), 1, {Bundle(0, "a", 1, {0}), Bundle(1, "b", 1, {1})}, {}, "placed on a, b", 13}});
  EXPECT_EQ(g->state, PgState::kCreated);
  EXPECT_EQ(g->reason, "");
  EXPECT_EQ(g->alternative, 1);
  ASSERT_EQ(g->bundles.size(), 2u);

  Ok({GroupBundlesLost{GroupId("pg-1"), {1}, {}, "node b died", 14}});
  EXPECT_EQ(g->state, PgState::kRescheduling);
  EXPECT_EQ(g->reason, "node b died");
  ASSERT_EQ(g->bundles.size(), 2u);
  EXPECT_FALSE(g->bundles[0].lost);
  EXPECT_TRUE(g->bundles[1].lost);

  // Same text as the last entry, but the state changes (RESCHEDULING -> PENDING): an entry.
  Ok({GroupWaiting{GroupId("pg-1"), "node b died", 15}});
  EXPECT_EQ(g->state, PgState::kPending);

  Ok({GroupEnded{GroupId("pg-1"), PgState::kFailed, "timed out after 30s", 16}});
  EXPECT_EQ(g->state, PgState::kFailed);
  EXPECT_EQ(g->reason, "timed out after 30s");
  EXPECT_THAT(g->bundles, IsEmpty());
  EXPECT_THAT(History(*g),
              ElementsAre("10 PENDING no node has 4 GPU", "12 PENDING 2 of 3 bundles fit", "13 CREATED placed on a, b",
                          "14 RESCHEDULING node b died", "15 PENDING node b died", "16 FAILED timed out after 30s"));
  // The name is free again; the ended group is still found by id.
  EXPECT_EQ(s_.FindGroup("train"), nullptr);
  EXPECT_EQ(s_.FindGroup("pg-1"), g);
  Ok({GroupSubmitted{NewGroup("pg-2", "train", 2)}});
  EXPECT_EQ(s_.FindGroup("train"), s_.FindGroup(GroupId("pg-2")));
  EXPECT_EQ(s_.next_group_seq(), 6u);  // never goes back

  Ok({GroupEnded{GroupId("pg-2"), PgState::kRemoved, "removed by user", 17}});
  EXPECT_EQ(s_.FindGroup(GroupId("pg-2"))->reason, "");
  EXPECT_EQ(s_.FindGroup("train"), nullptr);
}

TEST_F(ClusterStateTest, SliceGroupsDropWholeSlices) {
  const std::vector<int> chips = {0, 1, 2, 3};
  Ok({GroupSubmitted{NewGroup("pg-s", "", 1, PgKind::kSlices)},
      GroupPlaced{.group = GroupId("pg-s"),
                  .bundles = {Bundle(0, "h1", 1, {}, chips, "s1"), Bundle(1, "h2", 1, {}, chips, "s1"),
                              Bundle(2, "h3", 1, {}, chips, "s2"), Bundle(3, "h4", 1, {}, chips, "s2")},
                  .slices = {"s1", "s2"}}});
  EXPECT_EQ(s_.SliceHolders(), (std::map<std::string, std::string>{{"s1", "pg-s"}, {"s2", "pg-s"}}));

  Ok({GroupBundlesLost{GroupId("pg-s"), {}, {"s1"}, "host h2 of slice s1 died", 11}});
  const Group* g = s_.FindGroup(GroupId("pg-s"));
  EXPECT_EQ(g->state, PgState::kRescheduling);
  EXPECT_THAT(g->slices, ElementsAre("s2"));
  ASSERT_EQ(g->bundles.size(), 2u);
  EXPECT_EQ(g->bundles[0].index, 2);
  EXPECT_EQ(g->bundles[1].index, 3);
  EXPECT_FALSE(g->bundles[0].lost);
  EXPECT_EQ(s_.SliceHolders(), (std::map<std::string, std::string>{{"s2", "pg-s"}}));

  Ok({GroupEnded{GroupId("pg-s"), PgState::kRemoved, "removed", 12}});
  EXPECT_THAT(s_.SliceHolders(), IsEmpty());
}

TEST_F(ClusterStateTest, GroupHistoryKeepsItsFirstEntryAndTheLastOnes) {
  Ok({GroupSubmitted{NewGroup("pg-1", "", 1)}});
  for (int i = 0; i < 150; ++i) Ok({GroupWaiting{GroupId("pg-1"), absl::StrCat("r", i), i}});
  const Group* g = s_.FindGroup(GroupId("pg-1"));
  ASSERT_EQ(g->history.size(), ClusterState::kMaxGroupHistory);
  EXPECT_EQ(g->history[0].message, "r0");
  EXPECT_EQ(g->history[1].message, "r51");
  EXPECT_EQ(g->history.back().message, "r149");
}

TEST_F(ClusterStateTest, WorkersStartAndTheFirstExitWins) {
  Ok({Reg("a", 1), JobSubmitted{NewJob("j1")}, WorkerStarting{NewWorker("w1", Owner::Job(JobId("j1")), "a")}});
  const Worker* w = s_.FindWorker(WorkerId("w1"));
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->phase, WorkerPhase::kStarting);
  EXPECT_EQ(s_.FindJob(JobId("j1"))->worker, WorkerId("w1"));
  Ok({WorkerStarted{WorkerId("w1"), 42, 100}});
  EXPECT_EQ(w->phase, WorkerPhase::kRunning);
  EXPECT_EQ(w->pid, 42);
  EXPECT_EQ(w->start_wall_ms, 100);
  EXPECT_THAT(s_.LiveWorkersOn(NodeId("a")), ElementsAre(w));

  Ok({WorkerExited{WorkerId("w1"), {.exit_code = 1, .wall_ms = 200}}});
  const absl::Status second = s_.Apply(WorkerExited{WorkerId("w1"), {.signal = 9, .wall_ms = 300}});
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.message(), "WorkerExited: worker w1 already exited");
  EXPECT_EQ(w->phase, WorkerPhase::kExited);
  ASSERT_TRUE(w->exit.has_value());
  EXPECT_EQ(w->exit->Describe(), "exited with code 1");
  EXPECT_EQ(w->exit->wall_ms, 200);
  EXPECT_THAT(s_.LiveWorkersOn(NodeId("a")), IsEmpty());

  // A quick worker's exit may be recorded before its start: it stays EXITED, with its pid.
  Ok({WorkerStarting{NewWorker("w2", Owner(), "a")},
      WorkerExited{WorkerId("w2"), {.lost = true, .reason = "node a died", .wall_ms = 400}},
      WorkerStarted{WorkerId("w2"), 7, 390}});
  const Worker* w2 = s_.FindWorker(WorkerId("w2"));
  EXPECT_EQ(w2->phase, WorkerPhase::kExited);
  EXPECT_EQ(w2->pid, 7);
  EXPECT_EQ(w2->start_wall_ms, 390);
  EXPECT_EQ(w2->exit->Describe(), "was lost: node a died");
}

TEST_F(ClusterStateTest, JobLifecycle) {
  Ok({JobSubmitted{NewJob("j1")}, JobStopRequested{JobId("j1")}});
  const Job* job = s_.FindJob(JobId("j1"));
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->status, JobStatus::kPending);
  EXPECT_TRUE(job->stop_requested);
  EXPECT_EQ(job->submit_time_ms, 50);

  Ok({WorkerStarting{NewWorker("w-j1", Owner::Job(JobId("j1")), "a")}, WorkerStarted{WorkerId("w-j1"), 10, 100},
      JobUpdated{.job = JobId("j1"), .status = JobStatus::kRunning, .message = "running", .wall_ms = 110}});
  EXPECT_EQ(job->status, JobStatus::kRunning);
  EXPECT_EQ(job->start_time_ms, 110);
  Ok({JobUpdated{JobId("j1"), JobStatus::kFailed, "exited with code 3", "ENTRYPOINT_FAILED", 3, 200}});
  EXPECT_EQ(job->status, JobStatus::kFailed);
  EXPECT_EQ(job->message, "exited with code 3");
  EXPECT_EQ(job->error_type, "ENTRYPOINT_FAILED");
  EXPECT_EQ(job->exit_code, 3);
  EXPECT_EQ(job->start_time_ms, 110);
  EXPECT_EQ(job->end_time_ms, 200);

  const absl::Status again = s_.Apply(JobUpdated{.job = JobId("j1"), .status = JobStatus::kSucceeded});
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.message(), "JobUpdated: job j1 is FAILED already");
  EXPECT_EQ(job->status, JobStatus::kFailed);

  Ok({JobDeleted{JobId("j1")}});
  EXPECT_EQ(s_.FindJob(JobId("j1")), nullptr);
  EXPECT_EQ(s_.FindWorker(WorkerId("w-j1")), nullptr);

  // A job whose worker started but whose RUNNING was never recorded still has a start time when it ends.
  Ok({JobSubmitted{NewJob("j2")}, WorkerStarting{NewWorker("w-j2", Owner::Job(JobId("j2")), "a")},
      WorkerStarted{WorkerId("w-j2"), 11, 150},
      JobUpdated{.job = JobId("j2"), .status = JobStatus::kSucceeded, .exit_code = 0, .wall_ms = 160}});
  EXPECT_EQ(s_.FindJob(JobId("j2"))->start_time_ms, 150);
  EXPECT_EQ(s_.FindJob(JobId("j2"))->end_time_ms, 160);
  EXPECT_EQ(s_.FindJob(JobId("j2"))->exit_code, 0);

  // A quick job whose exit was reported, and the job ended, before its start was acknowledged: the
  // acknowledgement gives it its start time.
  Ok({JobSubmitted{NewJob("j3")}, WorkerStarting{NewWorker("w-j3", Owner::Job(JobId("j3")), "a")},
      WorkerExited{.worker = WorkerId("w-j3"), .exit = {.exit_code = 0, .wall_ms = 170}},
      JobUpdated{.job = JobId("j3"), .status = JobStatus::kSucceeded, .exit_code = 0, .wall_ms = 180}});
  EXPECT_EQ(s_.FindJob(JobId("j3"))->start_time_ms, 0);
  Ok({WorkerStarted{WorkerId("w-j3"), 12, 165}});
  EXPECT_EQ(s_.FindJob(JobId("j3"))->start_time_ms, 165);
  EXPECT_EQ(s_.FindJob(JobId("j3"))->end_time_ms, 180);
  EXPECT_EQ(s_.FindWorker(WorkerId("w-j3"))->phase, WorkerPhase::kExited);
}

TEST_F(ClusterStateTest, RunLifecycle) {
  const std::vector<std::pair<int64_t, std::string>> earlier = {{5, "/tmp/x/r/checkpoint_5"}};
  Ok({RunSubmitted{RunId("r1"), train::RunSpecToJson(CpuRunSpec()), "tok", GroupId("pg-r1"), earlier, 1000}});
  const head::Run* run = s_.FindRun(RunId("r1"));
  ASSERT_NE(run, nullptr);
  EXPECT_EQ(run->status, RunStatus::kPending);
  EXPECT_EQ(run->message, "waiting for resources");
  EXPECT_EQ(run->spec, CpuRunSpec());
  EXPECT_FALSE(run->plan.tpu);
  EXPECT_EQ(run->plan.num_workers, 2);
  EXPECT_EQ(run->token, "tok");
  EXPECT_EQ(run->group, GroupId("pg-r1"));
  EXPECT_EQ(run->created_time_ms, 1000);
  EXPECT_EQ(run->committed, earlier);
  EXPECT_EQ(run->storage(), "/tmp/x/r");
  EXPECT_EQ(s_.FindRun("r"), run);
  Ok({RunSubmitted{.run = RunId("r2"), .spec_json = train::RunSpecToJson(CpuRunSpec()), .wall_ms = 2000}});
  EXPECT_EQ(s_.FindRun("r"), s_.FindRun(RunId("r2")));  // the newest of that name
  EXPECT_EQ(s_.FindRun("r1"), run);

  Ok({AttemptStarted{RunId("r1"), Attempt(1, 2)}});
  EXPECT_EQ(run->status, RunStatus::kRunning);
  EXPECT_EQ(run->message, "attempt 1: 2 workers");
  Ok({WorkerStarting{NewWorker("w1-0", Owner::Run(RunId("r1")), "a")}});
  // Metrics come only from the report that carries them; a complete step without checkpoints is done.
  Ok({RunReported{RunId("r1"), 1, 0, 1, "{\"loss\":1}", "", 1100}});
  EXPECT_EQ(run->reports, (std::map<int64_t, std::map<int, std::string>>{{1, {{0, ""}}}}));
  Ok({RunReported{RunId("r1"), 1, 1, 1, std::nullopt, "", 1101}});
  EXPECT_THAT(run->reports, IsEmpty());
  ASSERT_EQ(run->current()->metrics.size(), 1u);
  EXPECT_EQ(run->current()->metrics[0].step, 1);
  EXPECT_EQ(run->current()->metrics[0].metrics_json, "{\"loss\":1}");
  EXPECT_EQ(run->current()->metrics[0].time_ms, 1100);

  // A step with checkpoints waits for its commit; the commit drops it and every older step.
  Ok({RunReported{RunId("r1"), 1, 1, 2, std::nullopt, "/stage/2/1", 1200},
      RunReported{RunId("r1"), 1, 0, 2, "{\"loss\":0.5}", "/stage/2/0", 1201},
      RunReported{RunId("r1"), 1, 0, 3, "{\"loss\":0.4}", "", 1300}});
  EXPECT_EQ(run->reports, (std::map<int64_t, std::map<int, std::string>>{{2, {{0, "/stage/2/0"}, {1, "/stage/2/1"}}},
                                                                         {3, {{0, ""}}}}));
  const std::vector<std::pair<int64_t, std::string>> committed = {{5, "/tmp/x/r/checkpoint_5"},
                                                                  {2, "/tmp/x/r/checkpoint_2"}};
  Ok({CheckpointCommitted{RunId("r1"), 2, "/tmp/x/r/checkpoint_2", committed}});
  EXPECT_EQ(run->committed, committed);
  EXPECT_EQ(run->reports, (std::map<int64_t, std::map<int, std::string>>{{3, {{0, ""}}}}));
  EXPECT_EQ(run->current()->metrics.size(), 3u);

  Ok({AttemptEnded{RunId("r1"), 1, "rank 1 exited with code 1", 3000}});
  EXPECT_EQ(run->failures, 1);
  EXPECT_EQ(run->status, RunStatus::kRestarting);
  EXPECT_EQ(run->message, "attempt 1 failed: rank 1 exited with code 1; restarting");
  EXPECT_EQ(run->attempts[0].end_time_ms, 3000);
  EXPECT_EQ(run->attempts[0].end_reason, "rank 1 exited with code 1");
  EXPECT_EQ(s_.Apply(AttemptEnded{RunId("r1"), 1, "again", 3001}).message(),
            "AttemptEnded: attempt 1 of run r1 is not the running one");
  EXPECT_EQ(s_.Apply(RunReported{.run = RunId("r1"), .attempt = 1}).message(),
            "RunReported: attempt 1 of run r1 is not the running one");

  Ok({AttemptStarted{RunId("r1"), Attempt(2, 2, "/tmp/x/r/checkpoint_2")}});
  EXPECT_EQ(run->status, RunStatus::kRunning);
  EXPECT_EQ(run->message, "attempt 2: 2 workers from /tmp/x/r/checkpoint_2");
  EXPECT_THAT(run->reports, IsEmpty());
  EXPECT_EQ(run->current()->number, 2);

  Ok({RunStopRequested{RunId("r1")}});
  EXPECT_TRUE(run->stop_requested);
  Ok({RunFinished{RunId("r1"), RunStatus::kStopped, "stopped by user", 4000}});
  EXPECT_EQ(run->status, RunStatus::kStopped);
  EXPECT_TRUE(run->Terminal());
  EXPECT_EQ(run->message, "stopped by user");
  EXPECT_EQ(run->end_time_ms, 4000);
  EXPECT_EQ(run->attempts[1].end_time_ms, 4000);
  EXPECT_EQ(run->attempts[1].end_reason, "stopped by user");
  EXPECT_EQ(run->attempts[0].end_reason, "rank 1 exited with code 1");

  // A run that fails while restarting keeps its last attempt's own end.
  Ok({AttemptStarted{RunId("r2"), Attempt(1, 2)}, AttemptEnded{RunId("r2"), 1, "boom", 5000},
      RunFinished{RunId("r2"), RunStatus::kFailed, "max_failures (0) spent", 5001}});
  const head::Run* r2 = s_.FindRun(RunId("r2"));
  EXPECT_EQ(r2->attempts[0].end_time_ms, 5000);
  EXPECT_EQ(r2->attempts[0].end_reason, "boom");
  EXPECT_EQ(r2->message, "max_failures (0) spent");
}

TEST_F(ClusterStateTest, DerivedViews) {
  Ok({Reg("a", 1), Reg("b", 2), Reg("c", 3, 1000, 0), NodeDied{NodeId("c"), 3, "gone", 2000},
      GroupSubmitted{NewGroup("g1", "", 1)},
      GroupPlaced{.group = GroupId("g1"), .bundles = {Bundle(0, "a", 2, {3, 1}, {5, 4}), Bundle(1, "b", 1, {0})}},
      GroupSubmitted{NewGroup("g2", "", 2)},
      GroupPlaced{.group = GroupId("g2"), .bundles = {Bundle(0, "a", 1, {1, 2}, {4}), Bundle(1, "b", 4, {2, 3})}},
      GroupBundlesLost{.group = GroupId("g2"), .lost_indices = {1}, .message = "lost"},
      GroupSubmitted{NewGroup("g3", "", 3)}, GroupPlaced{.group = GroupId("g3"), .bundles = {Bundle(0, "b", 8, {})}},
      GroupEnded{.group = GroupId("g3"), .state = PgState::kRemoved}, WorkerStarting{NewWorker("w1", Owner(), "a")},
      WorkerStarting{NewWorker("w2", Owner(), "a")}, WorkerExited{.worker = WorkerId("w2")},
      WorkerStarting{NewWorker("w3", Owner(), "b")}});
  const auto held = s_.HeldByNode();
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held.at(NodeId("a")).resources, Res(3, 4));
  EXPECT_THAT(held.at(NodeId("a")).gpus, ElementsAre(1, 2, 3));
  EXPECT_THAT(held.at(NodeId("a")).chips, ElementsAre(4, 5));
  EXPECT_EQ(held.at(NodeId("b")).resources, Res(1, 1));  // g2's lost bundle and ended g3 hold nothing
  EXPECT_THAT(held.at(NodeId("b")).gpus, ElementsAre(0));

  const auto alive = s_.NodeSnapshots(/*include_dead=*/false);
  ASSERT_EQ(alive.size(), 2u);
  EXPECT_EQ(alive[0].node_id, "a");
  EXPECT_EQ(alive[0].address, "10.0.0.a");
  EXPECT_TRUE(alive[0].alive);
  EXPECT_EQ(alive[0].labels, (Labels{{"zone", "z1"}}));
  EXPECT_EQ(alive[0].total, Res(8, 4));
  EXPECT_EQ(alive[0].available, Res(5, 0));
  EXPECT_EQ(alive[1].node_id, "b");
  EXPECT_EQ(alive[1].available, Res(7, 3));
  const auto all = s_.NodeSnapshots(/*include_dead=*/true);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2].node_id, "c");
  EXPECT_FALSE(all[2].alive);
  EXPECT_EQ(all[2].available, Res(8, 0));

  EXPECT_THAT(s_.GroupsOn(NodeId("a")), ElementsAre(s_.FindGroup(GroupId("g1")), s_.FindGroup(GroupId("g2"))));
  EXPECT_THAT(s_.GroupsOn(NodeId("b")), ElementsAre(s_.FindGroup(GroupId("g1"))));
  EXPECT_THAT(s_.GroupsOn(NodeId("c")), IsEmpty());
  EXPECT_THAT(s_.LiveWorkersOn(NodeId("a")), ElementsAre(s_.FindWorker(WorkerId("w1"))));
  EXPECT_THAT(s_.LiveWorkersOn(NodeId("b")), ElementsAre(s_.FindWorker(WorkerId("w3"))));
}

// The live and waiting sets follow every change of a group's state, survive a snapshot, and the oldest ended groups
// beyond kMaxEndedGroups are forgotten by submission order.
TEST(ClusterStateIndexTest, LiveAndWaitingGroupsAndPruningOfEndedOnes) {
  ClusterState s;
  auto apply = [&](Record r) { ASSERT_TRUE(s.Apply(r).ok()) << RecordName(r); };
  apply(NodeRegistered{.info = {.node_id = "a", .address = "10.0.0.1"}, .incarnation = 1, .wall_ms = 1});
  apply(GroupSubmitted{NewGroup("pg-1", "", 1)});
  apply(GroupSubmitted{NewGroup("pg-2", "", 2)});
  EXPECT_EQ(s.live_groups(), (std::set<GroupId>{GroupId("pg-1"), GroupId("pg-2")}));
  EXPECT_EQ(s.waiting_groups(), (std::set<GroupId>{GroupId("pg-1"), GroupId("pg-2")}));
  apply(GroupPlaced{.group = GroupId("pg-1"), .bundles = {Bundle(0, "a", 1, {})}, .message = "placed", .wall_ms = 2});
  EXPECT_EQ(s.waiting_groups(), (std::set<GroupId>{GroupId("pg-2")}));
  apply(GroupBundlesLost{.group = GroupId("pg-1"), .lost_indices = {0}, .message = "lost", .wall_ms = 3});
  EXPECT_EQ(s.waiting_groups(), (std::set<GroupId>{GroupId("pg-1"), GroupId("pg-2")}));
  apply(GroupEnded{.group = GroupId("pg-2"), .state = PgState::kFailed, .message = "timed out", .wall_ms = 4});
  EXPECT_EQ(s.live_groups(), (std::set<GroupId>{GroupId("pg-1")}));
  EXPECT_EQ(s.waiting_groups(), (std::set<GroupId>{GroupId("pg-1")}));
  auto restored = StateCodec::DecodeState(StateCodec::EncodeState(s));
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->live_groups(), s.live_groups());
  EXPECT_EQ(restored->waiting_groups(), s.waiting_groups());

  // Ended groups beyond the limit go, oldest first; the live one stays whatever its age.
  const uint64_t first = 10;
  for (uint64_t i = 0; i < ClusterState::kMaxEndedGroups + 5; ++i) {
    const std::string id = "pg-e" + std::to_string(first + i);
    apply(GroupSubmitted{NewGroup(id, "", first + i)});
    apply(GroupEnded{.group = GroupId(id), .state = PgState::kRemoved, .message = "removed", .wall_ms = 5});
  }
  EXPECT_EQ(s.groups().size(), ClusterState::kMaxEndedGroups + 1);  // the ended ones kept, and pg-1
  EXPECT_EQ(s.FindGroup(GroupId("pg-2")), nullptr);                 // the oldest ended ones are gone
  // 10,006 ended in all (pg-2 and 10,005 more): pg-2 and the 5 oldest of the others go.
  for (uint64_t i = 0; i < 5; ++i) EXPECT_EQ(s.FindGroup(GroupId("pg-e" + std::to_string(first + i))), nullptr) << i;
  EXPECT_NE(s.FindGroup(GroupId("pg-e" + std::to_string(first + 5))), nullptr);
  EXPECT_NE(s.FindGroup(GroupId("pg-1")), nullptr);
  EXPECT_EQ(s.live_groups(), (std::set<GroupId>{GroupId("pg-1")}));
}

std::string ServiceJson(const std::string& text) {
  return train::ServiceSpecToJson(*train::ParseServiceSpec(text));
}

TEST(ClusterStateServiceTest, VersionsFollowOneAnotherAndDeleteForgetsTheService) {
  ClusterState s;
  const std::string v1 = ServiceJson("name: web\nentrypoint: a\n");
  ASSERT_TRUE(s.Apply(ServiceDeployed{"web", v1, 1, 100}).ok());
  EXPECT_EQ(s.Apply(ServiceDeployed{"web", v1, 3, 200}).message(),
            "ServiceDeployed: version 3 of service web is not the next one (2)");
  EXPECT_EQ(s.Apply(ServiceDeployed{"other", v1, 1, 200}).message(), "ServiceDeployed: spec names web, not other");
  ASSERT_TRUE(s.Apply(ServiceDeployed{"web", ServiceJson("name: web\nentrypoint: b\nnum_replicas: 3\n"), 2, 300}).ok());
  const Service* web = s.FindService("web");
  ASSERT_NE(web, nullptr);
  EXPECT_EQ(web->version, 2);
  EXPECT_EQ(web->spec.num_replicas, 3);
  EXPECT_EQ(web->created_ms, 100);
  EXPECT_EQ(web->updated_ms, 300);
  ASSERT_TRUE(s.Apply(ServiceDeleted{"web", 400}).ok());
  EXPECT_EQ(s.FindService("web"), nullptr);
  EXPECT_EQ(s.Apply(ServiceDeleted{"web", 500}).code(), absl::StatusCode::kNotFound);
  // A new service of the same name starts again at version 1.
  EXPECT_TRUE(s.Apply(ServiceDeployed{"web", v1, 1, 600}).ok());
}

TEST(ClusterStateRevocationTest, TheFirstRevocationOfANodeIsKept) {
  ClusterState s;
  EXPECT_FALSE(s.IsRevoked(NodeId("h1")));
  ASSERT_TRUE(s.Apply(NodeRevoked{NodeId("h1"), "stolen", 100}).ok());
  ASSERT_TRUE(s.Apply(NodeRevoked{NodeId("h1"), "again", 200}).ok());
  EXPECT_TRUE(s.IsRevoked(NodeId("h1")));
  EXPECT_FALSE(s.IsRevoked(NodeId("h2")));
  EXPECT_EQ(s.revoked_nodes().at(NodeId("h1")).reason, "stolen");
  EXPECT_EQ(s.Apply(NodeRevoked{NodeId(""), "x", 300}).message(), "NodeRevoked: node is empty");
}

}  // namespace cluster_state_test
}  // namespace torus::head
