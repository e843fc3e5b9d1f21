#include "torus/serve/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace torus::serve {
namespace {

// Events fetched per epoll_wait.
constexpr int kMaxEvents = 256;

}  // namespace

int64_t SteadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::StatusOr<std::unique_ptr<EventLoop>> EventLoop::Create() {
  const int epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) return absl::InternalError(absl::StrCat("epoll_create1: ", std::strerror(errno)));
  const int wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    const int error = errno;
    ::close(epoll_fd);
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(error)));
  }
  std::unique_ptr<EventLoop> loop(new EventLoop(epoll_fd, wake_fd));
  if (!loop->Add(wake_fd, EPOLLIN, nullptr)) {  // the one fd without a handler
    return absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  }
  return loop;
}

EventLoop::EventLoop(int epoll_fd, int wake_fd) : epoll_fd_(epoll_fd), wake_fd_(wake_fd) {}

EventLoop::~EventLoop() {
  for (Timer* t : heap_) t->index_ = Timer::kUnarmed;
  graveyard_.clear();
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

bool EventLoop::Add(int fd, uint32_t events, Handler* handler) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = handler;
  return ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) == 0;
}

void EventLoop::DeleteLater(std::unique_ptr<Handler> object) { graveyard_.push_back(std::move(object)); }

void EventLoop::Post(std::function<void()> task) {
  bool wake = false;
  {
    absl::MutexLock lock(&mu_);
    wake = tasks_.empty();  // else a wake-up is already on its way
    tasks_.push_back(std::move(task));
  }
  if (wake) {
    const uint64_t one = 1;
    while (::write(wake_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
  }
}

void EventLoop::Run() {
  epoll_event events[kMaxEvents];
  while (!quit_) {
    ++round_;
    const int n = ::epoll_wait(epoll_fd_, events, kMaxEvents, WaitMs());
    for (int i = 0; i < n && !quit_; ++i) {
      auto* handler = static_cast<Handler*>(events[i].data.ptr);
      if (handler == nullptr) {
        RunTasks();
      } else {
        handler->OnEvents(events[i].events);
      }
    }
    if (!quit_) RunTimers();
    graveyard_.clear();
  }
}

void EventLoop::RunTasks() {
  uint64_t count = 0;
  while (::read(wake_fd_, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
  std::vector<std::function<void()>> tasks;
  {
    absl::MutexLock lock(&mu_);
    tasks.swap(tasks_);
  }
  for (std::function<void()>& task : tasks) task();
}

int EventLoop::WaitMs() const {
  if (heap_.empty()) return -1;
  const int64_t left = heap_[0]->at_ms_ - SteadyNowMs();
  if (left <= 0) return 0;
  // +1: epoll_wait may return a little before the deadline's millisecond has passed.
  return static_cast<int>(std::min<int64_t>(left + 1, std::numeric_limits<int>::max()));
}

void EventLoop::RunTimers() {
  if (heap_.empty()) return;
  const int64_t now = SteadyNowMs();
  while (!heap_.empty() && heap_[0]->at_ms_ <= now && heap_[0]->round_ != round_ && !quit_) {
    Timer* t = heap_[0];
    HeapRemove(t);
    t->on_fire_();  // may re-arm t, or destroy it (its owner closing)
  }
}

void EventLoop::Place(size_t i, Timer* t) {
  heap_[i] = t;
  t->index_ = i;
}

void EventLoop::SiftUp(size_t i) {
  Timer* t = heap_[i];
  while (i > 0) {
    const size_t parent = (i - 1) / 2;
    if (heap_[parent]->at_ms_ <= t->at_ms_) break;
    Place(i, heap_[parent]);
    i = parent;
  }
  Place(i, t);
}

void EventLoop::SiftDown(size_t i) {
  Timer* t = heap_[i];
  const size_t n = heap_.size();
  while (true) {
    size_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && heap_[child + 1]->at_ms_ < heap_[child]->at_ms_) ++child;
    if (heap_[child]->at_ms_ >= t->at_ms_) break;
    Place(i, heap_[child]);
    i = child;
  }
  Place(i, t);
}

void EventLoop::HeapPush(Timer* t) {
  heap_.push_back(t);
  t->index_ = heap_.size() - 1;
  SiftUp(t->index_);
}

void EventLoop::HeapRemove(Timer* t) {
  const size_t i = t->index_;
  t->index_ = Timer::kUnarmed;
  Timer* last = heap_.back();
  heap_.pop_back();
  if (last == t) return;
  Place(i, last);
  HeapFix(last);
}

void EventLoop::HeapFix(Timer* t) {
  const size_t i = t->index_;
  if (i > 0 && heap_[(i - 1) / 2]->at_ms_ > t->at_ms_) {
    SiftUp(i);
  } else {
    SiftDown(i);
  }
}

void Timer::Set(int64_t at_ms) {
  round_ = loop_->round_;
  if (armed()) {
    if (at_ms == at_ms_) return;
    at_ms_ = at_ms;
    loop_->HeapFix(this);
  } else {
    at_ms_ = at_ms;
    loop_->HeapPush(this);
  }
}

void Timer::Cancel() {
  if (armed()) loop_->HeapRemove(this);
}

}  // namespace torus::serve
