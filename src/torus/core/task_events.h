// TaskEvents: the changes of this process's tasks' states (the tasks it submitted and the actor methods it called),
// sent to the head in batches about every `period` for /api/v0/tasks and `torus list tasks`. Best effort and
// bounded: beyond `max_pending` events waiting to be sent the oldest are dropped, and a batch the head does not take
// (unreachable) is dropped too; task execution never waits for it.
//
// Example:
//   TaskEvents events(&channels, head_address, own_address);
//   TaskEventSink sink = events.Sink();
//   sink(spec, /*attempt=*/0, "PENDING", "", 0, "");
//
// Thread-safety: thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "torus/core.pb.h"
#include "torus/core/channels.h"
#include "torus/head.grpc.pb.h"

namespace torus::core {

// Reports one change: the task (its id, name, job and actor), its attempt (0 first), the state (PENDING, RUNNING,
// FINISHED, FAILED), where it runs when RUNNING, and why when FAILED.
using TaskEventSink = std::function<void(const TaskSpec& spec, int attempt, const char* state,
                                         const std::string& node_id, int64_t pid, const std::string& error)>;

class TaskEvents {
 public:
  TaskEvents(Channels* channels, std::string head_address, std::string owner_address,
             std::chrono::milliseconds period = std::chrono::seconds(1), size_t max_pending = 100'000);
  ~TaskEvents();  // sends what waits (one try, at most a second), then stops

  TaskEventSink Sink();
  void Add(rpc::TaskEvent event);

 private:
  void Loop();
  void SendBatch(std::deque<rpc::TaskEvent> batch, std::chrono::milliseconds deadline);

  Channels* channels_;
  const std::string head_address_;
  const std::string owner_address_;
  const std::chrono::milliseconds period_;
  const size_t max_pending_;
  std::unique_ptr<rpc::HeadService::Stub> stub_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<rpc::TaskEvent> pending_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace torus::core
