// TaskPipe: pushes tasks to workers (CoreWorkerService.PushTasks), many to a call. At most `max_calls` calls are in
// flight to one worker; tasks pushed while that many are in flight wait, and go together in the next call once one
// of them ends (at most `max_batch` tasks or `max_batch_bytes` of specs to a call). So a task pushed to an idle worker
// goes at once, and under load one call carries the tasks that came during the last one. The worker answers each
// task as soon as it finishes, whatever else its call carries. (A call of one task is a unary PushTask: fewer thread
// wake-ups on both sides than a stream.) Tasks never wait behind calls that make no progress: when a worker's calls
// in flight have had no answer for `stall`, the tasks waiting for it go in a new call anyway (an actor's call that
// waits for a later call of the same actor gets it).
//
// Thread-safety: thread-safe. Callbacks run on gRPC's threads (or the pusher's, for a push after Shutdown), never
// under the pipe's lock; a callback may push again.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "torus/core.grpc.pb.h"
#include "torus/core/channels.h"

namespace torus::core {

class TaskPipe {
 public:
  // How a pushed task ended: OK with the worker's reply; or the error of its call (the worker is gone or refused the
  // call; CANCELLED after Shutdown; INTERNAL when the worker ended the call without answering it) with an empty
  // reply. Called once per push.
  using Callback = std::function<void(const grpc::Status&, PushTaskReply&)>;
  struct Options {
    int max_calls = 2;                      // in flight to one worker
    int max_batch = 256;                    // tasks in one call
    size_t max_batch_bytes = 4 << 20;       // of specs in one call (a larger spec still goes, alone)
    std::chrono::milliseconds stall{10};
  };
  // `channels` is owned by the caller and outlives the pipe.
  explicit TaskPipe(Channels* channels) : TaskPipe(channels, Options{}) {}
  TaskPipe(Channels* channels, Options options);
  ~TaskPipe();  // Shutdown, waiting for every call to end

  // Sends `spec` to the worker at `address` (host:port of its CoreWorkerService) now, or with the next call there.
  void Push(const std::string& address, TaskSpec spec, Callback done);
  // Cancels the calls in flight and fails the tasks waiting (CANCELLED); waits up to `wait` for the calls to end.
  // Later pushes fail at once. Idempotent.
  void Shutdown(std::chrono::milliseconds wait);

  struct Counts {
    int64_t calls = 0;  // PushTasks calls made
    int64_t tasks = 0;  // tasks they carried
  };
  Counts counts() const;

 private:
  struct Item {
    TaskSpec spec;
    Callback done;
  };
  class Call;  // one PushTasks call in flight (task_pipe.cc)
  struct Line {
    int calls = 0;              // in flight
    std::deque<Item> waiting;   // for a call to end
    int64_t progress_us = 0;    // steady clock: the last call started or answer come
  };
  // Takes the next call's tasks from `line`'s waiting ones. REQUIRES: mu_ held.
  std::vector<Item> NextBatchLocked(Line& line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a call of `items` to `address` (already counted in its line's calls).
  void Start(const std::string& address, std::vector<Item> items);
  // A call ended (every task answered or failed): the next one goes, if tasks wait. Returns whether the call may
  // delete itself (else Shutdown, which is cancelling it, does).
  bool Ended(const std::string& address, Call* call);
  // An answer came from `address`.
  void Progress(const std::string& address);
  // Sends the tasks that wait for stalled calls; runs on flusher_.
  void FlushLoop();

  Channels* channels_;
  const Options options_;
  mutable absl::Mutex mu_;
  absl::CondVar ended_;
  absl::CondVar flush_;
  bool flusher_idle_ ABSL_GUARDED_BY(mu_) = false;         // FlushLoop waits with nothing to watch
  std::map<std::string, Line> lines_ ABSL_GUARDED_BY(mu_);  // by worker address
  std::set<Call*> calls_ ABSL_GUARDED_BY(mu_);              // in flight
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Counts counts_ ABSL_GUARDED_BY(mu_);
  std::thread flusher_;
};

}  // namespace torus::core
