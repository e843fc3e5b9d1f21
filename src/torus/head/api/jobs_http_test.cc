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

}  // namespace jobs_http_test
}  // namespace torus::head
