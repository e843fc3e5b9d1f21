#include "torus/core/actor_caller.h"

#include <algorithm>
#include <cstdint>
#include <thread>

#include "absl/strings/str_cat.h"
#include "torus/core/args.h"
#include "torus/core/ids.h"
#include "torus/core/value_proto.h"

namespace torus::core {

ActorCaller::ActorCaller(std::string caller_id, std::string own_address, ObjectTable* table, TaskPipe* pipe,
                         Resolver resolve, TaskEventSink on_task)
    : caller_id_(std::move(caller_id)),
      own_address_(std::move(own_address)),
      table_(table),
      pipe_(pipe),
      resolve_(std::move(resolve)),
      on_task_(std::move(on_task)) {}

ActorCaller::~ActorCaller() { Shutdown(); }

void ActorCaller::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  threads_.Join();
}

bool ActorCaller::Stopping() {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

void ActorCaller::Forget(const std::string& actor_id) {
  absl::MutexLock lock(&mu_);
  auto it = actors_.find(actor_id);
  if (it != actors_.end()) it->second.known = false;
}

void ActorCaller::Call(const std::string& actor_id, const std::string& owner_address, TaskSpec spec) {
  for (int i = 1; i <= spec.num_returns(); ++i) table_->AddPending(ReturnObjectId(spec.task_id(), i));
  spec.set_actor_id(actor_id);
  spec.set_caller_id(caller_id_);
  spec.set_owner_address(own_address_);
  {
    absl::MutexLock lock(&mu_);
    actors_[actor_id].owner = owner_address;
  }
  auto shared = std::make_shared<TaskSpec>(std::move(spec));
  if (on_task_) on_task_(*shared, 0, "PENDING", "", 0, "");
  // Numbers are given when a call is ready to go, so that a call waiting for its arguments does not hold up the
  // order of those made before it... nor let later ones pass it: calls wait in order for the earlier ones' arguments.
  ResolveOwnedArgs(table_, own_address_, shared.get(), [this, actor_id, shared] { Ready(actor_id, shared); });
}

void ActorCaller::Ready(const std::string& actor_id, std::shared_ptr<TaskSpec> spec) {
  std::vector<std::shared_ptr<TaskSpec>> send;
  std::string address;
  {
    absl::MutexLock lock(&mu_);
    Actor& actor = actors_[actor_id];
    actor.waiting.push_back(std::move(spec));
    FlushLocked(actor_id, actor, send, address);
  }
  Send(address, std::move(send));
}

void ActorCaller::FlushLocked(const std::string& actor_id, Actor& actor, std::vector<std::shared_ptr<TaskSpec>>& send,
                              std::string& address) {
  if (actor.known && actor.info.state() == ActorInfo::DEAD) {
    const ActorInfo info = actor.info;
    auto dead = std::move(actor.waiting);
    actor.waiting.clear();
    for (const auto& s : dead) {
      Fail(*s, absl::StrCat("the actor is dead: ", info.death_cause()),
           info.has_creation_error() ? &info.creation_error() : nullptr);
    }
    return;
  }
  if (actor.known && actor.info.state() == ActorInfo::ALIVE) {
    if (actor.incarnation != actor.info.incarnation()) {
      actor.incarnation = actor.info.incarnation();
      actor.next_sequence = 1;
    }
    address = actor.info.address();
    while (!actor.waiting.empty()) {
      auto s = actor.waiting.front();
      actor.waiting.pop_front();
      s->set_sequence(actor.next_sequence++);
      send.push_back(std::move(s));
    }
    return;
  }
  if (!actor.resolving && !stopping_ && !actor.waiting.empty()) {
    actor.resolving = threads_.Start([this, actor_id] { Resolve(actor_id); });
  }
}

void ActorCaller::Resolve(const std::string& actor_id) {
  std::string owner;
  int32_t min_incarnation = 0;
  {
    absl::MutexLock lock(&mu_);
    Actor& actor = actors_[actor_id];
    owner = actor.owner;
    min_incarnation = actor.failed_incarnation + 1;
    actor.failed_incarnation = -1;
  }
  ActorInfo info;
  // Asked in slices of kResolveSliceMs, so that a stop is seen between them. A wait for a newer incarnation (after
  // a failed call) lasts up to kFateWaitMs; then what the owner says stands.
  const auto newer_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kFateWaitMs);
  while (true) {
    info = resolve_(actor_id, owner, kResolveSliceMs, min_incarnation);
    if (min_incarnation > 0 && (info.incarnation() >= min_incarnation || info.state() == ActorInfo::DEAD ||
                                std::chrono::steady_clock::now() >= newer_until)) {
      min_incarnation = 0;
    }
    absl::MutexLock lock(&mu_);
    if (stopping_) break;
    if (min_incarnation == 0 && (info.state() == ActorInfo::ALIVE || info.state() == ActorInfo::DEAD)) break;
  }
  std::vector<std::shared_ptr<TaskSpec>> send;
  std::string address;
  {
    absl::MutexLock lock(&mu_);
    Actor& actor = actors_[actor_id];
    actor.resolving = false;
    if (!stopping_) {
      actor.info = info;
      actor.known = true;
      FlushLocked(actor_id, actor, send, address);
    }
  }
  Send(address, std::move(send));
}

void ActorCaller::Send(const std::string& address, std::vector<std::shared_ptr<TaskSpec>> specs) {
  for (auto& spec : specs) {
    const std::string actor_id = spec->actor_id();
    if (on_task_) on_task_(*spec, spec->attempt(), "RUNNING", "", 0, "");
    pipe_->Push(
        address, *spec,
        [this, actor_id, address, spec](const grpc::Status& status, PushTaskReply& reply) {
          if (status.ok()) {
            if (on_task_) {
              const bool raised = reply.returns_size() > 0 && reply.returns(0).format() == "error";
              on_task_(*spec, spec->attempt(), raised ? "FAILED" : "FINISHED", "", 0,
                       raised ? "it raised an exception" : "");
            }
            for (int i = 0; i < spec->num_returns(); ++i) {
              const ObjectValue& v = reply.returns(std::min(i, reply.returns_size() - 1));
              table_->Put(ReturnObjectId(spec->task_id(), static_cast<uint32_t>(i + 1)), FromProto(v));
            }
            return;
          }
          // Its worker is gone: the next calls find out where the actor is now. A call that never reached it (the
          // connection was refused) goes there too, in its order; one that did fails, as it may have run, unless
          // it may be retried.
          const bool undelivered = status.error_code() == grpc::StatusCode::UNAVAILABLE &&
                                   (status.error_message().find("failed to connect") != std::string::npos ||
                                    status.error_message().find("Connection refused") != std::string::npos);
          // One that did reach it is sent again, to the restarted actor, while it has retries left
          // (max_task_retries).
          const bool retried =
              !undelivered && (spec->max_retries() < 0 || spec->attempt() < spec->max_retries());
          if (retried) {
            spec->set_attempt(spec->attempt() + 1);
            if (on_task_) {
              on_task_(*spec, spec->attempt(), "PENDING", "", 0,
                       absl::StrCat("retried: the actor's worker died (", status.error_message(), ")"));
            }
          }
          std::vector<std::shared_ptr<TaskSpec>> send;
          std::string next_address;
          bool requeued = false;
          int32_t incarnation = -1;
          {
            absl::MutexLock lock(&mu_);
            Actor& actor = actors_[actor_id];
            incarnation = actor.incarnation;
            if (actor.known && actor.info.address() == address) {
              actor.known = false;
              actor.failed_incarnation = actor.info.incarnation();
            }
            if ((undelivered || retried) && !stopping_) {
              requeued = true;
              actor.waiting.push_back(spec);
              std::stable_sort(actor.waiting.begin(), actor.waiting.end(), [](const auto& a, const auto& b) {
                const int64_t sa = a->sequence() > 0 ? a->sequence() : INT64_MAX;
                const int64_t sb = b->sequence() > 0 ? b->sequence() : INT64_MAX;
                return sa < sb;
              });
              FlushLocked(actor_id, actor, send, next_address);
            }
          }
          if (!send.empty()) Send(next_address, std::move(send));
          if (requeued) return;
          FailWithFate(actor_id, spec, incarnation,
                       absl::StrCat("the actor's worker died while running ", spec->name(), " (",
                                    status.error_message(), ")"));
        });
  }
}

void ActorCaller::FailWithFate(const std::string& actor_id, std::shared_ptr<TaskSpec> spec, int32_t incarnation,
                               std::string message) {
  std::string owner;
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) owner = actors_[actor_id].owner;
  }
  auto ask = [this, actor_id, spec, incarnation, owner, message] {
    // The owner answers once it has seen that worker end: DEAD, or a newer incarnation (restarted). Asked in
    // slices, so that a stop is seen between them.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kFateWaitMs);
    ActorInfo info;
    do {
      info = resolve_(actor_id, owner, kResolveSliceMs, incarnation + 1);
    } while (info.state() != ActorInfo::DEAD && info.incarnation() <= incarnation &&
             std::chrono::steady_clock::now() < until && !Stopping());
    if (info.state() == ActorInfo::DEAD) {
      Fail(*spec, absl::StrCat("the actor is dead: ", info.death_cause()));
    } else {
      Fail(*spec, message);
    }
  };
  if (owner.empty() || !threads_.Start(std::move(ask))) Fail(*spec, message);
}

void ActorCaller::Fail(const TaskSpec& spec, const std::string& message, const ObjectValue* creation_error) {
  if (on_task_) on_task_(spec, 0, "FAILED", "", 0, message);
  for (int i = 1; i <= spec.num_returns(); ++i) {
    Value v{.data = message, .format = "actor_died"};
    if (creation_error != nullptr) v = Value{.data = creation_error->data(), .format = "actor_creation_failed"};
    table_->Put(ReturnObjectId(spec.task_id(), static_cast<uint32_t>(i)), std::move(v));
  }
}

}  // namespace torus::core
