#include "torus/head/nodes/failure_detector.h"

#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace torus::head {

FailureDetector::FailureDetector(Membership* membership, std::chrono::microseconds check_period)
    : membership_(membership), check_period_(check_period) {}

FailureDetector::~FailureDetector() { Stop(); }

void FailureDetector::Start() { thread_ = std::thread([this] { Run(); }); }

void FailureDetector::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

void FailureDetector::Run() {
  mu_.Lock();
  while (true) {
    // Waits up to a check period for Stop (spurious wakeups wait on).
    const auto until = std::chrono::steady_clock::now() + check_period_;
    for (auto now = std::chrono::steady_clock::now(); !stopping_ && now < until;
         now = std::chrono::steady_clock::now()) {
      cv_.WaitWithTimeout(&mu_, absl::FromChrono(until - now));
    }
    if (stopping_) break;
    mu_.Unlock();
    membership_->ExpireSilent();
    mu_.Lock();
  }
  mu_.Unlock();
}

}  // namespace torus::head
