#include "torus/client/head_waiter.h"

#include <algorithm>
#include <thread>

namespace torus::client {

bool HeadWaiter::WaitAgain(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kUnavailable) {
    if (outage_since_) {
      *out_ << prefix_ << "the head is back\n";
      outage_since_.reset();
    }
    return false;
  }
  if (max_wait_.count() <= 0) return false;
  const auto now = std::chrono::steady_clock::now();
  if (!outage_since_) {
    *out_ << prefix_ << "the head is unreachable (" << status.message() << "); waiting for it\n";
    out_->flush();
    outage_since_ = now;
    delay_ = kFirstDelay;
  }
  const auto left = *outage_since_ + max_wait_ - now;
  if (left <= std::chrono::steady_clock::duration::zero()) return false;
  std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(delay_, left));
  delay_ = std::min(delay_ * 2, kMaxDelay);
  return true;
}

}  // namespace torus::client
