// EventLoop: an epoll loop on one thread — file descriptors with handlers, deadlines (Timers, in a min-heap) and
// tasks posted from other threads (an eventfd wakes the loop). The ingress runs one per thread.
//
// Objects whose fds are registered are deleted through DeleteLater: events fetched in the same round may still name
// them, and are delivered to them (closed, they ignore them) before they go.
//
// Thread-safety: not thread-safe, used on the thread that calls Run; Post is thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace torus::serve {

// Milliseconds of the steady clock (the clock of every deadline here).
int64_t SteadyNowMs();

class Timer;

class EventLoop {
 public:
  // What an fd's events are delivered to.
  class Handler {
   public:
    virtual ~Handler() = default;
    // `events`: EPOLLIN, EPOLLOUT, EPOLLRDHUP, EPOLLHUP, EPOLLERR as epoll reports them.
    virtual void OnEvents(uint32_t events) = 0;
  };

  static absl::StatusOr<std::unique_ptr<EventLoop>> Create();
  ~EventLoop();  // closes the epoll fd and the eventfd; runs no pending task

  // Registers `fd` for `events` (EPOLLET for edge-triggered) delivered to `handler`; false when epoll refuses.
  // Closing the fd unregisters it.
  bool Add(int fd, uint32_t events, Handler* handler);
  // Destroys `object` once the events fetched with the current ones have been delivered.
  void DeleteLater(std::unique_ptr<Handler> object);

  // Waits for events, deadlines and tasks and handles them, until Quit.
  void Run();
  // Makes Run return after the current round. REQUIRES: on the loop's thread (from another: Post it).
  void Quit() { quit_ = true; }
  // Runs `task` on the loop's thread, in the order posted. Thread-safe.
  void Post(std::function<void()> task);

 private:
  friend class Timer;
  EventLoop(int epoll_fd, int wake_fd);
  void RunTasks();
  void RunTimers();
  int WaitMs() const;  // the epoll_wait timeout: until the first deadline, -1 for none
  // The min-heap of armed timers by deadline.
  void HeapPush(Timer* t);
  void HeapRemove(Timer* t);
  void HeapFix(Timer* t);
  void SiftUp(size_t i);
  void SiftDown(size_t i);
  void Place(size_t i, Timer* t);

  const int epoll_fd_;
  const int wake_fd_;
  bool quit_ = false;
  uint64_t round_ = 0;  // of epoll_wait and what it brought
  std::vector<Timer*> heap_;
  std::vector<std::unique_ptr<Handler>> graveyard_;
  absl::Mutex mu_;
  std::vector<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
};

// A deadline on a loop: once the steady clock passes it, the loop calls `on_fire` (once; Set again to re-arm).
// A timer set while the loop handles a round fires in a later round, even when it is due at once: Set(now) lets the
// loop wait for events (without blocking) before going on. Destroying it cancels it. Not thread-safe: used on its
// loop's thread, and destroyed before the loop (never from another timer's callback).
class Timer {
 public:
  Timer(EventLoop* loop, std::function<void()> on_fire) : loop_(loop), on_fire_(std::move(on_fire)) {}
  ~Timer() { Cancel(); }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

  // Arms it for `at_ms` (SteadyNowMs), replacing any earlier deadline.
  void Set(int64_t at_ms);
  void Cancel();
  bool armed() const { return index_ != kUnarmed; }
  int64_t at_ms() const { return at_ms_; }

 private:
  friend class EventLoop;
  static constexpr size_t kUnarmed = std::numeric_limits<size_t>::max();
  EventLoop* const loop_;
  const std::function<void()> on_fire_;
  int64_t at_ms_ = 0;
  uint64_t round_ = 0;       // the loop's round when it was set
  size_t index_ = kUnarmed;  // in the loop's heap
};

}  // namespace torus::serve
