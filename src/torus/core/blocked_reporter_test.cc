#include "torus/core/blocked_reporter.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace torus::core {
namespace {

// Records what the reporter sends; `hold()` makes the next sends wait until `release()`.
class RecordingAgent {
 public:
  void Send(bool blocked) {
    absl::MutexLock lock(&mu_);
    sent_.push_back(blocked);
    cv_.SignalAll();
    while (held_) cv_.Wait(&mu_);
  }
  void Hold() {
    absl::MutexLock lock(&mu_);
    held_ = true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    held_ = false;
    cv_.SignalAll();
  }
  // Waits (up to 5 s) until `n` reports came; returns them.
  std::vector<bool> WaitFor(size_t n) {
    absl::MutexLock lock(&mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (sent_.size() < n) {
      if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
    }
    return sent_;
  }
  std::vector<bool> Sent() {
    absl::MutexLock lock(&mu_);
    return sent_;
  }

 private:
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::vector<bool> sent_ ABSL_GUARDED_BY(mu_);
  bool held_ ABSL_GUARDED_BY(mu_) = false;
};

TEST(BlockedReporterTest, AWaitIsReportedWhenItBeginsAndWhenItEnds) {
  RecordingAgent agent;
  BlockedReporter reporter([&](bool b) { agent.Send(b); });
  {
    BlockedReporter::Scope wait(&reporter);
    EXPECT_EQ(agent.WaitFor(1), (std::vector<bool>{true}));
  }
  EXPECT_EQ(agent.WaitFor(2), (std::vector<bool>{true, false}));
}

TEST(BlockedReporterTest, NestedAndOverlappingWaitsAreOneBlockedSpell) {
  RecordingAgent agent;
  BlockedReporter reporter([&](bool b) { agent.Send(b); });
  reporter.Begin();
  ASSERT_EQ(agent.WaitFor(1), (std::vector<bool>{true}));
  reporter.Begin();
  reporter.End();
  reporter.Begin();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(agent.Sent(), (std::vector<bool>{true}));
  reporter.End();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(agent.Sent(), (std::vector<bool>{true}));
  reporter.End();
  EXPECT_EQ(agent.WaitFor(2), (std::vector<bool>{true, false}));
}

TEST(BlockedReporterTest, ChangesWhileAReportIsInFlightSendOnlyTheLatestState) {
  RecordingAgent agent;
  BlockedReporter reporter([&](bool b) { agent.Send(b); });
  agent.Hold();
  reporter.Begin();
  ASSERT_EQ(agent.WaitFor(1), (std::vector<bool>{true}));  // in flight, held
  reporter.End();
  reporter.Begin();
  reporter.End();
  reporter.Begin();
  agent.Release();
  // Blocked again when the first report came back: the agent already knows; nothing more goes.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(agent.Sent(), (std::vector<bool>{true}));
  reporter.End();
  EXPECT_EQ(agent.WaitFor(2), (std::vector<bool>{true, false}));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(agent.Sent(), (std::vector<bool>{true, false}));
}

TEST(BlockedReporterTest, AScopeWithoutAReporterDoesNothing) {
  BlockedReporter::Scope none(nullptr);
}

}  // namespace
}  // namespace torus::core
