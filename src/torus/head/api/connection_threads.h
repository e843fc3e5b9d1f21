// The HTTP server's connection threads: a thread per open connection, started when the connection is accepted, up
// to a bound, instead of a fixed pool. A connection holds its thread while it lasts (a kept-alive client between
// requests, an event stream, a client sending its request slowly), so a fixed pool of N threads is taken by N such
// connections and every other client waits behind them; here a new connection waits only once `max_threads`
// connections are open, and then in arrival order.
//
// Thread-safety: enqueue and shutdown may be called from any thread; shutdown() waits for every queued and running
// connection to finish, and no thread touches the object once it has returned.
#pragma once

#include <deque>
#include <functional>

#include <httplib.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace torus::head {

class ConnectionThreads final : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(int max_threads);
  ~ConnectionThreads() override;

  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

  // For tests: threads running now, and the most that ever ran at once.
  int running() const;
  int peak() const;

 private:
  void Run(std::function<void()> fn);

  const int max_threads_;
  mutable absl::Mutex mu_;
  absl::CondVar idle_;
  std::deque<std::function<void()>> waiting_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  int peak_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace torus::head
