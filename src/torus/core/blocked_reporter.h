// BlockedReporter: tells this worker's agent when the work it runs waits in get/wait for objects that are not ready
// yet, and when it runs again, so that the agent lends the lease's CPU to other leases meanwhile (as Ray's core
// worker tells its raylet of a blocked task). Without it, tasks that wait for the tasks they submit hold every CPU of
// a node and the ones they wait for never get a worker.
//
// Waits nest and overlap (a threaded actor's calls): the worker is blocked from the first wait that begins until the
// last one ends. Reports go out on a thread of their own, in order, and only the latest state: a wait that ends
// before its report went out sends nothing, so a get of something almost ready costs no call.
//
// Thread-safety: thread-safe.
#pragma once

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace torus::core {

class BlockedReporter {
 public:
  // `send(blocked)` delivers one report (a call to the agent); it runs on the reporter's thread only, one at a time.
  explicit BlockedReporter(std::function<void(bool)> send);
  // Stops the thread; a report being sent finishes first, later ones are dropped.
  ~BlockedReporter();

  BlockedReporter(const BlockedReporter&) = delete;
  BlockedReporter& operator=(const BlockedReporter&) = delete;

  // A wait begins / ends. REQUIRES: each End follows a Begin.
  void Begin();
  void End();

  // Begin on construction (when `reporter` is set), End on destruction.
  class Scope {
   public:
    explicit Scope(BlockedReporter* reporter) : reporter_(reporter) {
      if (reporter_ != nullptr) reporter_->Begin();
    }
    ~Scope() {
      if (reporter_ != nullptr) reporter_->End();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    BlockedReporter* reporter_;
  };

 private:
  void Loop();

  const std::function<void(bool)> send_;
  absl::Mutex mu_;
  absl::CondVar changed_;
  int waits_ ABSL_GUARDED_BY(mu_) = 0;          // waits in progress
  bool reported_ ABSL_GUARDED_BY(mu_) = false;  // the state the agent was last told
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace torus::core
