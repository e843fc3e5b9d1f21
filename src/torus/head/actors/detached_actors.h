// DetachedActors: the actors the head owns (lifetime "detached"). A program asks the head to create one
// (HeadService.CreateActor, with the constructor call and its arguments as values); the head registers it in the
// directory, leases a worker for it from an agent and builds the instance there, exactly as a program's core worker
// does for its own actors (core/actor_manager.h) — but it holds the leases without a holder pid, so a detached actor
// outlives the program that created it and the head's own restarts. Each state change goes to the directory with
// the lease that holds the worker; a restarted head takes the ALIVE ones up again on those leases (Recover) and
// creates again those it had not finished creating — after giving back any lease an earlier head was granted for one
// of them but did not journal (it died between the grant and the actor's start). A worker's death restarts the actor (max_restarts), as for any
// actor; torus.kill ends it.
//
// The head answers for them as their owner: ResolveActor and KillActor of CoreWorkerService on its gRPC port
// (service()); the actors' owner_address is the head's.
//
// Errors name the field: InvalidArgument for a malformed creation ("creation: ..."), the directory's errors
// (AlreadyExists for a name taken in its namespace).
//
// Thread-safety: thread-safe. Each actor's life runs on a thread of its own (the core's ActorManager).
#pragma once

#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "torus/core.pb.h"
#include "torus/head.pb.h"
#include "torus/head/actors/actor_directory.h"

namespace torus::core {
class ActorManager;
class Channels;
}  // namespace torus::core

namespace torus::head {

class DetachedActors {
 public:
  static constexpr size_t kMaxCreationBytes = 8 << 20;

  struct Options {
    std::string token;
    // The cluster CA's file when agents serve TLS ("" = plaintext).
    std::string tls_ca;
    // A restarted head waits this long (for the agents to come back) before creating again the actors it had not
    // finished creating.
    int64_t recover_delay_ms = 2'000;
  };

  DetachedActors(ActorDirectory* directory, Options options);
  ~DetachedActors();  // Stop()

  // Begins owning actors, once the head's gRPC API answers: `self_address` is where it answers from here (the
  // nodes and groups are read there), `owner_address` the head's advertised address, registered as the actors'
  // owner. Takes up the detached actors the directory holds that are not DEAD (after a restart). Until then Create
  // and Kill answer UNAVAILABLE and Resolve RESTARTING.
  void Start(const std::string& self_address, const std::string& owner_address);

  // Registers the actor `view` (its id, name, namespace, class, methods, job, resources, restarts) with `creation`
  // (a serialized core::ActorCreation) and starts creating it; the directory's entry (PENDING_CREATION).
  absl::StatusOr<Actor> Create(const rpc::ActorView& view, const std::string& creation);
  // As an owner's ResolveActor: what is known of the actor (binary id), waiting up to `wait_ms` while it is created
  // or restarted.
  core::ActorInfo Resolve(const std::string& actor_id, int64_t wait_ms, int32_t min_incarnation);
  absl::Status Kill(const std::string& actor_id, bool no_restart);
  // Stops managing the actors and leaves their workers running, for the next head to take up.
  void Stop();

  // CoreWorkerService (ResolveActor, KillActor; the others answer UNIMPLEMENTED), checking the cluster token.
  grpc::Service* service();

 private:
  class Service;
  // The manager once started; null before.
  core::ActorManager* Manager();
  // Takes up the actors of the directory; true when some are left to create once the agents are back (a thread of
  // its own then does it, and marks the head started).
  bool Recover();
  // Returns (killing the worker) every lease without a holder pid on the alive agents that is not in `known`.
  void SweepOrphanLeases(const std::set<std::string>& known);
  void OnState(const std::string& actor_id, const core::ActorInfo& info, const std::string& node_id, int64_t pid,
               const std::string& agent, const std::string& lease_id);

  ActorDirectory* directory_;
  const Options options_;
  std::unique_ptr<core::Channels> channels_;
  std::unique_ptr<core::ActorManager> manager_;
  std::unique_ptr<Service> service_;
  std::string owner_address_;  // set by Start
  std::string self_address_;   // set by Start
  absl::Mutex mu_;
  absl::CondVar stop_cv_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread recover_thread_;
};

// Decodes and checks a serialized core::ActorCreation: InvalidArgument naming the field.
absl::StatusOr<core::ActorCreation> ParseActorCreation(const std::string& bytes);

}  // namespace torus::head
