// FailureDetector: a thread that periodically asks the NodeRegistry to expire silent nodes.
//
// The check runs every `check_period` (a tenth of the node timeout, at most 100 ms), so a node is declared DEAD
// no later than timeout + check period after its last heartbeat.
//
// Thread-safety: Start/Stop from one owner thread; the worker thread touches only the (thread-safe) registry.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "torus/head/node_registry.h"

namespace torus::head {

class FailureDetector {
 public:
  FailureDetector(NodeRegistry* registry, std::chrono::microseconds check_period);
  ~FailureDetector();  // stops the thread

  void Start();
  void Stop();

 private:
  void Run();

  NodeRegistry* registry_;
  const std::chrono::microseconds check_period_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace torus::head
