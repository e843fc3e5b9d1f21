#include "torus/head/nodes/failure_detector.h"

#include "spdlog/spdlog.h"

namespace torus::head {

FailureDetector::FailureDetector(Membership* membership, std::chrono::microseconds check_period)
    : membership_(membership), check_period_(check_period) {}

FailureDetector::~FailureDetector() { Stop(); }

void FailureDetector::Start() { thread_ = std::thread([this] { Run(); }); }

void FailureDetector::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void FailureDetector::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, check_period_, [this] { return stopping_; })) {
    lock.unlock();
    membership_->ExpireSilent();
    lock.lock();
  }
}

}  // namespace torus::head
