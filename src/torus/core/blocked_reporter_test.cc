#include "torus/core/blocked_reporter.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace torus::core {
namespace {

// Records what the reporter sends; `hold()` makes the next sends wait until `release()`.
class RecordingAgent {
 public:
  void Send(bool blocked) {
    std::unique_lock<std::mutex> lock(mu_);
    sent_.push_back(blocked);
    cv_.notify_all();
    cv_.wait(lock, [this] { return !held_; });
  }
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
    cv_.notify_all();
  }
  // Waits (up to 5 s) until `n` reports came; returns them.
  std::vector<bool> WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(5), [&] { return sent_.size() >= n; });
    return sent_;
  }
  std::vector<bool> Sent() {
    std::lock_guard<std::mutex> lock(mu_);
    return sent_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> sent_;
  bool held_ = false;
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
