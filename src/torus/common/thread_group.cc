#include "torus/common/thread_group.h"

#include <utility>

namespace torus {

bool ThreadGroup::Start(std::function<void()> fn) {
  std::list<std::thread> finished;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return false;
    ReapLocked();
    finished.swap(finished_);
    members_.emplace_back();
    auto self = std::prev(members_.end());
    // The member is created before its thread starts, so the thread always finds it.
    self->thread = std::thread([this, self, fn = std::move(fn)] {
      fn();
      absl::MutexLock lock(&mu_);
      self->done = true;
    });
  }
  for (std::thread& t : finished) t.join();  // they have returned from fn: joining does not wait on them
  return true;
}

void ThreadGroup::ReapLocked() {
  for (auto it = members_.begin(); it != members_.end();) {
    if (it->done) {
      finished_.push_back(std::move(it->thread));
      it = members_.erase(it);
    } else {
      ++it;
    }
  }
}

void ThreadGroup::Join() {
  std::list<Member> members;
  std::list<std::thread> finished;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    members.swap(members_);
    finished.swap(finished_);
  }
  for (std::thread& t : finished) t.join();
  for (Member& m : members) m.thread.join();
}

int ThreadGroup::Running() const {
  absl::MutexLock lock(&mu_);
  int running = 0;
  for (const Member& m : members_) running += m.done ? 0 : 1;
  return running;
}

}  // namespace torus
