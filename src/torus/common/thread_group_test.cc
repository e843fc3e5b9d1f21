#include "torus/common/thread_group.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace torus {
namespace {

TEST(ThreadGroupTest, JoinWaitsForEveryThreadStarted) {
  std::atomic<int> finished = 0;
  ThreadGroup group;
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(group.Start([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ++finished;
    }));
  }
  group.Join();
  EXPECT_EQ(finished.load(), 8);
  EXPECT_EQ(group.Running(), 0);
}

TEST(ThreadGroupTest, AClosedGroupStartsNothing) {
  ThreadGroup group;
  group.Join();
  bool ran = false;
  EXPECT_FALSE(group.Start([&] { ran = true; }));
  group.Join();  // a second Join returns at once
  EXPECT_FALSE(ran);
}

TEST(ThreadGroupTest, RunningCountsThreadsThatHaveNotReturned) {
  ThreadGroup group;
  absl::Notification release;
  ASSERT_TRUE(group.Start([&] { release.WaitForNotification(); }));
  ASSERT_TRUE(group.Start([] {}));
  for (int i = 0; i < 200 && group.Running() != 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(group.Running(), 1);
  release.Notify();
  group.Join();
  EXPECT_EQ(group.Running(), 0);
}

TEST(ThreadGroupTest, ManyShortThreadsAreJoinedAsTheGroupGoes) {
  std::atomic<int> finished = 0;
  ThreadGroup group;
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(group.Start([&] { ++finished; }));
  group.Join();
  EXPECT_EQ(finished.load(), 2000);
}

TEST(ThreadGroupTest, TheDestructorJoins) {
  std::atomic<bool> finished = false;
  {
    ThreadGroup group;
    group.Start([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      finished = true;
    });
  }
  EXPECT_TRUE(finished.load());
}

}  // namespace
}  // namespace torus
