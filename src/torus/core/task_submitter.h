// TaskSubmitter: runs tasks on leased workers. Tasks of one shape (resources, environment, working directory) share
// a queue; the submitter asks agents for worker leases of that shape — as many as the queue needs and no more, the
// local agent first, then the other nodes whose totals can hold it (lease_policy.h) — and pushes the queued tasks to the leased workers: one at a time to each, or
// more for a function whose tasks are short (lately under `pipeline_below_ms` each on their worker): as many as the
// worker gets through in that time, at most `pipeline_depth`, so that a queued task waits about as long as a new lease
// would take, and the worker never idles between tasks. (A call of such a function that runs long for once still holds
// the few queued behind it.) Pushes go through a TaskPipe: under load, several tasks to one call. A lease with nothing
// to do is kept `lease_idle_ms` for the next task of its shape, then returned. A worker is sent a function's code
// once; later tasks name it by id. Arguments that are objects this process owns are resolved first (the task waits
// in its queue only once they are ready) and sent by value. Which agents to ask is LeaseCandidates (lease_candidates.h).
//
// Failures: a worker that dies mid-task (the push fails) is given back with its lease, and the task is retried up to
// `max_retries` times, then its returns become "worker_crashed" values; an application error is retried only with
// `retry_exceptions`, and when the spec lists retry_exception_types, only if its executor found the error of one. A shape no node can ever hold fails at once ("unschedulable", naming the nodes' totals).
//
// Thread-safety: thread-safe; completions run on gRPC's threads.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "torus/core.grpc.pb.h"
#include "torus/common/thread_group.h"
#include "torus/core/channels.h"
#include "torus/core/lease_candidates.h"
#include "torus/core/lease_policy.h"
#include "torus/core/object_table.h"
#include "torus/core/task_events.h"
#include "torus/core/task_pipe.h"

namespace torus::core {

struct TaskOptions {
  TaskShape shape;
  int max_retries = 3;
  bool retry_exceptions = false;
};

class TaskSubmitter {
 public:
  struct Options {
    std::string job_id;
    std::string local_agent;      // host:port; tried first
    std::string own_address;      // this process's CoreWorkerService (the owner of the returns)
    int64_t holder_pid = 0;
    std::string holder_boot_id;
    int64_t lease_wait_ms = 10'000;
    int max_lease_requests = 16;  // in flight per shape
    // Tasks in flight per leased worker while the shape's tasks are short; 1 otherwise (as Ray: a second task queued
    // behind a long one on a busy worker would wait although another lease could run it now).
    int pipeline_depth = 64;
    double pipeline_below_ms = 10.0;
    int64_t lease_idle_ms = 50;   // an idle lease is returned after this long
    // Called with each granted lease's (agent, worker id, pid, node id), e.g. to follow its output.
    std::function<void(const std::string&, const std::string&, int64_t, const std::string&)> on_worker;
    // Told of each task's changes of state (PENDING, RUNNING, FINISHED, FAILED), e.g. for the head's task table.
    TaskEventSink on_task;
  };
  // `table`, `channels` and `pipe` (through which tasks go to workers) are owned by the caller and outlive the
  // submitter. `refresh_nodes` (may be empty) reloads
  // the node list from the head; it is asked before a shape is declared unschedulable. `bundles(group, stop)` waits
  // until a placement group is created and says where its bundles are (may be empty: no placement groups).
  using BundleFetcher =
      std::function<absl::StatusOr<std::vector<BundleLocation>>(const std::string&, const std::function<bool()>&)>;
  TaskSubmitter(Options options, ObjectTable* table, Channels* channels, TaskPipe* pipe,
                std::function<std::vector<LeaseNode>()> refresh_nodes = {}, BundleFetcher bundles = {});
  ~TaskSubmitter();

  // The nodes leases may come from (replaces the list).
  void SetNodes(std::vector<LeaseNode> nodes);
  // Queues `spec` (its task_id, name, function, args and num_returns set; owner and job are filled in). Its returns
  // are pending in the table until it finishes. A ref argument owned by this process is replaced by its value once
  // that is ready; refs owned elsewhere are passed on for the executor to fetch.
  void Submit(TaskSpec spec, TaskOptions options);
  // Cancels a task: one still queued (or waiting for its arguments) fails "cancelled" now; one running is
  // interrupted by its worker, or with `force` its worker is stopped — no retry either way. Returns whether the
  // task was known (not finished).
  bool Cancel(const std::string& task_id, bool force, bool recursive = true);
  // Cancels every task this process submitted that has not finished (Cancel without force, recursively): what a
  // task cancelled with recursive=True leaves behind.
  void CancelAll();

  // Cancels the calls in flight (not the pushes: the pipe's Shutdown ends those), returns every lease and waits (up
  // to 3 s) for the calls to end. Tasks submitted after it fail.
  void Shutdown();

  struct Counts {
    int64_t submitted = 0, finished = 0, failed = 0, retried = 0, leases_granted = 0;
  };
  Counts counts() const;

 private:
  struct Task {
    TaskSpec spec;
    TaskOptions options;
    int attempts = 0;
  };
  struct Lease {
    std::string lease_id;
    std::string agent;
    std::string worker_address;
    std::string node_id;
    int64_t worker_pid = 0;
    int in_flight = 0;                       // tasks pushed, not answered
    int64_t idle_since_ms = 0;               // steady ms when in_flight dropped to 0
  };
  struct Push {
    std::string key;
    Lease lease;
    std::shared_ptr<Task> task;
  };
  struct Shape {
    TaskShape shape;
    std::deque<std::shared_ptr<Task>> queue;
    int lease_requests = 0;
    std::vector<std::string> candidates;  // agent addresses
    std::vector<int> candidate_bundles;   // the bundle to lease inside at each (-1: none)
    size_t next_candidate = 0;            // the round robin's turn (SPREAD, bundles, every candidate full)
    std::map<std::string, int> requests_at;       // lease requests in flight, by agent
    std::map<std::string, int64_t> busy_until_ms;  // agents that said they had no room lately (steady ms)
    double grant_ms = 0;                          // a lease request's recent time to its grant (moving average)
    std::map<std::string, Lease> leases;  // held, by lease id
    std::string waiting_reason;           // what the last busy agent said, reported with the queued tasks
    // By function id: the recent time of one of its tasks on its worker (moving average), once one finished.
    std::map<std::string, double> task_ms;
  };
  // How many tasks in flight a lease of `shape` may have with `task` among them: more while its function's tasks
  // are short, else 1.
  int DepthFor(const Shape& shape, const Task& task) const;

  // Resolves owned ref args, then queues. Called once per attempt.
  void Enqueue(std::shared_ptr<Task> task);
  void Queue(std::shared_ptr<Task> task);
  // Asks for leases while the queue has more tasks than requests in flight. REQUIRES: mu_ held.
  void RequestLeasesLocked(const std::string& key, Shape& shape) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnLease(const std::string& key, const std::string& agent, int bundle, int64_t sent_ms,
               const grpc::Status& status, const LeaseReply& reply);
  // A lease request waits this long at an agent that may be full while another candidate has room; an agent that
  // said it was full is asked again only after kBusyAgentMs, unless every other one is full too.
  // The steady clock in milliseconds and microseconds.
  static int64_t SteadyMs();
  static int64_t SteadyUs();
  static constexpr int64_t kBusyAgentWaitMs = 200;
  static constexpr int64_t kBusyAgentMs = 1000;
  // Learns where a placement group's bundles are (on a thread of its own), then queues the tasks that wait for it.
  void FetchBundles(const std::string& group);
  // Gives queued tasks to held leases with room (REQUIRES: mu_ held); the caller sends them with Send, unlocked.
  void DispatchLocked(const std::string& key, Shape& shape, std::vector<Push>& pushes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Send(std::vector<Push> pushes);
  // Returns leases idle longer than lease_idle_ms; runs on the idle thread.
  void IdleLoop();
  void OnPushed(const std::string& key, const std::string& lease_id, std::shared_ptr<Task> task,
                const grpc::Status& status, const PushTaskReply& reply);
  void ReturnLease(const Lease& lease, bool kill_worker);
  // Every return of `task` becomes a value of `format` carrying `message`.
  void FailTask(const Task& task, const std::string& format, const std::string& message);
  void FailQueueLocked(Shape& shape, const std::string& format, const std::string& message,
                       std::vector<std::shared_ptr<Task>>& failed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A context for one call, tracked until Done so that Shutdown can cancel it.
  std::shared_ptr<grpc::ClientContext> NewCall();
  void Done(const std::shared_ptr<grpc::ClientContext>& ctx);

  const Options options_;
  ObjectTable* table_;
  Channels* channels_;
  TaskPipe* pipe_;
  mutable absl::Mutex mu_;
  std::function<std::vector<LeaseNode>()> refresh_nodes_;
  BundleFetcher fetch_bundles_;
  // Placement groups: where their bundles are, or why they cannot be used; tasks waiting for that answer.
  std::map<std::string, absl::StatusOr<std::vector<BundleLocation>>> group_bundles_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<std::shared_ptr<Task>>> waiting_for_group_ ABSL_GUARDED_BY(mu_);
  ThreadGroup fetchers_;  // FetchBundles of placement groups
  std::vector<LeaseNode> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Shape> shapes_ ABSL_GUARDED_BY(mu_);  // by TaskShape::Key()
  Counts counts_ ABSL_GUARDED_BY(mu_);
  std::set<std::shared_ptr<grpc::ClientContext>> calls_ ABSL_GUARDED_BY(mu_);  // in flight
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar calls_done_;
  // Worker address -> function ids.
  std::map<std::string, std::set<std::string>> sent_functions_ ABSL_GUARDED_BY(mu_);
  struct Pushed {
    std::string key;
    std::string lease_id;
    std::string worker_address;
    int64_t pushed_us = 0;  // steady clock
    int position = 1;       // its place in the worker's line when pushed (1: nothing ahead of it)
  };
  std::map<std::string, Pushed> pushed_ ABSL_GUARDED_BY(mu_);  // task id -> where it runs
  std::set<std::string> cancelled_ ABSL_GUARDED_BY(mu_);       // task ids cancelled and not yet answered
  std::set<std::string> live_ ABSL_GUARDED_BY(mu_);            // task ids submitted and not finished
  absl::CondVar idle_cv_;
  std::thread idle_thread_;
};

}  // namespace torus::core
