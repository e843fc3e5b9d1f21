#include "torus/head/workloads/job_machine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace torus::head {

// Steps print as a line, so that a table row that fails says what it got.
void PrintTo(const JobStep& s, std::ostream* os) {
  *os << "{";
  if (s.update) {
    *os << "update: " << JobStatusName(s.update->status) << " \"" << s.update->message << "\" ["
        << s.update->error_type << "] exit=" << (s.update->exit_code ? std::to_string(*s.update->exit_code) : "none")
        << " at " << s.update->wall_ms << "; ";
  }
  *os << "start=" << s.start << " stop_worker=" << s.stop_worker << " release_group=" << s.release_group << "}";
}

namespace job_machine_test {

constexpr int64_t kWall = 1'700'000'000'042;
const JobId kJob("job-1");
const GroupId kGroup("pg-0000000001");
const WorkerId kWorker("job-job-1");

// One situation of a job, and the step its machine must take.
struct Row {
  std::string name;
  JobStatus status = JobStatus::kPending;
  bool stop_requested = false;
  bool reserves = true;                   // the job asked for resources: it has a group id
  std::optional<PgState> group;           // its group's state; nullopt: absent (forgotten)
  std::optional<WorkerPhase> worker;      // nullopt: no worker started yet
  WorkerExit exit;                        // when the worker exited
  bool node_alive = true;                 // the worker's node
  JobStep want;
};

WorkerExit Code(int code) { return WorkerExit{.exit_code = code, .wall_ms = 100}; }
WorkerExit Signal(int signal) { return WorkerExit{.signal = signal, .wall_ms = 100}; }
WorkerExit Lost(const std::string& reason) { return WorkerExit{.lost = true, .reason = reason, .wall_ms = 100}; }
WorkerExit StartFailed(const std::string& reason) {
  return WorkerExit{.start_failed = true, .reason = reason, .wall_ms = 100};
}

JobStep Step(JobStatus status, std::string message, std::string error_type, std::optional<int> exit_code,
             bool release_group, bool stop_worker = false) {
  JobStep s;
  s.update = JobUpdated{kJob, status, std::move(message), std::move(error_type), exit_code, kWall};
  s.release_group = release_group;
  s.stop_worker = stop_worker;
  return s;
}
JobStep Start() {
  JobStep s;
  s.start = true;
  return s;
}
JobStep Flags(bool stop_worker, bool release_group) {
  JobStep s;
  s.stop_worker = stop_worker;
  s.release_group = release_group;
  return s;
}

constexpr auto kPending = JobStatus::kPending;
constexpr auto kRunning = JobStatus::kRunning;
constexpr auto kSucceeded = JobStatus::kSucceeded;
constexpr auto kFailed = JobStatus::kFailed;
constexpr auto kStopped = JobStatus::kStopped;
constexpr auto kStarting = WorkerPhase::kStarting;
constexpr auto kRunningW = WorkerPhase::kRunning;
constexpr auto kExited = WorkerPhase::kExited;
constexpr auto kCreated = PgState::kCreated;

const char kEntrypointError[] = "JOB_ENTRYPOINT_COMMAND_ERROR";

std::vector<Row> Rows() {
  return {
      // ---- Not started ----
      {.name = "group pending: waits", .group = PgState::kPending, .want = {}},
      {.name = "group rescheduling: waits", .group = PgState::kRescheduling, .want = {}},
      {.name = "group created: starts", .group = kCreated, .want = Start()},
      {.name = "no resources: starts on a picked node", .reserves = false, .want = Start()},
      {.name = "group removed before start",
       .group = PgState::kRemoved,
       .want = Step(kFailed, "The job's resources were released before it started.",
                    "JOB_SUPERVISOR_ACTOR_START_FAILURE", std::nullopt, false)},
      {.name = "group failed (timed out) before start",
       .group = PgState::kFailed,
       .want = Step(kFailed, "The job's resources were released before it started.",
                    "JOB_SUPERVISOR_ACTOR_START_FAILURE", std::nullopt, false)},
      {.name = "group forgotten before start",
       .group = std::nullopt,
       .want = Step(kFailed, "The job's resources were released before it started.",
                    "JOB_SUPERVISOR_ACTOR_START_FAILURE", std::nullopt, false)},
      {.name = "stop before start, group pending",
       .stop_requested = true,
       .group = PgState::kPending,
       .want = Step(kStopped, "Job was stopped before it started.", "", std::nullopt, true)},
      {.name = "stop before start, group created (not started)",
       .stop_requested = true,
       .group = kCreated,
       .want = Step(kStopped, "Job was stopped before it started.", "", std::nullopt, true)},
      {.name = "stop before start, no resources",
       .stop_requested = true,
       .reserves = false,
       .want = Step(kStopped, "Job was stopped before it started.", "", std::nullopt, false)},
      {.name = "stop before start, group already removed",
       .stop_requested = true,
       .group = PgState::kRemoved,
       .want = Step(kStopped, "Job was stopped before it started.", "", std::nullopt, false)},

      // ---- Started ----
      {.name = "worker starting: waits", .group = kCreated, .worker = kStarting, .want = {}},
      {.name = "worker running: RUNNING",
       .group = kCreated,
       .worker = kRunningW,
       .want = Step(kRunning, "Job is currently running.", "", std::nullopt, false)},
      {.name = "worker running, no resources: RUNNING",
       .reserves = false,
       .worker = kRunningW,
       .want = Step(kRunning, "Job is currently running.", "", std::nullopt, false)},
      {.name = "running and RUNNING: nothing", .status = kRunning, .group = kCreated, .worker = kRunningW, .want = {}},
      {.name = "exit 0",
       .status = kRunning,
       .group = kCreated,
       .worker = kExited,
       .exit = Code(0),
       .want = Step(kSucceeded, "Job finished successfully.", "", 0, true)},
      {.name = "exit 0, no resources",
       .status = kRunning,
       .reserves = false,
       .worker = kExited,
       .exit = Code(0),
       .want = Step(kSucceeded, "Job finished successfully.", "", 0, false)},
      {.name = "exit 0 before RUNNING was recorded",
       .status = kPending,
       .group = kCreated,
       .worker = kExited,
       .exit = Code(0),
       .want = Step(kSucceeded, "Job finished successfully.", "", 0, true)},
      {.name = "exit 3",
       .status = kRunning,
       .group = kCreated,
       .worker = kExited,
       .exit = Code(3),
       .want = Step(kFailed, "Job entrypoint command failed with exit code 3.", kEntrypointError, 3, true)},
      {.name = "killed by signal 9",
       .status = kRunning,
       .group = kCreated,
       .worker = kExited,
       .exit = Signal(9),
       .want = Step(kFailed, "Job entrypoint was killed by signal 9 from outside torus.", kEntrypointError, std::nullopt, true)},
      {.name = "lost with its node",
       .status = kRunning,
       .group = PgState::kRescheduling,
       .worker = kExited,
       .exit = Lost("node n1 died: silent for 10 s"),
       .node_alive = false,
       .want = Step(kFailed, "The node running the job (n1) died: silent for 10 s.", "NODE_DIED", std::nullopt, true)},
      {.name = "lost, its node alive (not found when its agent registered)",
       .status = kRunning,
       .group = kCreated,
       .worker = kExited,
       .exit = Lost("not found on node n1 when its agent registered again"),
       .want = Step(kFailed,
                    "The job's entrypoint was lost: not found on node n1 when its agent registered again",
                    "JOB_SUPERVISOR_ACTOR_DIED", std::nullopt, true)},
      {.name = "failed to start",
       .status = kPending,
       .group = kCreated,
       .worker = kExited,
       .exit = StartFailed("exec: no such file"),
       .want = Step(kFailed, "Job entrypoint failed to start: exec: no such file",
                    "JOB_ENTRYPOINT_COMMAND_START_ERROR", std::nullopt, true)},
      {.name = "group removed while running: FAILED, worker stopped",
       .status = kRunning,
       .group = PgState::kRemoved,
       .worker = kRunningW,
       .want = Step(kFailed, "The job's reserved resources were released.", "JOB_SUPERVISOR_ACTOR_DIED",
                    std::nullopt, false, /*stop_worker=*/true)},
      {.name = "group forgotten while running",
       .status = kRunning,
       .group = std::nullopt,
       .worker = kRunningW,
       .want = Step(kFailed, "The job's reserved resources were released.", "JOB_SUPERVISOR_ACTOR_DIED",
                    std::nullopt, false, /*stop_worker=*/true)},
      {.name = "group removed while the worker starts",
       .status = kPending,
       .group = PgState::kRemoved,
       .worker = kStarting,
       .want = Step(kFailed, "The job's reserved resources were released.", "JOB_SUPERVISOR_ACTOR_DIED",
                    std::nullopt, false, /*stop_worker=*/true)},
      {.name = "group removed after the worker exited 0: the exit counts",
       .status = kRunning,
       .group = PgState::kRemoved,
       .worker = kExited,
       .exit = Code(0),
       .want = Step(kSucceeded, "Job finished successfully.", "", 0, false)},

      // ---- Stop while running ----
      {.name = "stop while running: stop the worker, no status yet",
       .status = kRunning,
       .stop_requested = true,
       .group = kCreated,
       .worker = kRunningW,
       .want = Flags(/*stop_worker=*/true, /*release_group=*/false)},
      {.name = "stop while starting: stop the worker",
       .status = kPending,
       .stop_requested = true,
       .group = kCreated,
       .worker = kStarting,
       .want = Flags(true, false)},
      {.name = "stopped, exited by SIGTERM",
       .status = kRunning,
       .stop_requested = true,
       .group = kCreated,
       .worker = kExited,
       .exit = Signal(15),
       .want = Step(kStopped, "Job was intentionally stopped.", "", std::nullopt, true)},
      {.name = "stopped, exited 0 on SIGTERM",
       .status = kRunning,
       .stop_requested = true,
       .group = kCreated,
       .worker = kExited,
       .exit = Code(0),
       .want = Step(kStopped, "Job was intentionally stopped.", "", 0, true)},
      {.name = "stopped, exited 1",
       .status = kRunning,
       .stop_requested = true,
       .reserves = false,
       .worker = kExited,
       .exit = Code(1),
       .want = Step(kStopped, "Job was intentionally stopped.", "", 1, false)},

      // ---- Terminal: give back what is still held ----
      {.name = "succeeded, group and worker still held",
       .status = kSucceeded,
       .group = kCreated,
       .worker = kRunningW,
       .want = Flags(true, true)},
      {.name = "failed, group still held",
       .status = kFailed,
       .group = kCreated,
       .worker = kExited,
       .exit = Code(1),
       .want = Flags(false, true)},
      {.name = "stopped, nothing held", .status = kStopped, .group = PgState::kRemoved, .worker = kExited,
       .exit = Signal(15), .want = {}},
      {.name = "stopped before start, no resources", .status = kStopped, .stop_requested = true, .reserves = false,
       .want = {}},
  };
}

TEST(DecideJobTest, Table) {
  for (const Row& row : Rows()) {
    SCOPED_TRACE(row.name);
    Job job;
    job.id = kJob;
    job.status = row.status;
    job.stop_requested = row.stop_requested;
    if (row.reserves) job.group = kGroup;
    Group group;
    group.id = kGroup;
    if (row.group) group.state = *row.group;
    Worker worker;
    worker.id = kWorker;
    worker.owner = Owner::Job(kJob);
    worker.node = NodeId("n1");
    if (row.worker) {
      job.worker = kWorker;
      worker.phase = *row.worker;
      if (*row.worker == kExited) worker.exit = row.exit;
    }
    JobFacts facts;
    facts.job = &job;
    facts.group = row.reserves && row.group ? &group : nullptr;
    facts.worker = row.worker ? &worker : nullptr;
    facts.worker_node_alive = row.worker && row.node_alive;
    const JobStep got = DecideJob(facts, kWall);
    EXPECT_EQ(got, row.want);
    // Level-triggered: the same facts give the same step.
    EXPECT_EQ(DecideJob(facts, kWall), got);
  }
}

// ---- JobFactsOf, PickNodeForJob, PendingMessage over a ClusterState ----

NodeRegistered Node(const std::string& id, const std::string& address, Labels labels) {
  NodeRegistered r;
  r.info.node_id = id;
  r.info.address = address;
  r.info.agent_port = 7000;
  r.info.total.Set("CPU", 8);
  r.info.labels = std::move(labels);
  r.incarnation = 1;
  r.wall_ms = kWall;
  return r;
}

class JobStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(state_.Apply(Node("n1", "10.0.0.1", {{"pool", "a"}})).ok());
    ASSERT_TRUE(state_.Apply(Node("n2", "10.0.0.2", {{"pool", "b"}})).ok());
    ASSERT_TRUE(state_.Apply(Node("n3", "10.0.0.3", {{"pool", "a"}})).ok());
  }
  Job JobWithSelector(std::map<std::string, std::string> selector) {
    Job job;
    job.id = kJob;
    job.request.entrypoint = "true";
    job.request.label_selector = std::move(selector);
    return job;
  }
  ClusterState state_;
};

TEST_F(JobStateTest, PickNodeForJob) {
  struct Pick {
    std::string name;
    std::map<std::string, std::string> selector;
    std::string head_address;
    std::vector<std::string> unplaceable;
    std::optional<std::string> want;
  };
  const std::vector<Pick> picks = {
      {"the head host's agent first", {}, "10.0.0.2", {}, "n2"},
      {"the head host's agent when its labels match", {{"pool", "b"}}, "10.0.0.2", {}, "n2"},
      {"the lowest id when the head host does not match", {{"pool", "a"}}, "10.0.0.2", {}, "n1"},
      {"the lowest id when no node is the head host", {}, "10.9.9.9", {}, "n1"},
      {"an unplaceable head host is skipped", {}, "10.0.0.2", {"n2"}, "n1"},
      {"an unplaceable lowest id is skipped", {{"pool", "a"}}, "10.0.0.2", {"n1"}, "n3"},
      {"a negated selector", {{"pool", "!a"}}, "10.9.9.9", {}, "n2"},
      {"no node matches", {{"pool", "c"}}, "10.0.0.1", {}, std::nullopt},
      {"every match unplaceable", {{"pool", "a"}}, "10.0.0.1", {"n1", "n3"}, std::nullopt},
  };
  for (const Pick& p : picks) {
    SCOPED_TRACE(p.name);
    Job job = JobWithSelector(p.selector);
    auto placeable = [&](const NodeId& id) {
      return std::find(p.unplaceable.begin(), p.unplaceable.end(), id.str()) == p.unplaceable.end();
    };
    std::optional<NodeId> got = PickNodeForJob(state_, job, p.head_address, placeable);
    EXPECT_EQ(got ? std::optional<std::string>(got->str()) : std::nullopt, p.want);
  }
}

TEST_F(JobStateTest, PickNodeForJobSkipsDeadNodes) {
  ASSERT_TRUE(state_.Apply(NodeDied{NodeId("n1"), 1, "silent", kWall}).ok());
  Job job = JobWithSelector({{"pool", "a"}});
  auto all = [](const NodeId&) { return true; };
  EXPECT_EQ(PickNodeForJob(state_, job, "10.0.0.1", all), NodeId("n3"));
  ASSERT_TRUE(state_.Apply(NodeDied{NodeId("n3"), 1, "silent", kWall}).ok());
  EXPECT_EQ(PickNodeForJob(state_, job, "10.0.0.1", all), std::nullopt);
}

TEST_F(JobStateTest, PendingMessage) {
  Group g;
  g.id = kGroup;
  g.name = "job:job-1";
  g.owner = Owner::Job(kJob);
  ASSERT_TRUE(state_.Apply(GroupSubmitted{g}).ok());
  ASSERT_TRUE(state_.Apply(GroupWaiting{kGroup, "no node has CPU 64 free (largest: n1 with 8)", kWall}).ok());

  Job reserving = JobWithSelector({});
  reserving.group = kGroup;
  EXPECT_EQ(PendingMessage(state_, reserving),
            "Job is waiting for resources: no node has CPU 64 free (largest: n1 with 8)");
  Job forgotten = JobWithSelector({});
  forgotten.group = GroupId("pg-gone");
  EXPECT_EQ(PendingMessage(state_, forgotten), "Job is waiting for resources: its group was forgotten");
  EXPECT_EQ(PendingMessage(state_, JobWithSelector({})), "Job is waiting for a node.");
  EXPECT_EQ(PendingMessage(state_, JobWithSelector({{"pool", "c"}})),
            "Job is waiting for a node that matches its label selector.");
}

TEST_F(JobStateTest, JobFactsOfFollowsTheStateAndItsNodes) {
  Group g;
  g.id = kGroup;
  ASSERT_TRUE(state_.Apply(GroupSubmitted{g}).ok());
  Job job = JobWithSelector({});
  job.group = kGroup;
  ASSERT_TRUE(state_.Apply(JobSubmitted{job}).ok());

  JobFacts before = JobFactsOf(state_, *state_.FindJob(kJob));
  EXPECT_EQ(before.group, state_.FindGroup(kGroup));
  EXPECT_EQ(before.worker, nullptr);
  EXPECT_FALSE(before.worker_node_alive);

  Worker w;
  w.id = kWorker;
  w.owner = Owner::Job(kJob);
  w.node = NodeId("n2");
  ASSERT_TRUE(state_.Apply(WorkerStarting{w}).ok());
  JobFacts started = JobFactsOf(state_, *state_.FindJob(kJob));
  ASSERT_NE(started.worker, nullptr);
  EXPECT_EQ(started.worker->id, kWorker);
  EXPECT_TRUE(started.worker_node_alive);

  ASSERT_TRUE(state_.Apply(NodeDied{NodeId("n2"), 1, "silent", kWall}).ok());
  ASSERT_TRUE(state_.Apply(WorkerExited{kWorker, WorkerExit{.lost = true, .reason = "node n2 died: silent"}}).ok());
  JobFacts lost = JobFactsOf(state_, *state_.FindJob(kJob));
  EXPECT_FALSE(lost.worker_node_alive);
  const JobStep step = DecideJob(lost, kWall);
  ASSERT_TRUE(step.update.has_value());
  EXPECT_EQ(step.update->message, "The node running the job (n2) died: silent.");
  EXPECT_EQ(step.update->error_type, "NODE_DIED");
  EXPECT_TRUE(step.release_group);
}

}  // namespace job_machine_test
}  // namespace torus::head
