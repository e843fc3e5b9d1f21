// ActorDirectory: the head's directory of actors, over the state store. Owners (the processes that create actors
// and lease their workers from agents) register each actor and report its states; names are unique per namespace
// among actors not DEAD; the owner monitor (owners/owner_monitor.h) marks DEAD the actors of an owner that is gone.
//
// Example:
//   ActorDirectory actors(&store, &clock);
//   auto a = actors.Register({.id = ActorId("9f2c..."), .name = "learner", .ns = "rl", .class_name = "Learner",
//                             .owner_address = "127.0.0.1:41234", ...});   // PENDING_CREATION
//   actors.Update({.actor = a->id, .state = ActorState::kAlive, .node = NodeId("n1"), .pid = 4321, ...});
//   const auto found = actors.GetNamed("rl", "learner");
//
// Errors name the field: InvalidArgument for a malformed actor or update, AlreadyExists for a name taken in its
// namespace ("the name \"learner\" is taken in namespace \"rl\" by actor 9f2c..."), NotFound for an unknown actor,
// FailedPrecondition for an update of an actor that is DEAD.
//
// Thread-safety: thread-safe (the store serialises).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "torus/common/clock.h"
#include "torus/head.pb.h"
#include "torus/head/state/state_store.h"

namespace torus::head {

struct ActorFilter {
  std::optional<ActorState> state;
  std::string job_id;  // empty: every job
};

class ActorDirectory {
 public:
  static constexpr size_t kMaxNameBytes = 256;

  ActorDirectory(StateStore* store, const Clock* clock) : store_(store), clock_(clock) {}

  // Registers a new actor as PENDING_CREATION (its create time now).
  absl::StatusOr<Actor> Register(Actor actor);
  // Applies an owner's report: ALIVE, RESTARTING or DEAD.
  absl::StatusOr<Actor> Update(ActorUpdated update);
  absl::StatusOr<Actor> Get(const ActorId& id) const;
  // The actor not DEAD holding `name` in `ns`; NotFound names both.
  absl::StatusOr<Actor> GetNamed(const std::string& ns, const std::string& name) const;
  // Newest first (by create time).
  std::vector<Actor> List(const ActorFilter& filter) const;
  // owner address -> its actors not DEAD (detached ones, which the head owns, aside).
  std::map<std::string, std::vector<ActorId>> LiveByOwner() const;
  // Marks DEAD, with `cause`, every actor of `owner` not DEAD yet (detached ones aside); returns how many.
  int OwnerGone(const std::string& owner, const std::string& cause);

 private:
  StateStore* store_;
  const Clock* clock_;
};

// "PENDING_CREATION", "ALIVE", ... -> the state; InvalidArgument naming `field` and the accepted names.
absl::StatusOr<ActorState> ParseActorState(const std::string& field, const std::string& name);

// The REST view (/api/v0/actors) and the gRPC view of an actor.
nlohmann::json ActorJson(const Actor& actor);
void ActorToProto(const Actor& actor, rpc::ActorView* view);
// A RegisterActor request's actor (validated by Register); never detached (only the head makes those).
Actor ActorFromProto(const rpc::ActorView& view);

}  // namespace torus::head
