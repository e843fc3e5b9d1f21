// FailureDetector: a thread that periodically declares DEAD the nodes that fell silent (Membership::ExpireSilent).
//
// The check runs every `check_period` (a tenth of the node timeout, at most 100 ms), so a node is declared DEAD
// no later than timeout + check period after its last heartbeat.
//
// Thread-safety: Start/Stop from one owner thread; the worker thread touches only the (thread-safe) membership.
#pragma once

#include <chrono>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "torus/head/nodes/membership.h"

namespace torus::head {

class FailureDetector {
 public:
  FailureDetector(Membership* membership, std::chrono::microseconds check_period);
  ~FailureDetector();  // stops the thread

  void Start();
  void Stop();

 private:
  void Run();

  Membership* membership_;
  const std::chrono::microseconds check_period_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace torus::head
