// Executor: the tasks pushed to this process, handed to the language one at a time and answered to their pushes as
// the language finishes them. Tasks run in arrival order, except an actor's calls: those run in each caller's
// sequence order (1, 2, 3, ...), whatever order they arrive in, the early ones held until their turn.
//
// It knows nothing of gRPC's server: a push comes with a TaskAnswers sink (the service's call) and each task's reply
// goes there. The owner side of the process (core_worker.h) hears of each finished task's returns before the reply
// goes out, to register the caller as a borrower of the refs inside them.
//
// Thread-safety: thread-safe. Next blocks the calling thread (the language releases its lock around it).
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/status.h"
#include "torus/core.pb.h"
#include "torus/core/object_table.h"

namespace torus::core {

// A task pushed to this worker, for the language to run.
struct Execution {
  TaskSpec spec;
};

// Where the answers of a push go (core_worker_service.cc): the reply of a PushTask call, or the answers of a
// PushTasks call. Thread-safe.
class TaskAnswers {
 public:
  virtual ~TaskAnswers() = default;
  // The answer of the call's task at `index` (0 for a PushTask call).
  virtual void Answer(int index, PushTaskReply reply) = 0;
  // Ends the call with `status`, its unanswered tasks and all. Idempotent; later answers are dropped.
  virtual void Abort(const grpc::Status& status) = 0;
};

class Executor {
 public:
  // Called with a finished task's returns and the address of its owner (its submitter), before they are answered.
  using BeforeAnswer = std::function<void(const std::vector<Value>& returns, const std::string& owner_address)>;
  explicit Executor(BeforeAnswer before_answer) : before_answer_(std::move(before_answer)) {}

  // Takes a push of `tasks`, each answered through `answers` by Finish (or Cancel, or Stop: UNAVAILABLE). Refuses the
  // whole push, taking nothing: Unavailable once stopped; AlreadyExists when a task id repeats in it or is here
  // already.
  absl::Status Push(const std::vector<const TaskSpec*>& tasks, const std::shared_ptr<TaskAnswers>& answers);
  // The next task to run, waiting up to `timeout_ms` (< 0: forever); nullopt on timeout or once stopped.
  std::optional<Execution> Next(int64_t timeout_ms);
  // Answers task `task_id` with `returns` (num_returns values, or one error value for all). `function_unknown`: the
  // task named a function by id that this worker does not hold; the submitter sends it again with the code.
  // `retryable` false: the task's error is of no type in its retry_exception_types. A task not here is ignored.
  void Finish(const std::string& task_id, std::vector<Value> returns, bool function_unknown = false,
              bool retryable = true);
  // The address of the owner of task `task_id` pushed here and not yet answered; nullopt when there is none.
  std::optional<std::string> OwnerOf(const std::string& task_id) const;

  enum class Cancelled {
    kNotHere,   // no such task pushed here and unanswered
    kDropped,   // it had not started: dropped and answered "cancelled"
    kRunning,   // it runs now: the caller interrupts it (Interrupt) after what else it cancels
  };
  Cancelled Cancel(const std::string& task_id);
  // Calls the cancel handler with `task_id` (on the calling thread), if one is set.
  void Interrupt(const std::string& task_id);
  // The language's way to interrupt a running task (set once it runs tasks).
  void SetCancelHandler(std::function<void(const std::string&)> handler);

  // Whether the calling thread is the one that last took a task (Next), and whether this process took an actor's
  // creation or calls: a read there is a task's own, which its agent may lend the lease's CPU away from.
  bool OnTaskThread() const { return task_thread_.load() == std::this_thread::get_id(); }
  bool HostsActor() const { return hosts_actor_.load(); }

  // Ends every unanswered push UNAVAILABLE; later pushes are refused and Next returns nullopt. Idempotent.
  void Stop();
  bool Stopped() const;

 private:
  struct Running {
    std::shared_ptr<TaskAnswers> answers;
    int index = 0;              // in its push
    std::string owner_address;  // the task's submitter, which owns its returns
  };
  // Actor calls, per caller: the next sequence number to run and the calls that came ahead of it.
  struct CallerOrder {
    int64_t next = 1;
    std::map<int64_t, Execution> early;
  };

  const BeforeAnswer before_answer_;
  mutable absl::Mutex mu_;
  std::deque<Execution> pending_ ABSL_GUARDED_BY(mu_);              // pushed, in the order they run, not yet taken
  std::map<std::string, Running> running_ ABSL_GUARDED_BY(mu_);     // pushed, not yet answered, by task id
  std::map<std::string, CallerOrder> callers_ ABSL_GUARDED_BY(mu_);  // by caller id
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(const std::string&)> cancel_handler_ ABSL_GUARDED_BY(mu_);
  std::atomic<std::thread::id> task_thread_{};  // the thread that last took a task
  std::atomic<bool> hosts_actor_{false};        // it took an actor's creation or calls
};

}  // namespace torus::core
