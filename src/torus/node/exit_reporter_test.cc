#include "torus/node/exit_reporter.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <mutex>

namespace torus::node {
namespace exit_reporter_test {

using std::chrono::milliseconds;

// A head that answers from a script (then OK), remembers what it was sent, and can be held mid-call.
class FakeHead {
 public:
  void Script(std::vector<absl::Status> replies) {
    std::lock_guard<std::mutex> lock(mu_);
    replies_.insert(replies_.end(), replies.begin(), replies.end());
  }
  void Hold(bool hold) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      hold_ = hold;
    }
    cv_.notify_all();
  }
  absl::Status Send(const WorkerExit& exit) {
    std::unique_lock<std::mutex> lock(mu_);
    calls_.push_back(exit.worker_id);
    cv_.notify_all();
    cv_.wait(lock, [this] { return !hold_; });
    if (replies_.empty()) return absl::OkStatus();
    absl::Status s = replies_.front();
    replies_.pop_front();
    return s;
  }
  bool WaitForCalls(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return calls_.size() >= n; });
  }
  std::vector<std::string> Calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<absl::Status> replies_;
  std::vector<std::string> calls_;
  bool hold_ = false;
};

WorkerExit Exit(const std::string& id) { return {.worker_id = id, .owner = "job", .exit_code = 1}; }

class ExitReporterTest : public ::testing::Test {
 protected:
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

TEST_F(ExitReporterTest, DeliversInOrder) {
  ExitReporter reporter([this](const WorkerExit& e) { return head_.Send(e); }, options_);
  reporter.Report(Exit("a"));
  reporter.Report(Exit("b"));
  reporter.Report(Exit("c"));
  ASSERT_TRUE(reporter.WaitIdle(milliseconds(10'000)));
  EXPECT_EQ(head_.Calls(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(reporter.Pending(), 0u);
}

TEST_F(ExitReporterTest, RetriesUntilTheHeadAcknowledges) {
  head_.Script({absl::UnavailableError("connection refused"), absl::DeadlineExceededError("slow"),
                absl::FailedPreconditionError("node not registered"), absl::OkStatus()});
  ExitReporter reporter([this](const WorkerExit& e) { return head_.Send(e); }, options_);
  reporter.Report(Exit("a"));
  reporter.Report(Exit("b"));
  ASSERT_TRUE(reporter.WaitIdle(milliseconds(10'000)));
  // "b" waits behind "a": exits reach the head in the order they happened.
  EXPECT_EQ(head_.Calls(), (std::vector<std::string>{"a", "a", "a", "a", "b"}));
}

TEST_F(ExitReporterTest, DropsWhatTheHeadRefuses) {
  head_.Script({absl::NotFoundError("unknown worker"), absl::InvalidArgumentError("bad"),
                absl::UnimplementedError("head does not track workers")});
  ExitReporter reporter([this](const WorkerExit& e) { return head_.Send(e); }, options_);
  for (const char* id : {"a", "b", "c", "d"}) reporter.Report(Exit(id));
  ASSERT_TRUE(reporter.WaitIdle(milliseconds(10'000)));
  EXPECT_EQ(head_.Calls(), (std::vector<std::string>{"a", "b", "c", "d"}));
}

TEST_F(ExitReporterTest, FullQueueDropsTheOldestWaitingReport) {
  options_.max_queued = 2;
  head_.Hold(true);
  ExitReporter reporter([this](const WorkerExit& e) { return head_.Send(e); }, options_);
  reporter.Report(Exit("a"));
  ASSERT_TRUE(head_.WaitForCalls(1));  // "a" is in flight
  reporter.Report(Exit("b"));
  reporter.Report(Exit("c"));  // full: "b" goes, "a" stays in flight
  EXPECT_EQ(reporter.Pending(), 2u);
  head_.Hold(false);
  ASSERT_TRUE(reporter.WaitIdle(milliseconds(10'000)));
  EXPECT_EQ(head_.Calls(), (std::vector<std::string>{"a", "c"}));
}

TEST_F(ExitReporterTest, StopsPromptlyWhileRetrying) {
  options_.initial_backoff_ms = options_.max_backoff_ms = 60'000;
  head_.Script({absl::UnavailableError("down")});
  auto reporter =
      std::make_unique<ExitReporter>([this](const WorkerExit& e) { return head_.Send(e); }, options_);
  reporter->Report(Exit("a"));
  ASSERT_TRUE(head_.WaitForCalls(1));
  EXPECT_FALSE(reporter->WaitIdle(milliseconds(20)));
  reporter.reset();  // returns without waiting out the backoff
  EXPECT_EQ(head_.Calls().size(), 1u);
}

}  // namespace exit_reporter_test
}  // namespace torus::node
