#include "torus/core/actor_manager.h"

#include "absl/strings/str_cat.h"
#include <optional>
#include <string_view>

#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "torus/core/ids.h"

namespace torus::core {
namespace {

constexpr int64_t kWaitEndMs = 30'000;

// Whether a lease's end ("its worker exited with code 0[; its output ends: ...]") says its worker exited with code
// 0: an actor's worker does that only when the actor's own code asked for it (exit_actor(), sys.exit() in a method),
// which Ray counts as an intended exit, never restarted.
bool ExitedOnPurpose(const std::string& how) {
  constexpr std::string_view kZero = "its worker exited with code 0";
  return how.rfind(kZero, 0) == 0 && (how.size() == kZero.size() || how[kZero.size()] == ';');
}

}  // namespace

ActorManager::Tracked::Tracked(ActorManager* m, grpc::ClientContext* ctx) : m_(m), ctx_(ctx) {
  absl::MutexLock lock(&m_->mu_);
  if (m_->stopping_) ctx_->TryCancel();
  m_->calls_.insert(ctx_);
}

ActorManager::Tracked::~Tracked() {
  absl::MutexLock lock(&m_->mu_);
  m_->calls_.erase(ctx_);
}

ActorManager::ActorManager(Options options, Channels* channels, std::function<std::vector<LeaseNode>()> nodes,
                           TaskSubmitter::BundleFetcher bundles)
    : options_(std::move(options)), channels_(channels), nodes_(std::move(nodes)), bundles_(std::move(bundles)) {}

ActorManager::~ActorManager() { Shutdown(); }

void ActorManager::Create(TaskSpec creation, ActorOptions options, ActorInfo info) {
  auto actor = std::make_unique<Actor>();
  for (const auto& [k, v] : options.shape.resources) (*creation.mutable_resources())[k] = v;
  actor->creation = std::move(creation);
  actor->options = std::move(options);
  actor->info = std::move(info);
  actor->info.set_state(ActorInfo::PENDING_CREATION);
  actor->info.clear_address();
  Start(std::move(actor), false);
}

void ActorManager::Adopt(TaskSpec creation, ActorOptions options, ActorInfo info, ActorPlace place) {
  auto actor = std::make_unique<Actor>();
  actor->creation = std::move(creation);
  actor->options = std::move(options);
  actor->info = std::move(info);
  actor->info.set_state(ActorInfo::ALIVE);
  actor->place = std::move(place);
  Start(std::move(actor), true);
}

void ActorManager::Start(std::unique_ptr<Actor> actor, bool adopted) {
  const std::string id = actor->creation.actor_id();
  absl::MutexLock lock(&mu_);
  if (stopping_) {
    actor->info.set_death_cause("its owner is shutting down");
    Actor& dead = *actor;
    actors_[id] = std::move(actor);
    SetState(dead, ActorInfo::DEAD);
    return;
  }
  Actor& a = *actor;
  actors_[id] = std::move(actor);
  a.thread = std::thread([this, id, adopted] { Live(id, adopted); });
}

absl::StatusOr<std::pair<std::string, LeaseReply>> ActorManager::LeaseFor(const TaskShape& shape,
                                                                                  const std::string& job_id) {
  std::optional<std::vector<BundleLocation>> bundles;
  if (!shape.placement_group.empty()) {
    if (!bundles_) return absl::FailedPreconditionError("placement groups are not available");
    auto fetched = bundles_(shape.placement_group, [this] {
      absl::MutexLock lock(&mu_);
      return stopping_;
    });
    if (!fetched.ok()) return absl::FailedPreconditionError(fetched.status().message());
    bundles = *std::move(fetched);
  }
  Candidates c = LeaseCandidates(shape, nodes_(), options_.local_agent, "an actor", bundles ? &*bundles : nullptr);
  if (c.agents.empty()) return absl::FailedPreconditionError(c.unschedulable);
  std::vector<std::string> candidates = std::move(c.agents);
  std::vector<int> candidate_bundles = std::move(c.bundles);
  std::string last_error;
  // Busy nodes are asked again in turn until one grants; nodes that can never hold it are dropped.
  while (!candidates.empty()) {
    for (size_t i = 0; i < candidates.size();) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return absl::CancelledError("its owner is shutting down");
      }
      LeaseRequest request;
      request.set_job_id(job_id.empty() ? options_.job_id : job_id);
      for (const auto& [k, v] : shape.resources) (*request.mutable_resources())[k] = v;
      for (const auto& [k, v] : shape.env) (*request.mutable_env())[k] = v;
      request.set_working_dir(shape.working_dir);
      request.set_holder_pid(options_.holder_pid);
      request.set_holder_boot_id(options_.holder_boot_id);
      request.set_wait_ms(candidates.size() == 1 ? options_.lease_wait_ms : 200);
      if (candidate_bundles[i] >= 0) {
        const BundleLocation* where = bundles ? FindBundle(*bundles, candidate_bundles[i]) : nullptr;
        request.set_group_id(where ? where->ledger_group : shape.placement_group);
        request.set_bundle_index(where ? where->ledger_index : candidate_bundles[i]);
      }
      grpc::ClientContext ctx;
      channels_->Authorize(ctx);
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(request.wait_ms() + 90'000));
      LeaseReply reply;
      grpc::Status s;
      {
        Tracked tracked(this, &ctx);
        s = channels_->Leases(candidates[i])->RequestWorkerLease(&ctx, request, &reply);
      }
      if (s.ok()) return std::make_pair(candidates[i], reply);
      last_error = absl::StrCat(candidates[i], ": ", s.error_message());
      if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
        ++i;
      } else if (s.error_code() == grpc::StatusCode::UNAVAILABLE &&
                 s.error_message().find("task worker") != std::string::npos) {
        return absl::UnavailableError(s.error_message());  // the worker cannot start: no point elsewhere
      } else {
        candidates.erase(candidates.begin() + static_cast<long>(i));
        candidate_bundles.erase(candidate_bundles.begin() + static_cast<long>(i));
      }
    }
  }
  return absl::FailedPreconditionError(absl::StrCat("no node could lease a worker for it; the last said ", last_error));
}

void ActorManager::SetState(Actor& actor, ActorInfo::State state) {
  actor.info.set_state(state);
  changed_.SignalAll();
  if (options_.on_state && !abandoning_) options_.on_state(actor.creation.actor_id(), actor.info, actor.place);
}

std::string ActorManager::WaitEnd(const std::string& agent, const std::string& lease_id) {
  while (true) {
    grpc::ClientContext ctx;
    channels_->Authorize(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(kWaitEndMs + 10'000));
    WaitLeaseEndRequest wait;
    wait.set_lease_id(lease_id);
    wait.set_wait_ms(kWaitEndMs);
    WaitLeaseEndReply ended;
    grpc::Status s;
    {
      Tracked tracked(this, &ctx);
      s = channels_->Leases(agent)->WaitLeaseEnd(&ctx, wait, &ended);
    }
    if (s.ok() && ended.ended()) return ended.how();
    absl::MutexLock check(&mu_);
    if (stopping_) return "its owner is shutting down";
    if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
      // An agent that restarted since (an owner taking an actor up again after its own restart).
      return absl::StrCat("its lease ", lease_id, " is unknown to the agent at ", agent, " (the agent restarted)");
    }
    if (!s.ok() && s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return absl::StrCat("its node's agent at ", agent, " cannot be reached (", s.error_message(), ")");
    }
  }
}

void ActorManager::Live(const std::string& actor_id, bool adopted) {
  mu_.Lock();
  Actor& actor = *actors_.at(actor_id);
  while (true) {
    std::string how;
    if (adopted) {
      adopted = false;
      const ActorPlace place = actor.place;
      mu_.Unlock();
      how = WaitEnd(place.agent, place.lease_id);
      mu_.Lock();
    } else {
      if (stopping_ || actor.killed) {
        actor.info.set_death_cause(actor.killed ? "it was killed (torus.kill)" : "its owner is shutting down");
        SetState(actor, ActorInfo::DEAD);
        mu_.Unlock();
        return;
      }
      const TaskShape shape = actor.options.shape;
      const std::string job_id = actor.options.job_id;
      mu_.Unlock();
      auto lease = LeaseFor(shape, job_id);
      mu_.Lock();
      if (!lease.ok()) {
        actor.info.set_death_cause(absl::StrCat("it could not be placed: ", lease.status().message()));
        SetState(actor, ActorInfo::DEAD);
        mu_.Unlock();
        return;
      }
      if (actor.killed || stopping_) {
        // Killed (or the owner stopping) while its worker was being leased.
        mu_.Unlock();
        ReturnLease(lease->first, lease->second.lease_id(), true);
        mu_.Lock();
        continue;
      }
      actor.place = ActorPlace{.node_id = lease->second.node_id(),
                               .pid = lease->second.worker_pid(),
                               .agent = lease->first,
                               .lease_id = lease->second.lease_id()};
      if (options_.on_worker) {
        options_.on_worker(lease->first, lease->second.worker_id(), lease->second.worker_pid(),
                           lease->second.node_id());
      }
      const std::string address = lease->second.worker_address();
      TaskSpec creation = actor.creation;
      creation.set_attempt(actor.info.incarnation());
      mu_.Unlock();
      // Build the instance.
      grpc::ClientContext ctx;
      channels_->Authorize(ctx);
      PushTaskRequest request;
      *request.mutable_task() = creation;
      PushTaskReply reply;
      grpc::Status pushed;
      {
        Tracked tracked(this, &ctx);
        pushed = channels_->Worker(address)->PushTask(&ctx, request, &reply);
      }
      mu_.Lock();
      const ActorPlace place = actor.place;
      if (pushed.ok() && reply.returns_size() > 0 && reply.returns(0).format() == "error") {
        // The constructor raised: the actor is dead with that error (no restart, as in Ray).
        *actor.info.mutable_creation_error() = reply.returns(0);
        actor.info.set_death_cause("its constructor raised an exception");
        actor.place.lease_id.clear();
        SetState(actor, ActorInfo::DEAD);
        mu_.Unlock();
        ReturnLease(place.agent, place.lease_id, true);
        return;
      }
      if (pushed.ok() && (actor.killed || stopping_)) {
        actor.place.lease_id.clear();
        mu_.Unlock();
        ReturnLease(place.agent, place.lease_id, true);
        mu_.Lock();
        continue;
      }
      if (pushed.ok()) {
        actor.info.set_address(address);
        SetState(actor, ActorInfo::ALIVE);
        mu_.Unlock();
        // Until the lease ends: its worker exited, or it was returned (a kill).
        how = WaitEnd(place.agent, place.lease_id);
        mu_.Lock();
      } else {
        how = absl::StrCat("its worker failed while the actor was being created (", pushed.error_message(), ")");
        mu_.Unlock();
        ReturnLease(place.agent, place.lease_id, true);
        mu_.Lock();
      }
    }
    actor.info.clear_address();
    actor.place.lease_id.clear();
    const int max = actor.options.max_restarts;
    const bool on_purpose = ExitedOnPurpose(how);
    if (actor.killed || stopping_ || on_purpose || (max >= 0 && actor.info.restarts() >= max)) {
      actor.info.set_death_cause(actor.killed ? "it was killed (torus.kill)"
                                 : stopping_  ? "its owner is shutting down"
                                 : on_purpose ? "it exited intentionally (exit_actor() or sys.exit() in a method): "
                                                "its worker ended with exit code 0"
                                              : absl::StrCat("its worker ", how.rfind("its worker ", 0) == 0
                                                                                ? how.substr(11)
                                                                                : how));
      SetState(actor, ActorInfo::DEAD);
      mu_.Unlock();
      return;
    }
    actor.info.set_restarts(actor.info.restarts() + 1);
    actor.info.set_incarnation(actor.info.incarnation() + 1);
    SetState(actor, ActorInfo::RESTARTING);
  }
}

ActorInfo ActorManager::Resolve(const std::string& actor_id, int64_t wait_ms, int32_t min_incarnation) {
  absl::MutexLock lock(&mu_);
  auto it = actors_.find(actor_id);
  if (it == actors_.end()) {
    ActorInfo unknown;
    unknown.set_state(ActorInfo::DEAD);
    unknown.set_death_cause("its owner does not know it (the owner restarted, or the actor was never created)");
    return unknown;
  }
  Actor& actor = *it->second;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(wait_ms, 0));
  while (actor.info.state() == ActorInfo::PENDING_CREATION || actor.info.state() == ActorInfo::RESTARTING ||
         (actor.info.state() == ActorInfo::ALIVE && actor.info.incarnation() < min_incarnation)) {
    changed_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()));
    if (std::chrono::steady_clock::now() >= deadline) break;  // timed out
  }
  return actor.info;
}

absl::Status ActorManager::Kill(const std::string& actor_id, bool no_restart) {
  std::string agent, lease_id;
  {
    absl::MutexLock lock(&mu_);
    auto it = actors_.find(actor_id);
    if (it == actors_.end()) return absl::NotFoundError(absl::StrCat("no actor ", Hex(actor_id), " is owned here"));
    if (no_restart) {
      // Dead from now on for every caller; its worker goes next.
      it->second->killed = true;
      it->second->info.set_death_cause("it was killed (torus.kill)");
      it->second->info.clear_address();
      SetState(*it->second, ActorInfo::DEAD);
    }
    agent = it->second->place.agent;
    lease_id = it->second->place.lease_id;
    changed_.SignalAll();
  }
  if (!lease_id.empty()) ReturnLease(agent, lease_id, true);
  return absl::OkStatus();
}

void ActorManager::ReturnLease(const std::string& agent, const std::string& lease_id, bool kill) {
  grpc::ClientContext ctx;
  channels_->Authorize(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ReturnLeaseRequest request;
  request.set_lease_id(lease_id);
  request.set_kill_worker(kill);
  ReturnLeaseReply reply;
  channels_->Leases(agent)->ReturnWorkerLease(&ctx, request, &reply);
}

void ActorManager::Shutdown() { Stop(true); }

void ActorManager::Abandon() { Stop(false); }

void ActorManager::Stop(bool end_leases) {
  std::vector<std::pair<std::string, std::string>> leases;
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    abandoning_ = !end_leases;
    for (auto& [id, actor] : actors_) {
      if (!actor->place.lease_id.empty()) leases.emplace_back(actor->place.agent, actor->place.lease_id);
      if (actor->thread.joinable()) threads.push_back(std::move(actor->thread));
    }
    for (grpc::ClientContext* ctx : calls_) ctx->TryCancel();
    changed_.SignalAll();
  }
  if (end_leases) {
    for (const auto& [agent, lease_id] : leases) ReturnLease(agent, lease_id, true);
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace torus::core
