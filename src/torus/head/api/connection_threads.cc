#include "torus/head/api/connection_threads.h"

#include <algorithm>
#include <system_error>
#include <thread>
#include <utility>

namespace torus::head {

ConnectionThreads::ConnectionThreads(int max_threads) : max_threads_(std::max(1, max_threads)) {}

ConnectionThreads::~ConnectionThreads() { shutdown(); }

void ConnectionThreads::enqueue(std::function<void()> fn) {
  {
    absl::MutexLock lock(&mu_);
    if (running_ >= max_threads_) {
      waiting_.push_back(std::move(fn));
      return;
    }
    ++running_;
    peak_ = std::max(peak_, running_);
  }
  try {
    std::thread([this, fn]() mutable { Run(std::move(fn)); }).detach();
  } catch (const std::system_error&) {
    // No thread to be had (the process's limit): the connection waits for a running one, or, when there is none,
    // is served here, on the accepting thread.
    absl::ReleasableMutexLock lock(&mu_);
    if (--running_ > 0) {
      waiting_.push_back(std::move(fn));
      return;
    }
    ++running_;
    lock.Release();
    Run(std::move(fn));
  }
}

void ConnectionThreads::Run(std::function<void()> fn) {
  while (true) {
    fn();
    absl::MutexLock lock(&mu_);
    if (waiting_.empty()) {
      --running_;
      // Under the lock: once shutdown() sees no thread running, this one no longer touches the object.
      if (running_ == 0) idle_.SignalAll();
      return;
    }
    fn = std::move(waiting_.front());
    waiting_.pop_front();
  }
}

void ConnectionThreads::shutdown() {
  absl::MutexLock lock(&mu_);
  while (!(running_ == 0 && waiting_.empty())) idle_.Wait(&mu_);
}

int ConnectionThreads::running() const {
  absl::MutexLock lock(&mu_);
  return running_;
}

int ConnectionThreads::peak() const {
  absl::MutexLock lock(&mu_);
  return peak_;
}

}  // namespace torus::head
