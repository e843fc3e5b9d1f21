// ThreadGroup: threads started for blocking work (waiting on another process, a placement group, a pending
// object), each owned by the group until it has been joined. Join() closes the group and joins every thread still
// running; threads that finished are joined as new ones start, so a long-lived group does not pile them up. What
// a thread runs must end on its own or on the owner's stop signal: Join() waits for it.
//
// Thread-safety: Start, Join and Running are thread-safe; Join must not be called from one of the group's threads.
#pragma once

#include <functional>
#include <list>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace torus {

class ThreadGroup {
 public:
  ThreadGroup() = default;
  ThreadGroup(const ThreadGroup&) = delete;
  ThreadGroup& operator=(const ThreadGroup&) = delete;
  ~ThreadGroup() { Join(); }

  // Runs `fn` on a thread of its own. False (and `fn` does not run) once the group is closed.
  bool Start(std::function<void()> fn);

  // Closes the group to new threads and joins those started. Later calls return at once.
  void Join();

  // Threads started and not yet finished.
  int Running() const;

 private:
  struct Member {
    std::thread thread;
    bool done = false;  // guarded by the group's mu_
  };
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::list<Member> members_ ABSL_GUARDED_BY(mu_);
  std::list<std::thread> finished_ ABSL_GUARDED_BY(mu_);  // done, to be joined
};

}  // namespace torus
