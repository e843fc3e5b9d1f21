// ActorCaller: calls of actor methods from this process. Calls go straight to the actor's worker, numbered per
// caller from 1 in each incarnation so that the worker runs them in the order they were made, several in flight at
// once. The actor's address comes from its owner (ResolveActor: this process's ActorManager, or an RPC to the owning
// process); calls made while it is being created or restarted wait for it.
//
// A call in flight when the actor's worker dies fails ("actor_died") unless it has retries left (TaskSpec.max_retries,
// Ray's max_task_retries): then it is sent again, in its order, to the restarted actor; later calls go to the
// restarted actor, or fail with its death cause once it is DEAD. A call that fails so says the actor's death cause
// when its owner, asked then, says it is DEAD (killed, exited on purpose, no restarts left). Returns are owned by
// this process like a task's.
//
// Thread-safety: thread-safe.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "torus/common/thread_group.h"
#include "torus/core.grpc.pb.h"
#include "torus/core/object_table.h"
#include "torus/core/task_events.h"
#include "torus/core/task_pipe.h"
#include "torus/core/task_submitter.h"

namespace torus::core {

class ActorCaller {
 public:
  // How an actor's owner answers: `resolve(actor_id, owner_address, wait_ms, min_incarnation)`.
  using Resolver = std::function<ActorInfo(const std::string&, const std::string&, int64_t, int32_t)>;
  // `on_task` (optional) is told of each call's changes of state, as TaskSubmitter's.
  // `table` and `pipe` (through which calls go to the actors' workers) are owned by the caller and outlive this.
  ActorCaller(std::string caller_id, std::string own_address, ObjectTable* table, TaskPipe* pipe, Resolver resolve,
              TaskEventSink on_task = {});
  ~ActorCaller();

  // Calls a method (spec: task_id, name, method, args, num_returns set); its returns are pending in the table.
  void Call(const std::string& actor_id, const std::string& owner_address, TaskSpec spec);
  // Forgets where the actor is: the next call asks its owner (after a kill).
  void Forget(const std::string& actor_id);
  // Fails what waits and stops resolving: joins the threads that ask owners (each wait on an owner is at most
  // kResolveSliceMs, so this takes about that long at most).
  void Shutdown();

  static constexpr int64_t kResolveSliceMs = 1000;

 private:
  struct Actor {
    std::string owner;
    ActorInfo info;
    bool known = false;          // info holds a current answer (ALIVE with an address, or DEAD)
    bool resolving = false;
    int64_t next_sequence = 1;
    int32_t incarnation = -1;
    // A call failed on this incarnation: the next resolution waits (a while) for a newer one, so that a call sent
    // again does not go back to the worker that just died before its owner has noticed.
    int32_t failed_incarnation = -1;
    std::deque<std::shared_ptr<TaskSpec>> waiting;  // calls waiting for an address
  };
  void Ready(const std::string& actor_id, std::shared_ptr<TaskSpec> spec);
  // Sends waiting calls when the address is known, or starts resolving it. REQUIRES: mu_ held.
  void FlushLocked(const std::string& actor_id, Actor& actor, std::vector<std::shared_ptr<TaskSpec>>& send,
                   std::string& address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Send(const std::string& address, std::vector<std::shared_ptr<TaskSpec>> specs);
  void Resolve(const std::string& actor_id);
  void Fail(const TaskSpec& spec, const std::string& message, const ObjectValue* creation_error = nullptr);
  // Fails a call whose worker (of `incarnation`) died while it ran: with the actor's death cause if its owner says
  // it is DEAD, else with `message`. Asks the owner (for up to kFateWaitMs) on a thread of its own.
  void FailWithFate(const std::string& actor_id, std::shared_ptr<TaskSpec> spec, int32_t incarnation,
                    std::string message);

  const std::string caller_id_;
  const std::string own_address_;
  ObjectTable* table_;
  TaskPipe* pipe_;
  Resolver resolve_;
  TaskEventSink on_task_;
  bool Stopping();

  static constexpr int64_t kFateWaitMs = 10'000;
  absl::Mutex mu_;
  std::map<std::string, Actor> actors_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  ThreadGroup threads_;  // the threads that ask owners (Resolve, FailWithFate)
};

}  // namespace torus::core
