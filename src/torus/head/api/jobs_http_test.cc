#include "torus/head/api/jobs_http.h"

#include <httplib.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "torus/head/api/event_log.h"
#include "torus/head/workloads/workload_test_util.h"

namespace torus::head {
namespace jobs_http_test {

using testutil::TestHead;
using testutil::World;

// A whole head in this process (fake agents) with the job routes on a free loopback port, its events fed from the
// store as main.cc feeds them.
class JobsHttpTest : public ::testing::Test {
 protected:
  JobsHttpTest() : events_(1, 1000) {
    TestHead::Options options;
    options.first_subscriber = [this](const std::vector<Record>& records) {
      events_.Append(EventsFromRecords(records, [](const WorkerId&) { return Owner{}; }));
    };
    head_ = std::make_unique<TestHead>(&world_, options);
    RegisterJobRoutes(server_, &head_->jobs, &events_, {});
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~JobsHttpTest() override {
    events_.Close();
    server_.stop();
    thread_.join();
    head_->Shutdown();
  }

  World world_;
  EventLog events_;
  std::unique_ptr<TestHead> head_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

// The worker has exited — its log is complete — but its exit report has not reached the head yet: a waiting read
// answers once the job's end is recorded, with the final status, rather than "finished" with the job still RUNNING
// (which a follower would have to ask about again).
TEST_F(JobsHttpTest, AWaitingReadOfAFinishedLogAnswersWithTheRecordedEnd) {
  ASSERT_TRUE(head_->AddNode("n1", "10.0.0.7", 8).ok());
  JobRequest request;
  request.submission_id = "job-1";
  request.entrypoint = "true";
  request.resources.Set("CPU", 1);
  ASSERT_TRUE(head_->jobs.Submit(request).ok());
  ASSERT_TRUE(head_->WaitForJob("job-1", JobStatus::kRunning));
  const WorkerId worker("job-job-1");
  world_.agents.EndWorker(testutil::TargetOf("10.0.0.7"), worker);
  const int64_t end = static_cast<int64_t>(std::string("log of job-job-1\n").size());

  int code = 0;
  std::string text;
  std::thread reader([&] {
    httplib::Client client("127.0.0.1", port_);
    client.set_read_timeout(20, 0);
    auto res = client.Get("/api/v0/jobs/job-1/logs?offset=" + std::to_string(end) + "&wait_ms=15000");
    if (res) {
      code = res->status;
      text = res->body;
    }
  });
  // Let the read reach the head and find the log finished before the exit is reported.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(head_->membership.ReportWorkerExit(NodeId("n1"), worker, 0, 0, world_.clock.WallMillis()).ok());
  reader.join();
  ASSERT_EQ(code, 200) << text;
  const nlohmann::json body = nlohmann::json::parse(text);
  EXPECT_EQ(body["data"], "");
  EXPECT_EQ(body["next_offset"], end);
  EXPECT_EQ(body["finished"], true);
  EXPECT_EQ(body["status"], "SUCCEEDED");
}

// Found with jobs_http_fuzz (its UndefinedBehaviorSanitizer): two fields naming one resource (entrypoint_num_cpus and
// entrypoint_resources.CPU) summed past int64, and the wrapped, negative total aborted the head (SetFixed's REQUIRES).
TEST(ParseJobSubmissionTest, AmountsOfOneResourceAddUpToAtMostTheLargestAmount) {
  absl::StatusOr<JobRequest> at_limit = ParseJobSubmission(
      R"({"entrypoint": "x", "entrypoint_num_cpus": 4.5e14, "entrypoint_resources": {"CPU": 4.5e14}})");
  ASSERT_TRUE(at_limit.ok()) << at_limit.status();
  EXPECT_EQ(at_limit->resources.GetFixed("CPU"), int64_t{9'000'000'000'000'000'000});
  for (const char* body : {R"({"entrypoint": "x", "entrypoint_num_cpus": 9e14, "entrypoint_resources": {"CPU": 9e14}})",
                           R"({"entrypoint": "x", "entrypoint_num_cpus": 1, "entrypoint_resources": {"CPU": 9e14}})"}) {
    absl::StatusOr<JobRequest> over = ParseJobSubmission(body);
    ASSERT_FALSE(over.ok()) << body;
    EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(over.status().message(),
              "field \"entrypoint_resources.CPU\": expected a number that keeps the total of CPU at most "
              "900000000000000");
  }
}

// Ray's client sends runtime_env.to_dict(): beside pip or conda it adds _ray_commit (and may add
// _inject_current_ray). Those are not the user's request: a refusal names pip, and a job with them runs.
TEST(ParseJobSubmissionTest, RaysOwnRuntimeEnvKeysAreNotWhatARefusalNames) {
  absl::StatusOr<JobRequest> pip = ParseJobSubmission(
      R"({"entrypoint": "x", "runtime_env": {"_ray_commit": "b7f4259e", "pip": {"packages": ["a"], "pip_check": false}}})");
  ASSERT_FALSE(pip.ok());
  EXPECT_EQ(pip.status().message(),
            "runtime_env field \"pip\" is not supported; supported: env_vars, working_dir, py_modules, excludes");

  absl::StatusOr<JobRequest> ok = ParseJobSubmission(
      R"({"entrypoint": "x", "runtime_env": {"_inject_current_ray": true, "_ray_commit": "b7f4259e",
          "env_vars": {"A": "1"}}})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->env_vars, (std::map<std::string, std::string>{{"A", "1"}}));
  EXPECT_EQ(nlohmann::json::parse(ok->runtime_env_json)["_ray_commit"], "b7f4259e");
}

// DELETE of a job that has not ended answers Ray's job server's words (Ray programs and KubeRay read them), and the
// job is still there; once it ended, it is deleted.
TEST_F(JobsHttpTest, DeletingAJobThatHasNotEndedIsRefusedInRaysWords) {
  ASSERT_TRUE(head_->AddNode("n1", "10.0.0.7", 8).ok());
  JobRequest request;
  request.submission_id = "job-1";
  request.entrypoint = "sleep 60";
  request.resources.Set("CPU", 1);
  ASSERT_TRUE(head_->jobs.Submit(request).ok());
  ASSERT_TRUE(head_->WaitForJob("job-1", JobStatus::kRunning));

  httplib::Client client("127.0.0.1", port_);
  auto refused = client.Delete("/api/jobs/job-1");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  EXPECT_EQ(refused->body, "Attempted to delete job 'job-1', but it is in a non-terminal state RUNNING.");
  auto still = client.Get("/api/jobs/job-1");
  ASSERT_TRUE(still);
  EXPECT_EQ(still->status, 200);

  auto unknown = client.Delete("/api/jobs/job-9");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  EXPECT_EQ(unknown->body, "Job job-9 does not exist");

  world_.agents.EndWorker(testutil::TargetOf("10.0.0.7"), WorkerId("job-job-1"));
  ASSERT_TRUE(head_->membership.ReportWorkerExit(NodeId("n1"), WorkerId("job-job-1"), 0, 0, world_.clock.WallMillis())
                  .ok());
  ASSERT_TRUE(head_->WaitForJob("job-1", JobStatus::kSucceeded));
  auto deleted = client.Delete("/api/jobs/job-1");
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->status, 200);
  EXPECT_EQ(nlohmann::json::parse(deleted->body), nlohmann::json({{"deleted", true}}));
}

}  // namespace jobs_http_test
}  // namespace torus::head
