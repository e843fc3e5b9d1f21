#include "torus/core/blocked_reporter.h"

namespace torus::core {

BlockedReporter::BlockedReporter(std::function<void(bool)> send) : send_(std::move(send)) {
  thread_ = std::thread([this] { Loop(); });
}

BlockedReporter::~BlockedReporter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  changed_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void BlockedReporter::Begin() {
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    wake = waits_++ == 0;
  }
  if (wake) changed_.SignalAll();
}

void BlockedReporter::End() {
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    wake = --waits_ == 0;
  }
  if (wake) changed_.SignalAll();
}

void BlockedReporter::Loop() {
  mu_.Lock();
  while (true) {
    while (!(stopping_ || (waits_ > 0) != reported_)) changed_.Wait(&mu_);
    if (stopping_) break;
    const bool blocked = waits_ > 0;
    reported_ = blocked;
    mu_.Unlock();
    send_(blocked);
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace torus::core
