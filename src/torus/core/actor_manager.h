// ActorManager: the actors this process owns (created). Each actor gets a worker of its own, leased from an agent
// for the actor's resources (the local agent first, then the nodes whose totals can hold it) and held for the actor's
// life; the creation task builds the instance there, and the actor is ALIVE at that worker's address. When the worker
// dies (the agent says how its lease ended), the actor is restarted on a new lease — a new process, its state
// built again by the constructor — up to `max_restarts` times (-1: forever), then it is DEAD with the cause. A killed
// actor is DEAD at once; so is one whose worker exited with code 0 (the actor's code asked for it: exit_actor(),
// sys.exit() in a method — Ray's intended exit). An owner that gives a holder pid has its actors die with it (the agents end the leases of a
// holder that exited); the head, which owns detached actors, gives none, and takes its actors up again after a
// restart (Adopt) where it left them (Abandon).
//
// Thread-safety: thread-safe. Each actor's life runs on a thread of its own.
#pragma once

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
#include "torus/core.grpc.pb.h"
#include "torus/core/object_table.h"
#include "torus/core/task_submitter.h"

namespace torus::core {

struct ActorOptions {
  TaskShape shape;
  int max_restarts = 0;
  int max_task_retries = 0;  // what handles from get_actor retry a call with (callers choose per call otherwise)
  // For the head's directory: a name unique in its namespace (empty: unnamed), the class and its methods.
  std::string name;
  std::string ns;
  std::string class_name;
  std::vector<std::string> methods;
  // Owned by the head, not by the creating process (CoreWorker::CreateActor asks the head to create it).
  bool detached = false;
  std::string job_id;  // the job its workers are leased for; empty: the manager's
};

// Where an actor's current (or last) worker is: its node and pid, and the lease that holds it (agent, lease id).
struct ActorPlace {
  std::string node_id;
  int64_t pid = 0;
  std::string agent;
  std::string lease_id;
};

class ActorManager {
 public:
  struct Options {
    std::string job_id;
    std::string local_agent;
    std::string own_address;
    int64_t holder_pid = 0;
    std::string holder_boot_id;
    int64_t lease_wait_ms = 10'000;
    // Called with each leased worker's (agent, worker id, pid, node id).
    std::function<void(const std::string&, const std::string&, int64_t, const std::string&)> on_worker;
    // Called with each actor's id and state as it changes (ALIVE, RESTARTING, DEAD) and where its current (or last)
    // worker is; under the manager's lock: it must not block or call back. Not called after Abandon.
    std::function<void(const std::string& actor_id, const ActorInfo& info, const ActorPlace& place)> on_state;
  };
  // `channels` is owned by the caller; `nodes()` gives the nodes leases may come from; `bundles` where a placement
  // group's bundles are (for actors placed in one).
  ActorManager(Options options, Channels* channels, std::function<std::vector<LeaseNode>()> nodes,
               TaskSubmitter::BundleFetcher bundles = {});
  ~ActorManager();

  // Registers actor `creation.actor_id()` and starts creating it. `info` carries the restarts (and incarnation) of
  // an actor taken up again after its owner restarted.
  void Create(TaskSpec creation, ActorOptions options, ActorInfo info = {});
  // Takes up an actor that is ALIVE at `info.address()` on the lease `place` (a restarted owner's): watches that
  // lease, and restarts the actor when it ends as after any worker's death.
  void Adopt(TaskSpec creation, ActorOptions options, ActorInfo info, ActorPlace place);
  // What this owner knows of an actor, waiting up to `wait_ms` while it is being created or restarted — or while the
  // incarnation ALIVE is older than `min_incarnation`. NotFound state (DEAD, "unknown actor") for one it does not
  // own.
  ActorInfo Resolve(const std::string& actor_id, int64_t wait_ms, int32_t min_incarnation = 0);
  // Stops the actor's worker; with `no_restart` (or no restarts left) it is DEAD. NotFound for an unknown actor.
  absl::Status Kill(const std::string& actor_id, bool no_restart);
  // Kills every actor and waits for their threads.
  void Shutdown();
  // Stops managing, leaving every actor's worker running and reporting nothing more (an owner that will Adopt them
  // after its restart); waits for the threads.
  void Abandon();

 private:
  struct Actor {
    TaskSpec creation;
    ActorOptions options;
    ActorInfo info;
    ActorPlace place;        // its current lease (lease_id empty between leases), or its last worker
    bool killed = false;     // no restart after the current worker
    std::thread thread;
  };
  // The actor's life; `adopted`: it starts ALIVE on the lease it has.
  void Live(const std::string& actor_id, bool adopted);
  void Start(std::unique_ptr<Actor> actor, bool adopted);
  // Until the lease ends: how its worker went, "its node's agent ... cannot be reached", or (stopping) "its owner is
  // shutting down".
  std::string WaitEnd(const std::string& agent, const std::string& lease_id);
  void Stop(bool end_leases);
  // Leases a worker for the actor: OK with (agent, grant), or the reason none can be had.
  absl::StatusOr<std::pair<std::string, LeaseReply>> LeaseFor(const TaskShape& shape, const std::string& job_id);
  void SetState(Actor& actor, ActorInfo::State state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReturnLease(const std::string& agent, const std::string& lease_id, bool kill);

  // Registers a call's context while it runs, so that Shutdown can cancel it.
  class Tracked {
   public:
    Tracked(ActorManager* m, grpc::ClientContext* ctx);
    ~Tracked();

   private:
    ActorManager* m_;
    grpc::ClientContext* ctx_;
  };

  const Options options_;
  Channels* channels_;
  std::set<grpc::ClientContext*> calls_ ABSL_GUARDED_BY(mu_);
  std::function<std::vector<LeaseNode>()> nodes_;
  TaskSubmitter::BundleFetcher bundles_;
  absl::Mutex mu_;
  absl::CondVar changed_;
  std::map<std::string, std::unique_ptr<Actor>> actors_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool abandoning_ ABSL_GUARDED_BY(mu_) = false;  // stopping without ending the leases
};

}  // namespace torus::core
