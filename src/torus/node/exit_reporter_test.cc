#include "torus/node/exit_reporter.h"

#include <gtest/gtest.h>

#include <chrono>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace torus::node {
namespace exit_reporter_test {

using std::chrono::milliseconds;

// A head that answers each call from a script (then OK for every report), remembers the worker ids of each call,
// and can be held mid-call.
class FakeHead {
 public:
  using Answer = std::vector<absl::Status>;
  // One answer per call, as the head would give it: a status per report (one shorter than the call leaves the rest
  // untaken).
  void Script(std::vector<Answer> answers) {
    absl::MutexLock lock(&mu_);
    answers_.insert(answers_.end(), answers.begin(), answers.end());
  }
  void Hold(bool hold) {
    {
      absl::MutexLock lock(&mu_);
      hold_ = hold;
    }
    cv_.SignalAll();
  }
  std::vector<absl::Status> Send(const std::vector<WorkerExit>& exits) {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> ids;
    for (const WorkerExit& e : exits) ids.push_back(e.worker_id);
    calls_.push_back(ids);
    cv_.SignalAll();
    while (hold_) cv_.Wait(&mu_);
    if (answers_.empty()) return Answer(exits.size(), absl::OkStatus());
    Answer a = answers_.front();
    answers_.pop_front();
    return a;
  }
  bool WaitForCalls(size_t n) {
    absl::MutexLock lock(&mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (calls_.size() < n) {
      if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) {
        return calls_.size() >= n;
      }
    }
    return true;
  }
  std::vector<std::vector<std::string>> Calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<Answer> answers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<std::string>> calls_ ABSL_GUARDED_BY(mu_);
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
};

using Calls = std::vector<std::vector<std::string>>;

WorkerExit Exit(const std::string& id) { return {.worker_id = id, .owner = "job", .exit_code = 1}; }

class ExitReporterTest : public ::testing::Test {
 protected:
  ExitReporter::SendFn Sender() {
    return [this](const std::vector<WorkerExit>& e) { return head_.Send(e); };
  }
  FakeHead head_;
  ExitReporterOptions options_{.initial_backoff_ms = 1, .max_backoff_ms = 4, .max_queued = 100};
};

TEST(ClassifyReportReplyTest, Table) {
  const std::vector<std::pair<absl::Status, ReportOutcome>> cases = {
      {absl::OkStatus(), ReportOutcome::kDelivered},
      {absl::NotFoundError("no worker"), ReportOutcome::kRejected},
      {absl::InvalidArgumentError("bad"), ReportOutcome::kRejected},
      {absl::UnimplementedError(""), ReportOutcome::kRejected},
      {absl::UnavailableError("down"), ReportOutcome::kRetry},
      {absl::DeadlineExceededError(""), ReportOutcome::kRetry},
      {absl::FailedPreconditionError("node not registered"), ReportOutcome::kRetry},
      {absl::UnauthenticatedError(""), ReportOutcome::kRetry},
      {absl::InternalError(""), ReportOutcome::kRetry},
  };
  for (const auto& [status, outcome] : cases) EXPECT_EQ(ClassifyReportReply(status), outcome) << status;
}

TEST_F(ExitReporterTest, DeliversInOrderAndBatchesWhatComesWhileACallIsUnderWay) {
  head_.Hold(true);
  ExitReporter reporter(Sender(), options_);
  reporter.Report(Exit("a"));
  ASSERT_TRUE(head_.WaitForCalls(1));  // "a" is in flight
  reporter.Report(Exit("b"));
  reporter.Report(Exit("c"));
  head_.Hold(false);
  ASSERT_TRUE(reporter.WaitIdle(milliseconds(10'000)));
  EXPECT_EQ(head_.Calls(), (Calls{{"a"}, {"b", "c"}}));
  EXPECT_EQ(reporter.Pending(), 0u);
}

TEST_F(ExitReporterTest, ABatchHoldsAtMostMaxBatchReports) {
  options_.max_batch = 2;
  head_.Hold(true);
  ExitReporter reporter(Sender(), options_);
  reporter.Report(Exit("a"));
  ASSERT_TRUE(head_.WaitForCalls(1));
  for (const char* id : {"b", "c", "d", "e", "f"}) reporter.Report(Exit(id));
  head_.Hold(false);
  ASSERT_TRUE(reporter.WaitIdle(milliseconds(10'000)));
  EXPECT_EQ(head_.Calls(), (Calls{{"a"}, {"b", "c"}, {"d", "e"}, {"f"}}));
}

TEST_F(ExitReporterTest, RetriesUntilTheHeadAcknowledges) {
  head_.Hold(true);
  head_.Script({{absl::UnavailableError("connection refused"), absl::UnavailableError("connection refused")},
                {absl::DeadlineExceededError("slow"), absl::DeadlineExceededError("slow")},
                {absl::FailedPreconditionError("node not registered"),
                 absl::FailedPreconditionError("node not registered")}});
  ExitReporter reporter(Sender(), options_);
  reporter.Report(Exit("a"));
  reporter.Report(Exit("b"));
  head_.Hold(false);
  ASSERT_TRUE(reporter.WaitIdle(milliseconds(10'000)));
  const Calls calls = head_.Calls();
  // The first call may have gone before "b" was queued; from then on both go together until the head takes them.
  ASSERT_EQ(calls.size(), 4u);
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_EQ(calls[i], (std::vector<std::string>{"a", "b"})) << i;
}

TEST_F(ExitReporterTest, ResendsFromTheFirstReportTheHeadDidNotTake) {
  head_.Hold(true);
  ExitReporter reporter(Sender(), options_);
  reporter.Report(Exit("a"));
  ASSERT_TRUE(head_.WaitForCalls(1));
  for (const char* id : {"b", "c", "d", "e"}) reporter.Report(Exit(id));
  // "b" taken, "c" not yet (its node is registering again): "c" and all after it go again, in order. Then an
  // answer shorter than the call: "d" taken, "e" sent again.
  head_.Script({{absl::OkStatus()},
                {absl::OkStatus(), absl::FailedPreconditionError("node not registered"), absl::OkStatus(),
                 absl::OkStatus()},
                {absl::OkStatus(), absl::OkStatus()}});
  head_.Hold(false);
  ASSERT_TRUE(reporter.WaitIdle(milliseconds(10'000)));
  EXPECT_EQ(head_.Calls(), (Calls{{"a"}, {"b", "c", "d", "e"}, {"c", "d", "e"}, {"e"}}));
}

TEST_F(ExitReporterTest, DropsWhatTheHeadRefuses) {
  head_.Hold(true);
  ExitReporter reporter(Sender(), options_);
  reporter.Report(Exit("a"));
  ASSERT_TRUE(head_.WaitForCalls(1));
  for (const char* id : {"b", "c", "d"}) reporter.Report(Exit(id));
  head_.Script({{absl::NotFoundError("unknown worker")},
                {absl::InvalidArgumentError("bad"), absl::UnimplementedError("head does not track workers"),
                 absl::OkStatus()}});
  head_.Hold(false);
  ASSERT_TRUE(reporter.WaitIdle(milliseconds(10'000)));
  EXPECT_EQ(head_.Calls(), (Calls{{"a"}, {"b", "c", "d"}}));
  EXPECT_EQ(reporter.Pending(), 0u);
}

TEST_F(ExitReporterTest, FullQueueDropsTheOldestWaitingReport) {
  options_.max_queued = 3;
  head_.Hold(true);
  ExitReporter reporter(Sender(), options_);
  reporter.Report(Exit("a"));
  ASSERT_TRUE(head_.WaitForCalls(1));  // "a" is in flight
  reporter.Report(Exit("b"));
  reporter.Report(Exit("c"));
  reporter.Report(Exit("d"));  // full: "b" goes, "a" stays in flight
  EXPECT_EQ(reporter.Pending(), 3u);
  head_.Hold(false);
  ASSERT_TRUE(reporter.WaitIdle(milliseconds(10'000)));
  EXPECT_EQ(head_.Calls(), (Calls{{"a"}, {"c", "d"}}));
}

TEST_F(ExitReporterTest, StopsPromptlyWhileRetrying) {
  options_.initial_backoff_ms = options_.max_backoff_ms = 60'000;
  head_.Script({{absl::UnavailableError("down")}});
  auto reporter = std::make_unique<ExitReporter>(Sender(), options_);
  reporter->Report(Exit("a"));
  ASSERT_TRUE(head_.WaitForCalls(1));
  EXPECT_FALSE(reporter->WaitIdle(milliseconds(20)));
  reporter.reset();  // returns without waiting out the backoff
  EXPECT_EQ(head_.Calls().size(), 1u);
}

}  // namespace exit_reporter_test
}  // namespace torus::node
