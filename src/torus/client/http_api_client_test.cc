#include "torus/client/http_api_client.h"

#include <httplib.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torus::client {
namespace http_api_client_test {

using ::testing::HasSubstr;
using nlohmann::json;

constexpr char kToken[] = "s3cret-token";

// What the fake head received.
struct Request {
  std::string method;
  std::string target;  // path and query, as sent
  std::string body;
  std::string authorization;
};

// A stand-in for the head's HTTP API on a free loopback port: records every request and gives the answer it was
// told to. Stopped on destruction.
class FakeHead {
 public:
  // Listens on `port` (0: any free one).
  explicit FakeHead(int port = 0) {
    auto handle = [this](const httplib::Request& req, httplib::Response& res) {
      absl::MutexLock lock(&mu_);
      requests_.push_back({req.method, req.target, req.body, req.get_header_value("Authorization")});
      res.status = status_;
      res.set_content(body_, content_type_);
    };
    server_.Get(".*", handle);
    server_.Post(".*", handle);
    server_.Delete(".*", handle);
    server_.set_keep_alive_timeout(1);  // stop() waits this long for an idle keep-alive connection
    port_ = port == 0 ? server_.bind_to_any_port("127.0.0.1")
                      : (server_.bind_to_port("127.0.0.1", port) ? port : -1);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the loop runs would be lost, and the destructor would wait forever.
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeHead() {
    server_.stop();
    thread_.join();
  }

  void Answer(int status, const std::string& body, const std::string& content_type = "application/json") {
    absl::MutexLock lock(&mu_);
    status_ = status;
    body_ = body;
    content_type_ = content_type;
  }
  void Answer(const json& body) { Answer(200, body.dump()); }

  std::vector<Request> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  Request last() {
    absl::MutexLock lock(&mu_);
    return requests_.empty() ? Request{} : requests_.back();
  }

  HeadEndpoint endpoint() const { return {"127.0.0.1:" + std::to_string(port_), kToken}; }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  absl::Mutex mu_;
  std::vector<Request> requests_ ABSL_GUARDED_BY(mu_);
  int status_ ABSL_GUARDED_BY(mu_) = 200;
  std::string body_ ABSL_GUARDED_BY(mu_) = "{}";
  std::string content_type_ ABSL_GUARDED_BY(mu_) = "application/json";
};

class HttpApiClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto client = HttpApiClient::Connect(head_.endpoint());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  // Checks the last request's method, target and token.
  void ExpectRequest(const std::string& method, const std::string& target) {
    Request r = head_.last();
    EXPECT_EQ(r.method, method);
    EXPECT_EQ(r.target, target);
    EXPECT_EQ(r.authorization, std::string("Bearer ") + kToken);
  }
  json LastBody() { return json::parse(head_.last().body); }

  FakeHead head_;
  std::unique_ptr<HttpApiClient> client_;
};

TEST(HttpApiClientConnectTest, RefusesAnEmptyAddress) {
  auto client = HttpApiClient::Connect({"", kToken});
  EXPECT_EQ(client.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(client.status().message(), HasSubstr("HOST:PORT"));
}

// Jobs.

TEST_F(HttpApiClientTest, SubmitJobSendsEveryGivenField) {
  head_.Answer({{"job_id", "job-1"}, {"submission_id", "job-1"}});
  JobSubmission job;
  job.entrypoint = "echo 'hi there'";
  job.submission_id = "job-1";
  job.env_vars = {{"A", "1"}, {"B", "two"}};
  job.working_dir = "/srv/app";
  job.resources = {{"CPU", 1}, {"accel_x", 0.5}};
  job.label_selector = {{"team", "data"}};
  job.metadata = {{"owner", "me"}};
  auto id = client_->SubmitJob(job);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "job-1");
  ExpectRequest("POST", "/api/jobs/");
  EXPECT_EQ(LastBody(), json::parse(R"({
    "entrypoint": "echo 'hi there'", "submission_id": "job-1",
    "runtime_env": {"env_vars": {"A": "1", "B": "two"}, "working_dir": "/srv/app"},
    "entrypoint_resources": {"CPU": 1, "accel_x": 0.5},
    "entrypoint_label_selector": {"team": "data"}, "metadata": {"owner": "me"}})"));
}

TEST_F(HttpApiClientTest, SubmitJobLeavesEmptyFieldsOut) {
  head_.Answer({{"job_id", "raysubmit_x"}, {"submission_id", "raysubmit_x"}});
  auto id = client_->SubmitJob({.entrypoint = "true"});
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "raysubmit_x");
  EXPECT_EQ(LastBody(), json({{"entrypoint", "true"}}));
}

TEST_F(HttpApiClientTest, GetAndListJobsReturnTheJobDetails) {
  json details = {{"submission_id", "a b/c"}, {"status", "RUNNING"}, {"message", ""}, {"entrypoint", "sleep 1"}};
  head_.Answer(details);
  auto job = client_->GetJob("a b/c");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(*job, details);
  ExpectRequest("GET", "/api/jobs/a%20b%2Fc");  // one path segment, whatever the id holds

  head_.Answer(json::array({details}));
  auto jobs = client_->ListJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(*jobs, json::array({details}));
  ExpectRequest("GET", "/api/jobs/");
}

TEST_F(HttpApiClientTest, StopJobSaysWhetherItWasRunning) {
  head_.Answer({{"stopped", true}});
  auto stopped = client_->StopJob("job-1");
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_TRUE(*stopped);
  ExpectRequest("POST", "/api/jobs/job-1/stop");

  head_.Answer({{"stopped", false}});
  stopped = client_->StopJob("job-1");
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_FALSE(*stopped);
}

TEST_F(HttpApiClientTest, DeleteJob) {
  head_.Answer({{"deleted", true}});
  EXPECT_TRUE(client_->DeleteJob("job-1").ok());
  ExpectRequest("DELETE", "/api/jobs/job-1");

  head_.Answer(400, "Job job-1 is RUNNING; stop it first", "text/plain");
  absl::Status refused = client_->DeleteJob("job-1");
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message(), "Job job-1 is RUNNING; stop it first");
}

TEST_F(HttpApiClientTest, ReadJobLogFromAnOffset) {
  head_.Answer({{"data", "line 2\n"}, {"next_offset", 49}, {"finished", false}, {"status", "RUNNING"}});
  auto chunk = client_->ReadJobLog("job-1", 42);
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  EXPECT_EQ(chunk->data, "line 2\n");
  EXPECT_EQ(chunk->next_offset, 49);
  EXPECT_FALSE(chunk->finished);
  EXPECT_EQ(chunk->status, "RUNNING");
  ExpectRequest("GET", "/api/v0/jobs/job-1/logs?offset=42");
}

TEST_F(HttpApiClientTest, JobLogsIsTheWholeText) {
  head_.Answer({{"logs", "one\ntwo\n"}});
  auto logs = client_->JobLogs("job-1");
  ASSERT_TRUE(logs.ok()) << logs.status();
  EXPECT_EQ(*logs, "one\ntwo\n");
  ExpectRequest("GET", "/api/jobs/job-1/logs");
}

// Runs.

train::RunSpec TpuSpec() {
  train::RunSpec spec;
  spec.scaling.use_tpu = true;
  spec.scaling.accelerator_type = "TPU-V6E";
  spec.scaling.topology = "4x4";
  spec.scaling.num_slices = 2;
  spec.scaling.resources_per_worker = ResourceSet();
  spec.scaling.resources_per_worker->Set("TPU", 1);
  spec.scaling.resources_per_worker->Set("accel_x", 0.25);
  spec.scaling.label_selector = {{"torus.io/market-type", "spot"}};
  spec.scaling.fallbacks = {{"TPU-V5LITEPOD", "2x4", 0, std::nullopt}, {"TPU-V4", "2x2x2", 1, 4}};
  spec.run.name = "tour";
  spec.run.storage_path = "/tmp/runs";
  spec.run.max_failures = 2;
  spec.run.checkpoints_to_keep = 3;
  spec.entrypoint = {"python3", "train.py", "--lr", "0.1"};
  spec.env = {{"SEED", "7"}};
  spec.working_dir = "/srv";
  return spec;
}

TEST_F(HttpApiClientTest, SubmitRunSendsTheSpecAsItsRestJson) {
  head_.Answer({{"run_id", "run-abc"}, {"name", "tour"}});
  const train::RunSpec spec = TpuSpec();
  auto run = client_->SubmitRun(spec);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->run_id, "run-abc");
  EXPECT_EQ(run->name, "tour");
  ExpectRequest("POST", "/api/v0/runs");
  EXPECT_EQ(head_.last().body, train::RunSpecToJson(spec));
  auto parsed = train::RunSpecFromJson(head_.last().body);  // what the head reads
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, spec);
}

TEST_F(HttpApiClientTest, SubmitRunWithoutANameBack) {
  head_.Answer({{"run_id", "run-abc"}, {"name", nullptr}});
  auto run = client_->SubmitRun(TpuSpec());
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->name, "");
}

TEST_F(HttpApiClientTest, RefusedRunCarriesTheHeadsMessage) {
  head_.Answer(400, json({{"error", "num_workers=6 does not match TPU-V6E 4x4 x2 with 4 chips per worker; expected 8"}})
                        .dump());
  auto run = client_->SubmitRun(TpuSpec());
  EXPECT_EQ(run.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run.status().message(), "num_workers=6 does not match TPU-V6E 4x4 x2 with 4 chips per worker; expected 8");
}

TEST_F(HttpApiClientTest, GetListAndStopRuns) {
  json view = {{"run_id", "run-abc"}, {"name", "tour"}, {"status", "RUNNING"}, {"attempt", 1}};
  head_.Answer(view);
  auto run = client_->GetRun("tour");
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(*run, view);
  ExpectRequest("GET", "/api/v0/runs/tour");

  head_.Answer(json::array({view}));
  auto runs = client_->ListRuns();
  ASSERT_TRUE(runs.ok()) << runs.status();
  EXPECT_EQ(*runs, json::array({view}));
  ExpectRequest("GET", "/api/v0/runs");

  head_.Answer({{"stopped", true}});
  auto stopped = client_->StopRun("tour");
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_TRUE(*stopped);
  ExpectRequest("POST", "/api/v0/runs/tour/stop");
}

TEST_F(HttpApiClientTest, ReadRunLogOfOneRankAndAttempt) {
  head_.Answer({{"data", "step 1\n"}, {"next_offset", 107}, {"finished", true}});
  auto chunk = client_->ReadRunLog("run-abc", 3, 2, 100);
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  EXPECT_EQ(chunk->data, "step 1\n");
  EXPECT_EQ(chunk->next_offset, 107);
  EXPECT_TRUE(chunk->finished);
  ExpectRequest("GET", "/api/v0/runs/run-abc/logs?rank=3&attempt=2&offset=100");
}

// Errors.

TEST_F(HttpApiClientTest, MapsHttpCodesToStatusCodes) {
  struct Case {
    int http;
    std::string body;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {400, R"({"error": "bad field"})", absl::StatusCode::kInvalidArgument, "bad field"},
      {401, "missing or invalid token", absl::StatusCode::kUnauthenticated, "missing or invalid token"},
      {404, "Job nope does not exist", absl::StatusCode::kNotFound, "Job nope does not exist"},
      {404, R"({"error": "run nope not found"})", absl::StatusCode::kNotFound, "run nope not found"},
      {409, R"({"error": "already exists"})", absl::StatusCode::kFailedPrecondition, "already exists"},
      {500, R"({"error": "boom"})", absl::StatusCode::kInternal, "HTTP 500: boom"},
      {503, "starting", absl::StatusCode::kUnavailable, "starting"},
  };
  for (const Case& c : cases) {
    head_.Answer(c.http, c.body);
    auto job = client_->GetJob("nope");
    EXPECT_EQ(job.status().code(), c.code) << c.http << " " << c.body;
    EXPECT_EQ(job.status().message(), c.message) << c.http << " " << c.body;
  }
}

TEST_F(HttpApiClientTest, UnexpectedAnswersAreInternal) {
  head_.Answer(200, "<html>not json</html>", "text/html");
  EXPECT_EQ(client_->ListRuns().status().code(), absl::StatusCode::kInternal);

  head_.Answer({{"data", "x"}});  // no next_offset
  auto chunk = client_->ReadRunLog("run-abc", 0, 0, 0);
  EXPECT_EQ(chunk.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(chunk.status().message(), HasSubstr("a run log read"));

  head_.Answer({{"stopped", "yes"}});
  EXPECT_EQ(client_->StopJob("job-1").status().code(), absl::StatusCode::kInternal);
}

TEST(HttpApiClientUnreachableTest, AHeadThatIsDownIsUnavailable) {
  HeadEndpoint endpoint;
  {
    FakeHead gone;
    endpoint = gone.endpoint();
  }  // nothing listens on its port any more
  auto client = HttpApiClient::Connect(endpoint);
  ASSERT_TRUE(client.ok()) << client.status();
  auto chunk = (*client)->ReadJobLog("job-1", 0);
  EXPECT_EQ(chunk.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(chunk.status().message(), HasSubstr("head HTTP API at " + endpoint.address + " is not reachable"));
}

TEST(HttpApiClientRestartTest, OneClientOutlivesARestartOfTheHead) {
  // A follower keeps one client while the head restarts on the same port: the dead keep-alive connection gives
  // Unavailable, and the next call after the head is back reconnects.
  auto head = std::make_unique<FakeHead>();
  const HeadEndpoint endpoint = head->endpoint();
  const int port = std::stoi(endpoint.address.substr(endpoint.address.rfind(':') + 1));
  auto client = HttpApiClient::Connect(endpoint);
  ASSERT_TRUE(client.ok()) << client.status();
  head->Answer({{"logs", "before"}});
  ASSERT_EQ((*client)->JobLogs("job-1").value_or(""), "before");

  head.reset();
  EXPECT_EQ((*client)->JobLogs("job-1").status().code(), absl::StatusCode::kUnavailable);

  head = std::make_unique<FakeHead>(port);
  head->Answer({{"logs", "after"}});
  EXPECT_EQ((*client)->JobLogs("job-1").value_or(""), "after");
}

TEST_F(HttpApiClientTest, EventsNowReadsTheEpochAndRevision) {
  head_.Answer(json{{"epoch", 3}, {"revision", 41}});
  auto now = client_->EventsNow();
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(now->epoch, 3u);
  EXPECT_EQ(now->revision, 41u);
  ExpectRequest("GET", "/api/v0/events/revision");
}

TEST_F(HttpApiClientTest, WatchEventsDeliversEventsInOrderAndAdvancesTheCursor) {
  head_.Answer(200,
               "event: hello\ndata: {\"epoch\":3,\"revision\":5}\n\n"
               "id: 6\nevent: job\ndata: {\"revision\":6,\"kind\":\"job\",\"id\":\"a\",\"status\":\"RUNNING\"}\n\n"
               "event: progress\ndata: {\"revision\":9}\n\n"
               "id: 10\nevent: job\ndata: {\"revision\":10,\"kind\":\"job\",\"id\":\"a\",\"status\":\"FAILED\"}\n\n"
               "id: 11\nevent: job\ndata: {\"revision\":11,\"kind\":\"job\",\"id\":\"a\"}\n\n",
               "text/event-stream");
  EventCursor cursor{3, 5};
  std::vector<std::string> seen;
  absl::Status watched = client_->WatchEvents(&cursor, {.kinds = {"job"}, .ids = {"a", "b c"}}, [&](const json& e) {
    seen.push_back(e["status"].get<std::string>());
    return e["status"] != "FAILED";  // stop at the end of the job
  });
  EXPECT_TRUE(watched.ok()) << watched;
  EXPECT_EQ(seen, (std::vector<std::string>{"RUNNING", "FAILED"}));
  EXPECT_EQ(cursor.epoch, 3u);
  EXPECT_EQ(cursor.revision, 10u);
  ExpectRequest("GET", "/api/v0/events?watch=1&since=5&epoch=3&kind=job&id=a%2Cb%20c");  // the library escapes the comma
}

TEST_F(HttpApiClientTest, WaitEventsReadsTheEventsAndAdvancesTheCursor) {
  head_.Answer(json{{"epoch", 4}, {"revision", 12}, {"events", {{{"revision", 11}, {"kind", "run"}, {"id", "r"}}}}});
  EventCursor cursor{4, 7};
  auto events = client_->WaitEvents(&cursor, {.ids = {"r"}}, 5000);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0]["revision"], 11);
  EXPECT_EQ(cursor.revision, 12u);  // past the events that did not match, too
  ExpectRequest("GET", "/api/v0/events?since=7&epoch=4&id=r&wait_ms=5000");
}

TEST_F(HttpApiClientTest, WatchEventsThatAreGoneIsOutOfRange) {
  head_.Answer(200,
               "event: hello\ndata: {\"epoch\":3,\"revision\":5}\n\n"
               "event: error\ndata: {\"error\":\"events after revision 5 are no longer kept\",\"code\":410,"
               "\"epoch\":3,\"revision\":900}\n\n",
               "text/event-stream");
  EventCursor cursor{3, 5};
  absl::Status watched = client_->WatchEvents(&cursor, {}, [](const json&) { return true; });
  EXPECT_EQ(watched.code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(watched.message(), "events after revision 5 are no longer kept");
  head_.Answer(410, R"j({"error":"the head has restarted since epoch 2 (now epoch 3)","epoch":3,"revision":7})j");
  cursor = {2, 100};
  watched = client_->WatchEvents(&cursor, {}, [](const json&) { return true; });
  EXPECT_EQ(watched.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(watched.message(), HasSubstr("restarted since epoch 2"));
}

TEST_F(HttpApiClientTest, AWatchWhoseStreamEndsIsUnavailableAndKeepsItsCursor) {
  head_.Answer(200,
               "event: hello\ndata: {\"epoch\":3,\"revision\":5}\n\n"
               "id: 6\nevent: job\ndata: {\"revision\":6,\"kind\":\"job\",\"id\":\"a\"}\n\n",
               "text/event-stream");
  EventCursor cursor{3, 5};
  absl::Status watched = client_->WatchEvents(&cursor, {}, [](const json&) { return true; });
  EXPECT_EQ(watched.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(watched.message(), HasSubstr("the event stream from the head"));
  EXPECT_EQ(cursor.revision, 6u);  // resume after what was delivered
}

}  // namespace http_api_client_test
}  // namespace torus::client
