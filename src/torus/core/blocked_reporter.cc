#include "torus/core/blocked_reporter.h"

namespace torus::core {

BlockedReporter::BlockedReporter(std::function<void(bool)> send) : send_(std::move(send)) {
  thread_ = std::thread([this] { Loop(); });
}

BlockedReporter::~BlockedReporter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BlockedReporter::Begin() {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake = waits_++ == 0;
  }
  if (wake) changed_.notify_all();
}

void BlockedReporter::End() {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake = --waits_ == 0;
  }
  if (wake) changed_.notify_all();
}

void BlockedReporter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || (waits_ > 0) != reported_; });
    if (stopping_) return;
    const bool blocked = waits_ > 0;
    reported_ = blocked;
    lock.unlock();
    send_(blocked);
    lock.lock();
  }
}

}  // namespace torus::core
