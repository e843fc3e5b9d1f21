#include "torus/head/api/connection_threads.h"

#include <atomic>
#include <chrono>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace torus::head {
namespace connection_threads_test {

// A gate that connections wait on until the test opens it.
class Gate {
 public:
  void Wait() {
    absl::MutexLock lock(&mu_);
    ++waiting_;
    changed_.SignalAll();
    while (!open_) changed_.Wait(&mu_);
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
    changed_.SignalAll();
  }
  // Waits until `n` connections wait at the gate; false after 10 s.
  bool WaitForWaiting(int n) {
    absl::MutexLock lock(&mu_);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (auto now = std::chrono::steady_clock::now(); waiting_ < n && now < until;
         now = std::chrono::steady_clock::now()) {
      changed_.WaitWithTimeout(&mu_, absl::FromChrono(until - now));
    }
    return waiting_ >= n;
  }
  int waiting() {
    absl::MutexLock lock(&mu_);
    return waiting_;
  }

 private:
  absl::Mutex mu_;
  absl::CondVar changed_;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
};

TEST(ConnectionThreadsTest, EveryConnectionRunsAtOnceUpToTheBound) {
  ConnectionThreads threads(300);
  Gate gate;
  std::atomic<int> done{0};
  // 200 connections that all stay open: a fixed pool smaller than that would leave some never started.
  for (int i = 0; i < 200; ++i) {
    threads.enqueue([&] {
      gate.Wait();
      ++done;
    });
  }
  ASSERT_TRUE(gate.WaitForWaiting(200)) << gate.waiting() << " of 200 connections started";
  EXPECT_EQ(threads.running(), 200);
  gate.Open();
  threads.shutdown();
  EXPECT_EQ(done.load(), 200);
  EXPECT_EQ(threads.running(), 0);
  EXPECT_EQ(threads.peak(), 200);
}

TEST(ConnectionThreadsTest, BeyondTheBoundConnectionsWaitAndAllRunInTheEnd) {
  ConnectionThreads threads(4);
  Gate gate;
  absl::Mutex order_mu;
  std::vector<int> order;  // appended under order_mu (a local: ABSL_GUARDED_BY applies only to fields and globals)
  for (int i = 0; i < 10; ++i) {
    threads.enqueue([&, i] {
      gate.Wait();
      absl::MutexLock lock(&order_mu);
      order.push_back(i);
    });
  }
  ASSERT_TRUE(gate.WaitForWaiting(4));
  EXPECT_EQ(threads.running(), 4);
  EXPECT_EQ(gate.waiting(), 4) << "a fifth connection ran past the bound";
  gate.Open();
  threads.shutdown();  // waits for the waiting connections too
  EXPECT_EQ(order.size(), 10u);
  EXPECT_EQ(threads.peak(), 4);
}

TEST(ConnectionThreadsTest, WaitingConnectionsRunInTheOrderTheyCame) {
  ConnectionThreads threads(1);
  Gate gate;
  std::vector<int> order;  // one thread at a time appends
  for (int i = 0; i < 6; ++i) {
    threads.enqueue([&, i] {
      if (i == 0) gate.Wait();
      order.push_back(i);
    });
  }
  ASSERT_TRUE(gate.WaitForWaiting(1));
  gate.Open();
  threads.shutdown();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST(ConnectionThreadsTest, ShutdownWithNothingOpenReturnsAndCanBeRepeated) {
  ConnectionThreads threads(8);
  threads.shutdown();
  std::atomic<bool> ran{false};
  threads.enqueue([&] { ran = true; });
  threads.shutdown();
  EXPECT_TRUE(ran.load());
  threads.shutdown();
}

}  // namespace connection_threads_test
}  // namespace torus::head
