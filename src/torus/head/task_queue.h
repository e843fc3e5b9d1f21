// TaskQueue: one thread running posted closures in order. Components that react to events from other threads
// (a group became CREATED, a worker exited) post their work here, so that agent RPCs never run on gRPC's threads or
// on the placement scheduler's.
//
// Thread-safety: Post is thread-safe; tasks run one at a time on the queue's thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace torus::head {

class TaskQueue {
 public:
  TaskQueue() : thread_([this] { Run(); }) {}
  ~TaskQueue() { Stop(); }

  void Post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
  }

  // Runs what is queued, then stops the thread. Later posts are dropped.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::thread thread_;
};

}  // namespace torus::head
