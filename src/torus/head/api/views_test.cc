// The state as the wire sees it: cluster status, node and group protos, job and run JSON.
#include "torus/head/api/views.h"

#include <gtest/gtest.h>

#include "torus/common/clock.h"
#include "torus/rpc/convert.h"
#include "torus/train/run_spec.h"

namespace torus::head {
namespace views_test {

constexpr int64_t kWall = 1'733'050'000'000;

NodeRegistered Reg(const std::string& id, const std::string& address, double cpu, int gpus = 0) {
  NodeRegistered r;
  r.info.node_id = id;
  r.info.address = address;
  r.info.agent_port = 7000;
  r.info.total.Set("CPU", cpu);
  if (gpus > 0) r.info.total.Set("GPU", gpus);
  r.info.labels = {{"torus.io/node-id", id}};
  r.incarnation = 10;
  r.wall_ms = kWall;
  return r;
}

Group CpuGroup(const std::string& id) {
  Group g;
  g.id = GroupId(id);
  g.kind = PgKind::kBundles;
  g.request_text = "PACK, 1 bundle {\"CPU\": 2}";
  g.seq = 1;
  g.created_wall_ms = kWall;
  g.history = {{kWall, "PENDING", "submitted: PACK, 1 bundle {\"CPU\": 2}"}};
  return g;
}

HeldBundle Bundle(int index, const std::string& node, double cpu, std::vector<int> gpus = {}) {
  HeldBundle b;
  b.index = index;
  b.ledger_index = index;
  b.node = NodeId(node);
  b.resources.Set("CPU", cpu);
  if (!gpus.empty()) b.resources.Set("GPU", static_cast<double>(gpus.size()));
  b.gpus = std::move(gpus);
  return b;
}

class ViewsTest : public ::testing::Test {
 protected:
  void Apply(const Record& r) { ASSERT_TRUE(state_.Apply(r).ok()) << RecordName(r); }

  FakeClock clock_;
  Liveness liveness_{&clock_};
  ClusterState state_;
};

TEST_F(ViewsTest, ClusterStatusCountsWhatLiveGroupsHold) {
  Apply(Reg("a", "10.0.0.1", 8, 2));
  Apply(Reg("b", "10.0.0.2", 4));
  liveness_.Registered(NodeId("a"), 10, {});
  clock_.AdvanceMillis(250);
  Apply(GroupSubmitted{CpuGroup("pg-1")});
  Apply(GroupPlaced{GroupId("pg-1"), 0, {Bundle(0, "a", 2, {1})}, {}, "placed 1 bundle on a", kWall + 5});
  Apply(GroupSubmitted{[] {
    Group g = CpuGroup("pg-2");
    g.seq = 2;
    return g;
  }()});
  Apply(NodeDied{NodeId("b"), 10, "no heartbeat for 3001 ms", kWall + 100});

  rpc::ClusterStatus alive_only, all;
  BuildClusterStatus(state_, liveness_, /*include_dead=*/false, kWall + 1000, &alive_only);
  BuildClusterStatus(state_, liveness_, /*include_dead=*/true, kWall + 1000, &all);
  ASSERT_EQ(alive_only.nodes_size(), 1);
  ASSERT_EQ(all.nodes_size(), 2);
  const rpc::NodeView& a = alive_only.nodes(0);
  EXPECT_EQ(a.info().node_id(), "a");
  EXPECT_EQ(a.state(), rpc::ALIVE);
  EXPECT_EQ(a.resources_available().at("CPU"), 6 * kResourceScale);
  EXPECT_EQ(a.resources_available().at("GPU"), 1 * kResourceScale);
  EXPECT_EQ(a.last_heartbeat_age_ms(), 250);
  const rpc::NodeView& b = all.nodes(1);
  EXPECT_EQ(b.state(), rpc::DEAD);
  EXPECT_EQ(b.death_reason(), "no heartbeat for 3001 ms");
  EXPECT_EQ(b.last_heartbeat_age_ms(), 900);  // since it died
  EXPECT_TRUE(b.resources_available().empty());
  // Totals over alive nodes only; the waiting group is listed with its reason.
  EXPECT_EQ(all.resources_total().at("CPU"), 8 * kResourceScale);
  EXPECT_EQ(all.resources_available().at("CPU"), 6 * kResourceScale);
  ASSERT_EQ(all.pending_size(), 1);
  EXPECT_EQ(all.pending(0).id(), "pg-2");
  EXPECT_EQ(all.pending(0).state(), "PENDING");
}

TEST_F(ViewsTest, NodeViewOfOneNode) {
  Apply(Reg("a", "10.0.0.1", 8));
  Apply(GroupSubmitted{CpuGroup("pg-1")});
  Apply(GroupPlaced{GroupId("pg-1"), 0, {Bundle(0, "a", 3)}, {}, "placed", kWall});
  auto view = NodeViewOf(state_, liveness_, NodeId("a"), kWall);
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->info().agent_port(), 7000);
  EXPECT_EQ(view->incarnation(), 10u);
  EXPECT_EQ(view->resources_available().at("CPU"), 5 * kResourceScale);
  EXPECT_FALSE(NodeViewOf(state_, liveness_, NodeId("nope"), kWall).has_value());
}

TEST_F(ViewsTest, GroupViewNamesBundleAddressesAndDevicesAndHidesLostNodes) {
  Apply(Reg("a", "10.0.0.1", 8, 2));
  Apply(Reg("b", "10.0.0.2", 8));
  Apply(GroupSubmitted{CpuGroup("pg-1")});
  Apply(GroupPlaced{GroupId("pg-1"), 1, {Bundle(0, "a", 1, {0, 1}), Bundle(1, "b", 1)}, {}, "placed 2 bundles on a, b",
                    kWall + 7});
  Apply(GroupBundlesLost{GroupId("pg-1"), {1}, {}, "node b died: bundle 1 lost; placing again", kWall + 9});
  const rpc::PlacementGroupView view = GroupView(state_, *state_.FindGroup(GroupId("pg-1")));
  EXPECT_EQ(view.id(), "pg-1");
  EXPECT_EQ(view.kind(), "placement_group");
  EXPECT_EQ(view.state(), "RESCHEDULING");
  EXPECT_EQ(view.reason(), "node b died: bundle 1 lost; placing again");
  EXPECT_EQ(view.alternative(), 1);
  ASSERT_EQ(view.bundles_size(), 2);
  EXPECT_EQ(view.bundles(0).node_id(), "a");
  EXPECT_EQ(view.bundles(0).address(), "10.0.0.1");
  EXPECT_EQ(std::vector<int>(view.bundles(0).gpus().begin(), view.bundles(0).gpus().end()), (std::vector<int>{0, 1}));
  EXPECT_EQ(view.bundles(1).node_id(), "");  // lost: being placed again
  EXPECT_EQ(view.bundles(1).address(), "");
  ASSERT_EQ(view.history_size(), 3);
  EXPECT_EQ(view.history(1).state(), "CREATED");
  EXPECT_EQ(view.history(2).time_ms(), kWall + 9);
}

TEST(JobDetailsJsonTest, RayFieldsOfAPendingAndAFinishedJob) {
  JobView pending;
  pending.job.id = JobId("raysubmit_1");
  pending.job.request.entrypoint = "echo hi";
  pending.job.request.metadata = {{"owner", "me"}};
  pending.job.request.runtime_env_json = R"({"env_vars": {"A": "1"}})";
  pending.message = "Job is waiting for a node.";
  nlohmann::json j = JobDetailsJson(pending);
  EXPECT_EQ(j["type"], "SUBMISSION");
  EXPECT_EQ(j["job_id"], "raysubmit_1");
  EXPECT_EQ(j["submission_id"], "raysubmit_1");
  EXPECT_EQ(j["status"], "PENDING");
  EXPECT_EQ(j["message"], "Job is waiting for a node.");
  EXPECT_TRUE(j["driver_info"].is_null());
  EXPECT_TRUE(j["start_time"].is_null());
  EXPECT_TRUE(j["error_type"].is_null());
  EXPECT_TRUE(j["driver_node_id"].is_null());
  EXPECT_TRUE(j["driver_exit_code"].is_null());
  EXPECT_EQ(j["runtime_env"]["env_vars"]["A"], "1");
  EXPECT_EQ(j["metadata"]["owner"], "me");

  JobView done = pending;
  done.job.status = JobStatus::kFailed;
  done.job.error_type = "JOB_ENTRYPOINT_COMMAND_ERROR";
  done.job.exit_code = 3;
  done.job.start_time_ms = kWall;
  done.job.end_time_ms = kWall + 5;
  Worker w;
  w.id = WorkerId("job-raysubmit_1");
  w.node = NodeId("cpu-0");
  w.pid = 4242;
  done.worker = w;
  done.node_address = "10.0.0.9";
  j = JobDetailsJson(done);
  EXPECT_EQ(j["driver_info"]["id"], "job-raysubmit_1");
  EXPECT_EQ(j["driver_info"]["node_ip_address"], "10.0.0.9");
  EXPECT_EQ(j["driver_info"]["pid"], "4242");
  EXPECT_EQ(j["driver_node_id"], "cpu-0");
  EXPECT_EQ(j["driver_exit_code"], 3);
  EXPECT_EQ(j["error_type"], "JOB_ENTRYPOINT_COMMAND_ERROR");
  EXPECT_EQ(j["start_time"], kWall);
  EXPECT_EQ(j["end_time"], kWall + 5);

  // Ray's JobErrorType has no NODE_DIED: a job whose node died shows as its supervisor's death, as in Ray.
  done.job.error_type = "NODE_DIED";
  EXPECT_EQ(JobDetailsJson(done)["error_type"], "JOB_SUPERVISOR_ACTOR_DIED");
}

TEST(RunJsonTest, AttemptsRanksExitsAndCheckpoints) {
  RunView view;
  head::Run& run = view.run;
  run.id = RunId("run-1");
  run.spec.scaling.num_workers = 2;
  run.spec.run.name = "r";
  run.spec.run.storage_path = "/tmp/runs";
  run.spec.run.max_failures = 1;
  run.spec.entrypoint = {"python3", "x.py"};
  run.plan.num_workers = 2;
  run.status = RunStatus::kRestarting;
  run.failures = 1;
  run.group = GroupId("pg-9");
  RunAttempt a;
  a.number = 1;
  a.end_time_ms = kWall;
  a.end_reason = "rank 1 on n2 was killed by signal 9";
  a.ranks = {RankState{0, WorkerId("run-1-a1-r0"), NodeId("n1"), "10.0.0.1", "", {}, {0}},
             RankState{1, WorkerId("run-1-a1-r1"), NodeId("n2"), "10.0.0.2", "", {}, {}}};
  a.metrics = {StepMetrics{5, R"({"loss":0.5})", kWall - 10}};
  run.attempts = {a};
  run.committed = {{5, "/tmp/runs/r/checkpoint_5"}};
  Worker ok;
  ok.pid = 11;
  ok.phase = WorkerPhase::kExited;
  ok.exit = WorkerExit{.exit_code = 0};
  Worker killed = ok;
  killed.pid = 12;
  killed.exit = WorkerExit{.signal = 9};
  view.workers = {{ok, killed}};

  nlohmann::json j = RunJson(view);
  EXPECT_EQ(j["run_id"], "run-1");
  EXPECT_EQ(j["status"], "RESTARTING");
  EXPECT_EQ(j["failures"], 1);
  EXPECT_EQ(j["max_failures"], 1);
  EXPECT_EQ(j["num_workers"], 2);
  EXPECT_EQ(j["group_id"], "pg-9");
  EXPECT_EQ(j["storage_path"], "/tmp/runs/r");
  EXPECT_EQ(j["attempt"], 1);
  const nlohmann::json& ranks = j["attempts"][0]["ranks"];
  EXPECT_EQ(ranks[0]["gpus"], nlohmann::json({0}));
  EXPECT_EQ(ranks[0]["pid"], 11);
  EXPECT_EQ(ranks[0]["exit_code"], 0);
  EXPECT_EQ(ranks[1]["signal"], 9);
  EXPECT_FALSE(ranks[1].contains("gpus"));
  EXPECT_FALSE(ranks[1].contains("error"));
  EXPECT_EQ(j["attempts"][0]["end_reason"], "rank 1 on n2 was killed by signal 9");
  EXPECT_EQ(j["attempts"][0]["metrics"][0]["metrics"]["loss"], 0.5);
  EXPECT_EQ(j["checkpoints"][0]["dir"], "/tmp/runs/r/checkpoint_5");

  // A rank lost with its host, or that never started, says why.
  view.workers[0][1]->exit = WorkerExit{.lost = true, .reason = "node n2 died: no heartbeat for 3001 ms"};
  EXPECT_EQ(RunJson(view)["attempts"][0]["ranks"][1]["error"], "was lost: node n2 died: no heartbeat for 3001 ms");
}

}  // namespace views_test
}  // namespace torus::head
