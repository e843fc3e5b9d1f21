// Waits on an absl::CondVar up to a std::chrono::steady_clock deadline, as std::condition_variable::wait_until did.
//
// Thread-safety: stateless; the caller holds the mutex it waits with.
#pragma once

#include <chrono>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace torus {

// The time left until `deadline` (negative once it passed); time_point::max() is no deadline: an infinite duration.
inline absl::Duration TimeUntil(std::chrono::steady_clock::time_point deadline) {
  if (deadline == std::chrono::steady_clock::time_point::max()) return absl::InfiniteDuration();
  return absl::FromChrono(deadline - std::chrono::steady_clock::now());
}

// Waits on `cv` (releasing `mu` meanwhile) until it is signalled, a spurious wakeup, or `deadline`; returns whether
// the deadline has passed (std::cv_status::timeout). time_point::max(): waits without a deadline.
inline bool WaitUntil(absl::CondVar& cv, absl::Mutex& mu, std::chrono::steady_clock::time_point deadline)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  cv.WaitWithTimeout(&mu, TimeUntil(deadline));
  return std::chrono::steady_clock::now() >= deadline;
}

}  // namespace torus
