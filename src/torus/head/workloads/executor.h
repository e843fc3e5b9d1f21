// Executor: a few threads running posted closures (agent RPCs of the workload driver: starting and stopping
// workers), so that one slow agent call never holds up the others or the driver's own thread.
//
// Thread-safety: Post is thread-safe; closures run concurrently on the executor's threads.
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace torus::head {

class Executor {
 public:
  explicit Executor(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
  }
  ~Executor() { Stop(); }

  void Post(std::function<void()> task) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      tasks_.push_back(std::move(task));
    }
    cv_.Signal();
  }

  // Runs what is queued, then stops the threads. Later posts are dropped.
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    cv_.SignalAll();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  void Run() {
    mu_.Lock();
    while (true) {
      while (!(stopping_ || !tasks_.empty())) cv_.Wait(&mu_);
      if (tasks_.empty()) {
        mu_.Unlock();
        return;
      }
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      mu_.Unlock();
      task();
      mu_.Lock();
    }
  }

  absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace torus::head
