#include "torus/head/workloads/run_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "torus/head/workloads/workload_test_util.h"
#include "torus/train/checkpoints.h"

namespace torus::head {
namespace run_service_test {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using testutil::Eventually;
using testutil::TargetOf;
using testutil::TestHead;
using testutil::World;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

void WriteFile(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A run of two workers on two nodes, its first attempt running.
class RunServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    ASSERT_TRUE(head_.AddNode("n1", "10.0.2.1", 4).ok());
    ASSERT_TRUE(head_.AddNode("n2", "10.0.2.2", 4).ok());
    auto id = head_.runs.Submit(Spec());
    ASSERT_TRUE(id.ok()) << id.status();
    id_ = *id;
    ASSERT_TRUE(AttemptRunning(1));
    token_ = head_.RunOf(id_).token;
    bearer_ = "Bearer " + token_;
    storage_ = tmp_.path() + "/fit";
  }

  train::RunSpec Spec() const {
    train::RunSpec spec;
    spec.scaling.num_workers = 2;
    spec.scaling.placement_strategy = "STRICT_SPREAD";
    spec.run.name = "fit";
    spec.run.storage_path = tmp_.path();
    spec.run.max_failures = 2;
    spec.entrypoint = {"python3", "fit.py"};
    return spec;
  }

  bool AttemptRunning(int number) {
    return head_.WaitFor([&](const ClusterState& s) {
      const head::Run* run = s.FindRun(id_);
      if (run == nullptr || run->status != RunStatus::kRunning || run->current()->number != number) return false;
      for (const RankState& r : run->current()->ranks) {
        const Worker* w = s.FindWorker(r.worker);
        if (w == nullptr || w->phase != WorkerPhase::kRunning) return false;
      }
      return true;
    });
  }

  absl::StatusOr<nlohmann::json> Report(const std::string& body) { return head_.runs.Report(id_.str(), bearer_, body); }

  // The staged dir of `rank` for `step` of `attempt`, as torus_train creates it, with `files`.
  std::string Stage(int attempt, int64_t step, int rank, const std::map<std::string, std::string>& files) {
    const fs::path dir = fs::path(storage_) / ".staging" / absl::StrCat("attempt_", attempt) /
                         absl::StrCat("step_", step) / absl::StrCat("rank_", rank);
    fs::create_directories(dir);
    for (const auto& [name, text] : files) WriteFile(dir / name, text);
    return dir.string();
  }

  testutil::TempDir tmp_;
  World world_;
  TestHead head_{&world_};
  RunId id_;
  std::string token_, bearer_, storage_;
};

TEST_F(RunServiceTest, SubmitValidatesAndRecordsNothingOnError) {
  train::RunSpec no_workers = Spec();
  no_workers.scaling.num_workers.reset();
  EXPECT_EQ(head_.runs.Submit(no_workers).status().message(), "num_workers is required without use_tpu");
  train::RunSpec relative = Spec();
  relative.run.storage_path = "runs";
  auto bad = head_.runs.Submit(relative);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "storage_path \"runs\" is not an absolute path");
  EXPECT_EQ(head_.runs.List().size(), 1u);
  EXPECT_EQ(head_.store.Read([](const ClusterState& s) { return s.groups().size(); }), 1u);
}

TEST_F(RunServiceTest, APackageTheHeadDoesNotHoldIsRefused) {
  train::RunSpec spec = Spec();
  spec.py_modules = {"/opt/mods", "gcs://_ray_pkg_gone.zip"};
  auto id = head_.runs.Submit(spec);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(id.status().message(), "py_modules[1]: package gcs://_ray_pkg_gone.zip is not on the head; upload it "
                                   "first (PUT /api/packages/gcs/_ray_pkg_gone.zip)");
  spec = Spec();
  spec.working_dir = "s3://bucket/code.zip";
  EXPECT_EQ(head_.runs.Submit(spec).status().message(),
            "working_dir \"s3://bucket/code.zip\" is not supported; use a package uploaded to the head "
            "(gcs://<name>.zip) or a directory on every host");
  EXPECT_EQ(head_.runs.List().size(), 1u);  // the fixture's run only
}

TEST_F(RunServiceTest, GetByIdOrName) {
  auto by_name = head_.runs.Get("fit");
  ASSERT_TRUE(by_name.ok());
  EXPECT_EQ(by_name->run.id, id_);
  ASSERT_EQ(by_name->workers.size(), 1u);
  ASSERT_EQ(by_name->workers[0].size(), 2u);
  EXPECT_EQ(by_name->workers[0][1]->id, WorkerId(id_.str() + "-a1-r1"));
  EXPECT_EQ(head_.runs.Get(id_.str())->run.id, id_);
  EXPECT_EQ(head_.runs.Get("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(head_.runs.Get("nope").status().message(), "run nope does not exist");
}

TEST_F(RunServiceTest, ReportAuthenticatesAndChecksTheAttempt) {
  const std::string body = R"({"rank": 0, "attempt": 1, "step": 1})";
  auto unknown = head_.runs.Report("run-nope", bearer_, body);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(), "run run-nope does not exist");
  for (const std::string& wrong : {std::string("Bearer nope"), token_, std::string(""), "bearer " + token_}) {
    auto s = head_.runs.Report(id_.str(), wrong, body);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kUnauthenticated) << wrong;
    EXPECT_EQ(s.status().message(), "wrong run token");
  }
  auto stale = Report(R"({"rank": 0, "attempt": 2, "step": 1})");
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(stale.status().message(), absl::StrCat("attempt 2 of run ", id_.str(), " is not the running one"));
  auto ok = Report(body);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, (nlohmann::json{{"committed", false}}));
}

TEST_F(RunServiceTest, ReportBodyErrorsNameTheField) {
  struct Row {
    std::string body;
    std::string want;
  };
  const std::vector<Row> rows = {
      {"not json", "body must be a JSON object"},
      {"[1, 2]", "body must be a JSON object"},
      {R"({"attempt": 1, "step": 1})", "\"rank\" must be an integer"},
      {R"({"rank": "0", "attempt": 1, "step": 1})", "\"rank\" must be an integer"},
      {R"({"rank": 0.5, "attempt": 1, "step": 1})", "\"rank\" must be an integer"},
      {R"({"rank": 0, "step": 1})", "\"attempt\" must be an integer"},
      {R"({"rank": 0, "attempt": 1, "step": null})", "\"step\" must be an integer"},
      {R"({"rank": 0, "attempt": 1, "step": 1, "metrics": [1]})", "\"metrics\" must be an object"},
      {R"({"rank": 0, "attempt": 1, "step": 1, "checkpoint": 5})", "\"checkpoint\" must be a string or null"},
      {R"({"rank": 2, "attempt": 1, "step": 1})", "rank 2 is out of range"},
      {R"({"rank": -1, "attempt": 1, "step": 1})", "rank -1 is out of range"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.body);
    auto got = Report(row.body);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(got.status().message(), row.want);
  }
  // A checkpoint outside the run's staging area, or not a directory.
  const std::string staging = (fs::path(storage_) / ".staging").string();
  auto outside = Report(R"({"rank": 0, "attempt": 1, "step": 1, "checkpoint": "/etc"})");
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(outside.status().message(),
            absl::StrCat("checkpoint \"/etc\" is not staged under ", staging, "; report it with torus_train"));
  const std::string escape = staging + "/../../../etc";
  auto escaping = Report(nlohmann::json{{"rank", 0}, {"attempt", 1}, {"step", 1}, {"checkpoint", escape}}.dump());
  EXPECT_EQ(escaping.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string file = staging + "/attempt_1/step_1/rank_0";
  WriteFile(file, "not a dir");
  auto not_dir = Report(nlohmann::json{{"rank", 0}, {"attempt", 1}, {"step", 1}, {"checkpoint", file}}.dump());
  EXPECT_EQ(not_dir.status().message(), absl::StrCat("checkpoint \"", file, "\" is not a directory"));
  // Nothing of these was recorded.
  EXPECT_TRUE(head_.RunOf(id_).reports.empty());
}

// A rank (or attempt) beyond int is refused, not truncated to rank 0.
TEST_F(RunServiceTest, ARankBeyondIntIsOutOfRangeNotRankZero) {
  auto got = Report(R"({"rank": 4294967296, "attempt": 1, "step": 3, "metrics": {"loss": 7}})");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(got.status().message()), "rank 4294967296 is out of range");
  EXPECT_TRUE(head_.RunOf(id_).reports.empty());
}

TEST_F(RunServiceTest, AStepEveryRankReportedCommitsItsCheckpointAndTheNextAttemptResumesFromIt) {
  const std::string rank0 = Stage(1, 10, 0, {{"model.pt", "weights"}, {"shared.txt", "from rank 0"}});
  const std::string rank1 = Stage(1, 10, 1, {{"optim.pt", "moments"}, {"shared.txt", "from rank 1"}});

  auto first = Report(nlohmann::json{{"rank", 1},
                                     {"attempt", 1},
                                     {"step", 10},
                                     {"metrics", {{"loss", 9.0}}},
                                     {"checkpoint", rank1}}
                          .dump());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, (nlohmann::json{{"committed", false}}));
  EXPECT_FALSE(fs::exists(fs::path(storage_) / "checkpoint_10"));

  const int64_t wall = world_.clock.WallMillis();
  auto last = Report(nlohmann::json{{"rank", 0},
                                    {"attempt", 1},
                                    {"step", 10},
                                    {"metrics", {{"loss", 0.25}}},
                                    {"checkpoint", rank0}}
                         .dump());
  ASSERT_TRUE(last.ok()) << last.status();
  const std::string dir = storage_ + "/checkpoint_10";
  EXPECT_EQ(*last, (nlohmann::json{{"committed", true}, {"checkpoint", dir}}));

  // Sent again (its answer lost with a head that died, say): the same answer, though its staged copy is gone.
  auto again = Report(nlohmann::json{{"rank", 0},
                                     {"attempt", 1},
                                     {"step", 10},
                                     {"metrics", {{"loss", 0.25}}},
                                     {"checkpoint", rank0}}
                          .dump());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, (nlohmann::json{{"committed", true}, {"checkpoint", dir}}));

  // Merged (the lower rank wins a clash), marked committed, the step's staging gone.
  EXPECT_EQ(ReadFile(fs::path(dir) / "model.pt"), "weights");
  EXPECT_EQ(ReadFile(fs::path(dir) / "optim.pt"), "moments");
  EXPECT_EQ(ReadFile(fs::path(dir) / "shared.txt"), "from rank 0");
  EXPECT_TRUE(fs::exists(fs::path(dir) / train::kCommitMarker));
  EXPECT_FALSE(fs::exists(fs::path(storage_) / ".staging" / "attempt_1" / "step_10"));

  const head::Run run = head_.RunOf(id_);
  EXPECT_THAT(run.committed, ElementsAre(std::make_pair(int64_t{10}, dir)));
  EXPECT_TRUE(run.reports.empty());
  // Only rank 0's metrics are kept.
  ASSERT_EQ(run.current()->metrics.size(), 1u);
  EXPECT_EQ(run.current()->metrics[0].step, 10);
  EXPECT_EQ(run.current()->metrics[0].metrics_json, R"({"loss":0.25})");
  EXPECT_EQ(run.current()->metrics[0].time_ms, wall);

  // A failure: attempt 2 resumes from the committed checkpoint.
  const RankState r1 = run.current()->ranks[1];
  ASSERT_TRUE(head_.ExitWorker(r1.node.str(), r1.address, r1.worker, 1).ok());
  for (const RankState& r : run.current()->ranks) {
    if (r.rank == 1) continue;
    ASSERT_TRUE(Eventually([&] { return world_.agents.Workers(TargetOf(r.address)).at(r.worker).stop_requested; }));
    ASSERT_TRUE(head_.ExitWorker(r.node.str(), r.address, r.worker, 0, 15).ok());
  }
  ASSERT_TRUE(AttemptRunning(2));
  const head::Run second = head_.RunOf(id_);
  EXPECT_EQ(second.current()->checkpoint_dir, dir);
  EXPECT_EQ(second.message, absl::StrCat("attempt 2: 2 workers from ", dir));
  const RankState a2r0 = second.current()->ranks[0];
  EXPECT_EQ(world_.agents.Workers(TargetOf(a2r0.address)).at(a2r0.worker).spec.env_set.at("TORUS_CHECKPOINT_DIR"),
            dir);
  // Reports of attempt 1 are stale now.
  EXPECT_EQ(Report(R"({"rank": 0, "attempt": 1, "step": 11})").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(RunServiceTest, AStepWithoutCheckpointsCommitsNothing) {
  EXPECT_EQ(*Report(R"({"rank": 0, "attempt": 1, "step": 5, "metrics": {"loss": 1}})"),
            (nlohmann::json{{"committed", false}}));
  EXPECT_EQ(head_.RunOf(id_).reports.size(), 1u);
  EXPECT_EQ(*Report(R"({"rank": 1, "attempt": 1, "step": 5, "checkpoint": null})"),
            (nlohmann::json{{"committed", false}}));
  const head::Run run = head_.RunOf(id_);
  EXPECT_TRUE(run.reports.empty());
  EXPECT_TRUE(run.committed.empty());
  ASSERT_EQ(run.current()->metrics.size(), 1u);
  EXPECT_EQ(run.current()->metrics[0].metrics_json, R"({"loss":1})");
  EXPECT_TRUE(train::ListCommitted(storage_).empty());
}

TEST_F(RunServiceTest, CountByStatusAndTotalRestarts) {
  EXPECT_EQ(head_.runs.CountByStatus(),
            (std::map<std::string, int>{{"PENDING", 0},
                                        {"RUNNING", 1},
                                        {"RESTARTING", 0},
                                        {"SUCCEEDED", 0},
                                        {"FAILED", 0},
                                        {"STOPPED", 0}}));
  EXPECT_EQ(head_.runs.TotalRestarts(), 0);

  // A second run that cannot be placed (STRICT_SPREAD over 3 nodes; there are 2).
  train::RunSpec wide = Spec();
  wide.scaling.num_workers = 3;
  wide.run.name = "wide";
  ASSERT_TRUE(head_.runs.Submit(wide).ok());

  const head::Run run = head_.RunOf(id_);
  const RankState r0 = run.current()->ranks[0];
  ASSERT_TRUE(head_.ExitWorker(r0.node.str(), r0.address, r0.worker, 0, 9).ok());
  ASSERT_TRUE(head_.WaitFor([&](const ClusterState& s) { return s.FindRun(id_)->failures == 1; }));
  EXPECT_EQ(head_.runs.TotalRestarts(), 1);
  const auto counts = head_.runs.CountByStatus();
  EXPECT_EQ(counts.at("PENDING"), 1);
  EXPECT_EQ(counts.at("RUNNING") + counts.at("RESTARTING"), 1);
  EXPECT_EQ(counts.size(), 6u);
}

TEST_F(RunServiceTest, StopEndsTheRunAtOnceAndItsWorkersAreStopped) {
  auto stopped = head_.runs.Stop("fit");
  ASSERT_TRUE(stopped.ok());
  EXPECT_TRUE(*stopped);
  const head::Run run = head_.RunOf(id_);
  EXPECT_EQ(RunStatusName(run.status), "STOPPED");
  EXPECT_EQ(run.message, "stopped by the user");
  EXPECT_EQ(run.attempts[0].end_reason, "stopped by the user");
  EXPECT_EQ(PgStateName(head_.GroupOf(run.group).state), "REMOVED");
  EXPECT_FALSE(*head_.runs.Stop(id_.str()));
  EXPECT_EQ(head_.runs.Stop("nope").status().code(), absl::StatusCode::kNotFound);
  for (const RankState& r : run.current()->ranks) {
    EXPECT_TRUE(Eventually([&] { return world_.agents.Workers(TargetOf(r.address)).at(r.worker).stop_requested; }));
  }
  EXPECT_EQ(Report(R"({"rank": 0, "attempt": 1, "step": 1})").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(head_.runs.CountByStatus().at("STOPPED"), 1);
}

TEST_F(RunServiceTest, ReadLog) {
  const head::Run run = head_.RunOf(id_);
  auto log = head_.runs.ReadLog("fit", 1, 0, 0, 100);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(log->data, absl::StrCat("log of ", run.current()->ranks[1].worker.str(), "\n"));
  EXPECT_FALSE(log->finished);
  auto bad_rank = head_.runs.ReadLog("fit", 2, 0, 0, 100);
  EXPECT_EQ(bad_rank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad_rank.status().message(), "rank 2 is out of range; attempt 1 has 2 ranks");
  auto bad_attempt = head_.runs.ReadLog("fit", 0, 3, 0, 100);
  EXPECT_EQ(bad_attempt.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(bad_attempt.status().message(), absl::StrCat("run ", id_.str(), " has no attempt 3"));
}

TEST_F(RunServiceTest, ReadLogsReadsEveryRankFromItsOffset) {
  const head::Run run = head_.RunOf(id_);
  const std::string log0 = absl::StrCat("log of ", run.current()->ranks[0].worker.str(), "\n");
  const std::string log1 = absl::StrCat("log of ", run.current()->ranks[1].worker.str(), "\n");
  auto all = head_.runs.ReadLogs("fit", 0, {}, 100);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->attempt, 1);
  ASSERT_EQ(all->ranks.size(), 2u);
  EXPECT_EQ(all->ranks[0]->data, log0);
  EXPECT_EQ(all->ranks[1]->data, log1);
  auto from = head_.runs.ReadLogs("fit", 1, {3, static_cast<int64_t>(log1.size())}, 100);
  ASSERT_TRUE(from.ok()) << from.status();
  EXPECT_EQ(from->ranks[0]->data, log0.substr(3));
  EXPECT_EQ(from->ranks[1]->data, "");
  EXPECT_EQ(from->ranks[1]->next_offset, static_cast<int64_t>(log1.size()));
  auto miscounted = head_.runs.ReadLogs("fit", 0, {0}, 100);
  EXPECT_EQ(miscounted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(miscounted.status().message(), "offsets: give one offset per rank (attempt 1 has 2 ranks), or none");
  EXPECT_EQ(head_.runs.ReadLogs("nope", 0, {}, 100).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace run_service_test
}  // namespace torus::head
