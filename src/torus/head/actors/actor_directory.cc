#include "torus/head/actors/actor_directory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace torus::head {
namespace {

bool IsHex(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

absl::Status CheckActor(const Actor& a) {
  if (a.id.empty() || a.id.str().size() > 64 || !IsHex(a.id.str())) {
    return absl::InvalidArgumentError(absl::StrCat("actor_id: 1 to 64 lowercase hex digits are required, got \"", a.id.str(), "\""));
  }
  if (a.name.size() > ActorDirectory::kMaxNameBytes || a.ns.size() > ActorDirectory::kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("name and namespace: at most ", ActorDirectory::kMaxNameBytes, " bytes each"));
  }
  if (a.class_name.empty()) return absl::InvalidArgumentError("class_name: required");
  if (a.owner_address.empty()) return absl::InvalidArgumentError("owner_address: required (the owner's host:port)");
  if (a.max_restarts < -1) {
    return absl::InvalidArgumentError(absl::StrCat("max_restarts: -1 (without limit) or more is required, got ", a.max_restarts));
  }
  if (a.max_task_retries < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_task_retries: -1 (without limit) or more is required, got ", a.max_task_retries));
  }
  for (const auto& [name, amount] : a.resources) {
    if (amount < 0) return absl::InvalidArgumentError(absl::StrCat("resources[\"", name, "\"]: must not be negative"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ActorState> ParseActorState(const std::string& field, const std::string& name) {
  for (ActorState s : {ActorState::kPendingCreation, ActorState::kAlive, ActorState::kRestarting, ActorState::kDead}) {
    if (ActorStateName(s) == name) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": \"", name, "\" is not a state; use PENDING_CREATION, ALIVE, RESTARTING or DEAD"));
}

absl::StatusOr<Actor> ActorDirectory::Register(Actor actor) {
  if (absl::Status s = CheckActor(actor); !s.ok()) return s;
  actor.state = ActorState::kPendingCreation;
  actor.create_time_ms = clock_->WallMillis();
  actor.start_time_ms = actor.end_time_ms = 0;
  actor.restarts = 0;
  actor.death_cause.clear();
  actor.lease_agent.clear();
  actor.lease_id.clear();
  return store_->Update([&](Txn& txn) -> absl::StatusOr<Actor> {
    if (txn.state().FindActor(actor.id) != nullptr) {
      return absl::AlreadyExistsError(absl::StrCat("actor ", actor.id.str(), " is registered already"));
    }
    if (!actor.name.empty()) {
      if (const Actor* holder = txn.state().FindNamedActor(actor.ns, actor.name); holder != nullptr) {
        return absl::AlreadyExistsError(absl::StrCat("the name \"", actor.name, "\" is taken in namespace \"",
                                                     actor.ns, "\" by actor ", holder->id.str(), " (",
                                                     ActorStateName(holder->state), ")"));
      }
    }
    if (absl::Status s = txn.Apply(ActorRegistered{actor}); !s.ok()) return s;
    return *txn.state().FindActor(actor.id);
  });
}

absl::StatusOr<Actor> ActorDirectory::Update(ActorUpdated update) {
  if (update.state == ActorState::kPendingCreation) {
    return absl::InvalidArgumentError("state: an update is ALIVE, RESTARTING or DEAD");
  }
  if (update.state == ActorState::kAlive && update.worker_address.empty()) {
    return absl::InvalidArgumentError("worker_address: required when ALIVE");
  }
  if (update.restarts < 0) return absl::InvalidArgumentError("restarts: must not be negative");
  update.wall_ms = clock_->WallMillis();
  return store_->Update([&](Txn& txn) -> absl::StatusOr<Actor> {
    const Actor* a = txn.state().FindActor(update.actor);
    if (a == nullptr) return absl::NotFoundError(absl::StrCat("unknown actor ", update.actor.str()));
    if (a->state == ActorState::kDead) {
      return absl::FailedPreconditionError(absl::StrCat("actor ", update.actor.str(), " is DEAD already"));
    }
    if (absl::Status s = txn.Apply(update); !s.ok()) return s;
    const Actor* after = txn.state().FindActor(update.actor);
    if (after == nullptr) return absl::NotFoundError("the actor was forgotten");  // pruned at once: kMaxDeadActors 0
    return *after;
  });
}

absl::StatusOr<Actor> ActorDirectory::Get(const ActorId& id) const {
  return store_->Read([&](const ClusterState& s) -> absl::StatusOr<Actor> {
    const Actor* a = s.FindActor(id);
    if (a == nullptr) return absl::NotFoundError(absl::StrCat("unknown actor ", id.str()));
    return *a;
  });
}

absl::StatusOr<Actor> ActorDirectory::GetNamed(const std::string& ns, const std::string& name) const {
  return store_->Read([&](const ClusterState& s) -> absl::StatusOr<Actor> {
    const Actor* a = s.FindNamedActor(ns, name);
    if (a == nullptr) {
      return absl::NotFoundError(absl::StrCat("no actor named \"", name, "\" in namespace \"", ns, "\""));
    }
    return *a;
  });
}

std::vector<Actor> ActorDirectory::List(const ActorFilter& filter) const {
  std::vector<Actor> out = store_->Read([&](const ClusterState& s) {
    std::vector<Actor> actors;
    for (const auto& [id, a] : s.actors()) {
      if (filter.state && a.state != *filter.state) continue;
      if (!filter.job_id.empty() && a.job_id != filter.job_id) continue;
      actors.push_back(a);
    }
    return actors;
  });
  std::stable_sort(out.begin(), out.end(),
                   [](const Actor& a, const Actor& b) { return a.create_time_ms > b.create_time_ms; });
  return out;
}

std::map<std::string, std::vector<ActorId>> ActorDirectory::LiveByOwner() const {
  return store_->Read([](const ClusterState& s) {
    std::map<std::string, std::vector<ActorId>> owners;
    for (const auto& [id, a] : s.actors()) {
      if (a.state != ActorState::kDead && !a.detached) owners[a.owner_address].push_back(id);
    }
    return owners;
  });
}

int ActorDirectory::OwnerGone(const std::string& owner, const std::string& cause) {
  const int64_t now = clock_->WallMillis();
  return store_->Update([&](Txn& txn) {
    std::vector<ActorUpdated> deaths;
    for (const auto& [id, a] : txn.state().actors()) {
      if (a.state == ActorState::kDead || a.detached || a.owner_address != owner) continue;
      deaths.push_back({.actor = id, .state = ActorState::kDead, .restarts = a.restarts, .death_cause = cause,
                        .wall_ms = now});
    }
    for (ActorUpdated& d : deaths) txn.Apply(std::move(d)).IgnoreError();
    return static_cast<int>(deaths.size());
  });
}

nlohmann::json ActorJson(const Actor& a) {
  nlohmann::json resources = nlohmann::json::object();
  for (const auto& [name, amount] : a.resources) resources[name] = static_cast<double>(amount) / 10000.0;
  return {{"actor_id", a.id.str()},
          {"name", a.name},
          {"namespace", a.ns},
          {"class_name", a.class_name},
          {"state", ActorStateName(a.state)},
          {"job_id", a.job_id},
          {"owner_address", a.owner_address},
          {"node_id", a.node.str()},
          {"pid", a.pid},
          {"address", a.worker_address},
          {"resources", resources},
          {"restarts", a.restarts},
          {"max_restarts", a.max_restarts},
          {"max_task_retries", a.max_task_retries},
          {"is_detached", a.detached},
          {"death_cause", a.death_cause},
          {"create_time_ms", a.create_time_ms},
          {"start_time_ms", a.start_time_ms},
          {"end_time_ms", a.end_time_ms},
          {"methods", a.methods}};
}

void ActorToProto(const Actor& a, rpc::ActorView* v) {
  v->set_actor_id(a.id.str());
  v->set_name(a.name);
  v->set_namespace_(a.ns);
  v->set_class_name(a.class_name);
  for (const std::string& m : a.methods) v->add_methods(m);
  v->set_job_id(a.job_id);
  v->set_owner_address(a.owner_address);
  v->set_state(ActorStateName(a.state));
  v->set_node_id(a.node.str());
  v->set_pid(a.pid);
  v->set_worker_address(a.worker_address);
  for (const auto& [k, amount] : a.resources) (*v->mutable_resources())[k] = amount;
  v->set_restarts(a.restarts);
  v->set_max_restarts(a.max_restarts);
  v->set_max_task_retries(a.max_task_retries);
  v->set_death_cause(a.death_cause);
  v->set_create_time_ms(a.create_time_ms);
  v->set_start_time_ms(a.start_time_ms);
  v->set_end_time_ms(a.end_time_ms);
  v->set_detached(a.detached);
}

Actor ActorFromProto(const rpc::ActorView& v) {
  Actor a;
  a.id = ActorId(v.actor_id());
  a.name = v.name();
  a.ns = v.namespace_();
  a.class_name = v.class_name();
  a.methods.assign(v.methods().begin(), v.methods().end());
  a.job_id = v.job_id();
  a.owner_address = v.owner_address();
  a.resources.insert(v.resources().begin(), v.resources().end());
  a.max_restarts = v.max_restarts();
  a.max_task_retries = v.max_task_retries();
  return a;
}

}  // namespace torus::head
