// CoreWorker: the library inside every driver and task worker process. It is the owner of what its process creates:
// it submits tasks (TaskSubmitter over worker leases) and actor calls (ActorCaller), creates actors (ActorManager),
// holds the objects its process puts or its tasks return (ObjectTable) and serves them to borrowers, and fetches the
// objects others own. In a worker, what is pushed to the process is run by its Executor (executor.h), which the
// language drains.
//
// It listens on CoreWorkerService (an ephemeral port on the node's address; core_worker_service.cc maps each call onto
// the owner side here or onto the executor): PushTask/PushTasks queue tasks on the executor and answer as the
// language finishes them; GetObject serves owned values, waiting for pending ones.
//
// In a task worker, Get and Wait that have to wait for objects not ready yet, called on the thread that runs its
// tasks, tell the local agent the worker is blocked until they return, so that its lease's CPU is lent to the tasks
// it waits for (core_worker_get.cc). As in Ray, an actor's worker never does: its resources are its own for life.
//
// Thread-safety: thread-safe. Get and Wait block the calling thread (the language releases its lock
// around them).
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
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "torus/core.grpc.pb.h"
#include "torus/common/thread_group.h"
#include "torus/core/actor_caller.h"
#include "torus/core/actor_manager.h"
#include "torus/core/borrows.h"
#include "torus/core/executor.h"
#include "torus/core/actor_reporter.h"
#include "torus/core/blocked_reporter.h"
#include "torus/core/task_events.h"
#include "torus/core/object_table.h"
#include "torus/core/output_follower.h"
#include "torus/core/store_client.h"
#include "torus/core/task_pipe.h"
#include "torus/core/task_submitter.h"
#include "torus/core/worker_certificate.h"

namespace torus::core {

struct CoreWorkerOptions {
  std::string job_id;
  std::string node_ip = "127.0.0.1";  // where this process listens
  std::string head_address;           // host:port of the head (its node list)
  std::string local_agent;            // host:port of this host's agent
  std::string token;
  std::string worker_id;              // set in a task worker: it announces itself to the local agent
  bool follow_output = false;         // stream the output of the workers it leases (a driver's log_to_driver)
  // The bound of the values this process holds (its puts, its tasks' returns, fetched copies); 0: 30% of the
  // machine's memory.
  size_t object_store_memory = 0;
};

struct Ref {
  std::string object_id;
  std::string owner_address;
};

// The alive nodes of the cluster whose head is at `head_address`, with their agents' addresses and totals.
absl::StatusOr<std::vector<LeaseNode>> FetchNodes(const std::string& head_address, const std::string& token);

class CoreWorker;
// CoreWorkerService for `worker`, refusing calls without the cluster `token` (core_worker_service.cc).
std::unique_ptr<grpc::Service> NewCoreWorkerService(CoreWorker* worker, std::string token);

class CoreWorker {
 public:
  // Listens, learns the cluster's nodes from the head, and (a worker) announces itself to its agent.
  static absl::StatusOr<std::unique_ptr<CoreWorker>> Start(CoreWorkerOptions options);
  ~CoreWorker();

  const std::string& address() const { return address_; }
  const CoreWorkerOptions& options() const { return options_; }

  // What every alive node has free now, summed, from each agent's own ledger (so leases count, which the head's
  // view does not yet show). Nodes that do not answer within 2 s are left out.
  std::map<std::string, int64_t> AvailableResources();

  // Reloads the node list from the head.
  absl::Status RefreshNodes();
  std::vector<LeaseNode> nodes() const;

  // Submits a task (see TaskSubmitter::Submit); returns its return objects' ids.
  std::vector<std::string> Submit(TaskSpec spec, TaskOptions options);
  // Creates an actor owned by this process (creation: task_id, name, function = the class, args set): registers it
  // with the head's directory, then returns its id at once, while it is being placed and built. AlreadyExists when
  // its name is taken in its namespace (nothing is created).
  // A detached one (options.detached) is owned by the head instead (its owner address is the head's): its
  // arguments are resolved here first (a ref waits for its value) and sent with it, at most 8 MiB in all
  // (InvalidArgument beyond, naming the size), and it takes no fallback selectors (InvalidArgument).
  absl::StatusOr<std::string> CreateActor(TaskSpec creation, ActorOptions options);
  // The head's entry of the actor named `name` in namespace `ns` (not DEAD); NotFound names both.
  absl::StatusOr<rpc::ActorView> GetNamedActor(const std::string& ns, const std::string& name);
  // Calls a method of an actor owned by `owner_address` (spec: task_id, name, method, args, num_returns set);
  // returns its return objects' ids.
  std::vector<std::string> CallActor(const std::string& actor_id, const std::string& owner_address, TaskSpec spec);
  // What the actor's owner says of it, waiting up to `wait_ms` while it is created or restarted (or while an
  // incarnation older than `min_incarnation` is the one alive: see ResolveActorRequest).
  ActorInfo ResolveActor(const std::string& actor_id, const std::string& owner_address, int64_t wait_ms,
                         int32_t min_incarnation = 0);
  absl::Status KillActor(const std::string& actor_id, const std::string& owner_address, bool no_restart);

  // An object that becomes `ready` once placement group `group` is CREATED, or an "unschedulable" value saying why
  // it never will be (REMOVED, FAILED). Returns its id.
  std::string WhenGroupReady(const std::string& group, Value ready);
  Channels& channels() { return channels_; }

  // Stores a value this process owns; returns its id.
  // ResourceExhausted when it does not fit the object store's bound.
  absl::StatusOr<std::string> Put(Value value);
  // The same from the language's buffers: a large value (kInlineMaxBytes and more) is written to this node's object
  // store (ResourceExhausted "object store full: ..." when it has no room), a small one is held here.
  // `contained`: the refs inside the value (id, owner), held for as long as it lives.
  absl::StatusOr<std::string> PutParts(const ValueParts& parts,
                                       std::vector<std::pair<std::string, std::string>> contained = {});
  // Return `index` (from 1) of task `task_id` that this worker runs, as Executor::Finish takes it: a large one is written to
  // this node's store for the task's owner (an "object_store_full" value in its place when it has no room).
  Value StoreReturn(const std::string& task_id, uint32_t index, const ValueParts& parts);
  // This node's mapping of a stored value that Get returned for `ref`.
  absl::StatusOr<std::shared_ptr<MappedObject>> MapStored(const Ref& ref, const Value& value);
  // Each ref's value, waiting up to `timeout_ms` (< 0: forever). DeadlineExceeded naming how many are not ready;
  // NotFound when an owner no longer holds one (or is gone).
  absl::StatusOr<std::vector<Value>> Get(const std::vector<Ref>& refs, int64_t timeout_ms);
  // The indices of refs that are ready, once `num` are or `timeout_ms` passed (< 0: forever).
  std::vector<size_t> Wait(const std::vector<Ref>& refs, size_t num, int64_t timeout_ms);

  void AddRef(const std::string& id) { table_.AddRef(id); }
  void RemoveRef(const std::string& id) { table_.RemoveRef(id); }
  void MarkEscaped(const std::string& id) { table_.MarkEscaped(id); }
  // The language read `refs` inside a value (and holds handles on them): this process registers as a borrower of
  // those it does not own, with each owner, before it returns (core_worker_refs.cc).
  void Borrow(const std::vector<Ref>& refs);

  // What runs the tasks pushed to this process (executor.h).
  Executor& executor() { return executor_; }
  // Streaming generators (core_worker_generators.cc). Executor side: reports item `index` (from 1) of task `task_id`
  // running here to the task's owner and waits until the owner holds it (a large one goes to this node's store
  // first; the owner is registered as a borrower of the refs inside it). FailedPrecondition when the task is not
  // running here; Unavailable when its owner cannot be reached.
  absl::Status ReportGeneratorItem(const std::string& task_id, uint32_t index, const ValueParts& parts,
                                   std::vector<std::pair<std::string, std::string>> contained);
  // Owner side: the object id of item `index` of generator task `task_id` that this process submitted, once it is
  // reported; nullopt when the task ended with fewer items; DeadlineExceeded after `timeout_ms` (< 0: forever);
  // NotFound when the task is not one this process submitted.
  absl::StatusOr<std::optional<std::string>> NextGeneratorItem(const std::string& task_id, uint32_t index,
                                                               int64_t timeout_ms);
  grpc::Status HandleReportGeneratorItem(const ReportGeneratorItemRequest& request);

  TaskSubmitter::Counts counts() const { return submitter_->counts(); }
  // The next line of output of a worker this process leased (follow_output), waiting up to `timeout_ms`.
  std::optional<OutputLine> NextOutput(int64_t timeout_ms) { return output_.Next(timeout_ms); }
  const ObjectTable& table() const { return table_; }

  // Returns leases, stops serving. Idempotent.
  void Shutdown();

  // The service's handlers (public for the service class).
  grpc::Status HandleGetObject(const GetObjectRequest& request, GetObjectReply* reply);
  ActorInfo HandleResolveActor(const ResolveActorRequest& request);
  // Cancels a task pushed here: one not started is dropped (answered "cancelled"); a running one is interrupted,
  // and with `recursive` the tasks this worker submitted are cancelled first (recursively). False: not here.
  bool HandleCancel(const std::string& task_id, bool recursive = false);
  // Cancels a task this process submitted (see TaskSubmitter::Cancel).
  bool CancelTask(const std::string& task_id, bool force, bool recursive = true) {
    return submitter_->Cancel(task_id, force, recursive);
  }
  grpc::Status HandleKillActor(const KillActorRequest& request);
  // Runs a handler that may wait (a pending object, an actor being created, a kill) on a thread this worker owns
  // and joins when it stops, not on gRPC's; false (nothing runs) once it is stopping. The waits above end within
  // kWaitSliceMs of a stop.
  bool StartHandlerThread(std::function<void()> handler) { return handler_threads_.Start(std::move(handler)); }
  static constexpr int64_t kWaitSliceMs = 200;
  void HandleUpdateBorrowers(const UpdateBorrowersRequest& request, UpdateBorrowersReply* reply) {
    borrows_->Handle(request, reply);
  }

 private:
  bool Stopping() const { return stopping_.load(); }
  explicit CoreWorker(CoreWorkerOptions options);
  // What leases report their workers to: the output follower, when this process follows output.
  std::function<void(const std::string&, const std::string&, int64_t, const std::string&)> Follower();
  // What actors report their states to: the head's directory, through reporter_.
  std::function<void(const std::string&, const ActorInfo&, const ActorPlace&)> ActorStateReporter();
  // CreateActor of a detached actor (detached_actor.cc): `entry` is its directory entry.
  absl::StatusOr<std::string> CreateDetachedActor(TaskSpec creation, const ActorOptions& options,
                                                  rpc::ActorView entry);
  // The objects this process owns that `spec` takes as arguments, and every ref inside its arguments' values, are
  // held (a reference each) until its first return is ready: its final outcome, after any retries
  // (core_worker_refs.cc).
  void HoldArgsUntilDone(const TaskSpec& spec);
  // Before a task's returns go back to `caller`: the caller is registered as a borrower of the refs inside them that
  // it does not own (here for those this process owns, with their owners for the others).
  void RegisterCallerOf(const std::vector<Value>& returns, const std::string& caller);
  // One fetch of a borrowed object from its owner, waiting up to `wait_ms` there.
  absl::StatusOr<std::optional<Value>> Fetch(const Ref& ref, int64_t wait_ms);
  // A worker's reporter of blocked reads to its agent; null in a driver (core_worker_get.cc).
  std::unique_ptr<BlockedReporter> NewBlockedReporter();
  // The reporter a read on the calling thread reports to: blocked_ on the thread that takes tasks of a worker that
  // hosts no actor; null otherwise.
  BlockedReporter* ReporterHere() const;

  const CoreWorkerOptions options_;
  Channels channels_;
  std::unique_ptr<BlockedReporter> blocked_;  // in a worker: reads that wait say so to its agent
  std::unique_ptr<WorkerCertificate> certificate_;  // with TLS: what server_ serves with (outlives it)
  ObjectTable table_;
  std::string address_;
  std::unique_ptr<StoreClient> store_;  // this node's object store
  std::unique_ptr<Borrows> borrows_;
  OutputFollower output_{&channels_};
  std::unique_ptr<TaskEvents> task_events_;  // before submitter_ and caller_, which report to it
  std::unique_ptr<TaskPipe> pipe_;           // before submitter_ and caller_, which push through it
  std::unique_ptr<TaskSubmitter> submitter_;
  std::unique_ptr<ActorReporter> reporter_;  // before actors_: their last states are reported as they stop
  std::unique_ptr<ActorManager> actors_;
  std::unique_ptr<ActorCaller> caller_;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;

  mutable absl::Mutex mu_;
  std::vector<LeaseNode> nodes_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stopping_{false};
  Executor executor_;
  ThreadGroup group_watchers_;                                        // WhenGroupReady's waits
  ThreadGroup handler_threads_;                                       // StartHandlerThread's
};

}  // namespace torus::core
