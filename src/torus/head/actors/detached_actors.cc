#include "torus/head/actors/detached_actors.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/escaping.h"
#include "absl/time/time.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/core.grpc.pb.h"
#include "torus/core/actor_manager.h"
#include "torus/core/channels.h"
#include "torus/core/core_worker.h"
#include "torus/core/groups.h"
#include "torus/core/ids.h"
#include "torus/rpc/convert.h"
#include "torus/rpc/server_auth.h"

namespace torus::head {
namespace {

core::ActorOptions OptionsOf(const core::ActorCreation& c, const std::string& job_id) {
  core::ActorOptions o;
  o.shape.resources = {c.resources().begin(), c.resources().end()};
  o.shape.env = {c.env().begin(), c.env().end()};
  o.shape.working_dir = c.working_dir();
  o.shape.label_selector = {c.label_selector().begin(), c.label_selector().end()};
  o.shape.strategy = c.strategy();
  o.shape.placement_group = c.placement_group();
  o.shape.bundle_index = c.bundle_index();
  o.max_restarts = c.max_restarts();
  o.max_task_retries = c.max_task_retries();
  o.job_id = job_id;
  return o;
}

}  // namespace

absl::StatusOr<core::ActorCreation> ParseActorCreation(const std::string& bytes) {
  if (bytes.size() > DetachedActors::kMaxCreationBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "creation: ", bytes.size(), " bytes; a detached actor's constructor call (its class and arguments) is kept by "
        "the head, at most ", DetachedActors::kMaxCreationBytes >> 20,
        " MiB: pass large data through the object store or files the actor reads"));
  }
  core::ActorCreation c;
  if (!c.ParseFromString(bytes)) return absl::InvalidArgumentError("creation: not a serialized ActorCreation");
  if (c.creation().function().empty()) return absl::InvalidArgumentError("creation.creation.function: required");
  for (const core::TaskArg& arg : c.creation().args()) {
    if (!arg.has_value() || !arg.value().location().empty()) {
      return absl::InvalidArgumentError(
          "creation.creation.args: every argument must be a value carried in the request (no refs, nothing stored)");
    }
  }
  for (const auto& [name, amount] : c.resources()) {
    if (amount < 0) return absl::InvalidArgumentError(absl::StrCat("creation.resources[\"", name, "\"]: negative"));
  }
  if (c.max_restarts() < -1) return absl::InvalidArgumentError("creation.max_restarts: -1 or more is required");
  if (c.max_task_retries() < -1) return absl::InvalidArgumentError("creation.max_task_retries: -1 or more is required");
  if (c.bundle_index() < -1) return absl::InvalidArgumentError("creation.bundle_index: -1 or more is required");
  return c;
}

class DetachedActors::Service final : public core::CoreWorkerService::CallbackService {
 public:
  Service(DetachedActors* actors, std::string token) : actors_(actors), token_(std::move(token)) {}

  grpc::ServerUnaryReactor* ResolveActor(grpc::CallbackServerContext* ctx, const core::ResolveActorRequest* request,
                                         core::ActorInfo* reply) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (grpc::Status auth = rpc::CheckToken(ctx, token_); !auth.ok()) {
      reactor->Finish(auth);
    } else {
      // It may wait (up to wait_ms) for a creation: on a thread of its own, not gRPC's.
      std::thread([this, reactor, request, reply] {
        *reply = actors_->Resolve(request->actor_id(), std::min<int64_t>(request->wait_ms(), 60'000),
                                  request->min_incarnation());
        reactor->Finish(grpc::Status::OK);
      }).detach();
    }
    return reactor;
  }

  grpc::ServerUnaryReactor* KillActor(grpc::CallbackServerContext* ctx, const core::KillActorRequest* request,
                                      core::KillActorReply*) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (grpc::Status auth = rpc::CheckToken(ctx, token_); !auth.ok()) {
      reactor->Finish(auth);
    } else {
      std::thread([this, reactor, request] {
        reactor->Finish(rpc::ToGrpc(actors_->Kill(request->actor_id(), request->no_restart())));
      }).detach();
    }
    return reactor;
  }

 private:
  DetachedActors* actors_;
  const std::string token_;
};

DetachedActors::DetachedActors(ActorDirectory* directory, Options options)
    : directory_(directory),
      options_(std::move(options)),
      channels_(std::make_unique<core::Channels>(options_.token, options_.tls_ca)),
      service_(std::make_unique<Service>(this, options_.token)) {}

void DetachedActors::Start(const std::string& self_address, const std::string& owner_address) {
  const std::string token = options_.token;
  core::Channels* channels = channels_.get();
  owner_address_ = owner_address;
  manager_ = std::make_unique<core::ActorManager>(
      core::ActorManager::Options{
          .own_address = owner_address,
          // No holder: the leases outlive this head (a restarted one takes them up again).
          .holder_pid = 0,
          .on_state =
              [this](const std::string& id, const core::ActorInfo& info, const core::ActorPlace& place) {
                OnState(id, info, place.node_id, place.pid, place.agent, place.lease_id);
              }},
      channels, [self_address, token] {
        auto nodes = core::FetchNodes(self_address, token);
        if (!nodes.ok()) spdlog::warn("detached actors: {}", std::string(nodes.status().message()));
        return nodes.ok() ? *std::move(nodes) : std::vector<core::LeaseNode>{};
      },
      [channels, self_address](const std::string& group, const std::function<bool()>& stop) {
        return core::WaitForBundles(*channels, self_address, group, stop);
      });
  self_address_ = self_address;
  if (Recover()) return;  // started once the actors left unfinished are dealt with
  absl::MutexLock lock(&mu_);
  started_ = true;
}

void DetachedActors::SweepOrphanLeases(const std::set<std::string>& known) {
  auto nodes = core::FetchNodes(self_address_, options_.token);
  if (!nodes.ok()) return;
  for (const core::LeaseNode& node : *nodes) {
    grpc::ClientContext ctx;
    channels_->Authorize(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    core::ListLeasesReply leases;
    if (!channels_->Leases(node.agent_address)->ListLeases(&ctx, core::ListLeasesRequest(), &leases).ok()) continue;
    for (const core::LeaseView& lease : leases.leases()) {
      // Only the head holds leases without a holder pid: one it did not journal was being created when it died.
      if (lease.holder_pid() != 0 || known.contains(lease.lease_id())) continue;
      spdlog::info("detached actors: lease {} at {} (worker pid {}) was granted to an earlier head and is not any "
                   "actor's: returned, its worker stopped",
                   lease.lease_id(), node.agent_address, lease.worker_pid());
      grpc::ClientContext ret_ctx;
      channels_->Authorize(ret_ctx);
      ret_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      core::ReturnLeaseRequest request;
      request.set_lease_id(lease.lease_id());
      request.set_kill_worker(true);
      core::ReturnLeaseReply ignored;
      channels_->Leases(node.agent_address)->ReturnWorkerLease(&ret_ctx, request, &ignored).ok();
    }
  }
}

core::ActorManager* DetachedActors::Manager() {
  absl::MutexLock lock(&mu_);
  return started_ && !stopping_ ? manager_.get() : nullptr;
}

DetachedActors::~DetachedActors() { Stop(); }

grpc::Service* DetachedActors::service() { return service_.get(); }

void DetachedActors::OnState(const std::string& actor_id, const core::ActorInfo& info, const std::string& node_id,
                             int64_t pid, const std::string& agent, const std::string& lease_id) {
  ActorState state = ActorState::kPendingCreation;
  switch (info.state()) {
    case core::ActorInfo::ALIVE: state = ActorState::kAlive; break;
    case core::ActorInfo::RESTARTING: state = ActorState::kRestarting; break;
    case core::ActorInfo::DEAD: state = ActorState::kDead; break;
    default: return;  // PENDING_CREATION: registered so already
  }
  auto updated = directory_->Update({.actor = ActorId(core::Hex(actor_id)),
                                     .state = state,
                                     .node = NodeId(node_id),
                                     .pid = pid,
                                     .worker_address = info.address(),
                                     .restarts = info.restarts(),
                                     .death_cause = info.death_cause(),
                                     .lease_agent = state == ActorState::kAlive ? agent : "",
                                     .lease_id = state == ActorState::kAlive ? lease_id : ""});
  if (!updated.ok()) spdlog::warn("detached actor {}: {}", core::Hex(actor_id), std::string(updated.status().message()));
}

absl::StatusOr<Actor> DetachedActors::Create(const rpc::ActorView& view, const std::string& creation) {
  auto parsed = ParseActorCreation(creation);
  if (!parsed.ok()) return parsed.status();
  const std::string& hex = view.actor_id();
  if (hex.size() != 32 ||
      !std::all_of(hex.begin(), hex.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); })) {
    return absl::InvalidArgumentError(absl::StrCat("actor_id: 32 lowercase hex digits are required, got \"", hex, "\""));
  }
  const std::string binary_id = absl::HexStringToBytes(hex);
  core::TaskSpec& spec = *parsed->mutable_creation();
  spec.set_actor_id(binary_id);
  spec.set_actor_creation(true);
  spec.set_job_id(view.job_id());
  core::ActorManager* manager = Manager();
  if (manager == nullptr) return absl::UnavailableError("the head is starting or stopping; try again");
  spec.set_owner_address(owner_address_);
  spec.set_num_returns(1);
  Actor actor = ActorFromProto(view);
  actor.owner_address = owner_address_;
  actor.detached = true;
  actor.max_restarts = parsed->max_restarts();
  actor.max_task_retries = parsed->max_task_retries();
  actor.resources = {parsed->resources().begin(), parsed->resources().end()};
  actor.creation = absl::Base64Escape(parsed->SerializeAsString());
  auto registered = directory_->Register(std::move(actor));
  if (!registered.ok()) return registered.status();
  manager->Create(spec, OptionsOf(*parsed, view.job_id()));
  return registered;
}

bool DetachedActors::Recover() {
  std::vector<std::pair<core::ActorCreation, Actor>> later;
  std::set<std::string> known_leases;
  for (const Actor& a : directory_->List({})) {
    if (!a.detached || a.state == ActorState::kDead) continue;
    std::string bytes;
    auto parsed = absl::Base64Unescape(a.creation, &bytes) ? ParseActorCreation(bytes)
                                                            : absl::InvalidArgumentError("creation: not base64");
    if (!parsed.ok()) {
      directory_->Update({.actor = a.id, .state = ActorState::kDead, .restarts = a.restarts,
                          .death_cause = absl::StrCat("the head cannot create it again (", parsed.status().message(),
                                                      ")")})
          .IgnoreError();
      continue;
    }
    if (a.state == ActorState::kAlive && !a.lease_id.empty()) {
      known_leases.insert(a.lease_id);
      core::ActorInfo info;
      info.set_address(a.worker_address);
      info.set_restarts(a.restarts);
      info.set_incarnation(a.restarts);
      spdlog::info("detached actor {}: taken up again, ALIVE at {} (lease {} at {})", a.id.str(), a.worker_address,
                   a.lease_id, a.lease_agent);
      manager_->Adopt(parsed->creation(), OptionsOf(*parsed, a.job_id), std::move(info),
                      core::ActorPlace{.node_id = a.node.str(), .pid = a.pid, .agent = a.lease_agent,
                                       .lease_id = a.lease_id});
    } else {
      later.emplace_back(*std::move(parsed), a);
    }
  }
  if (later.empty()) return false;
  // Those not created yet (or restarting) are created once the agents are back; a worker an earlier head leased for
  // one of them, but did not journal, is given back first. New actors wait until then (Create: UNAVAILABLE).
  recover_thread_ = std::thread([this, later = std::move(later), known_leases = std::move(known_leases)] {
    {
      absl::MutexLock lock(&mu_);
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.recover_delay_ms);
      for (auto now = std::chrono::steady_clock::now(); !stopping_ && now < until;
           now = std::chrono::steady_clock::now()) {
        stop_cv_.WaitWithTimeout(&mu_, absl::FromChrono(until - now));
      }
      if (stopping_) return;
    }
    SweepOrphanLeases(known_leases);
    for (const auto& [creation, a] : later) {
      spdlog::info("detached actor {}: created again ({} when the head restarted)", a.id.str(),
                   ActorStateName(a.state));
      core::ActorInfo info;
      info.set_restarts(a.restarts);
      info.set_incarnation(a.restarts);
      manager_->Create(creation.creation(), OptionsOf(creation, a.job_id), std::move(info));
    }
    {
      absl::MutexLock lock(&mu_);
      started_ = true;
    }
    stop_cv_.SignalAll();  // resolves waiting for these actors look again
  });
  return true;
}

core::ActorInfo DetachedActors::Resolve(const std::string& actor_id, int64_t wait_ms, int32_t min_incarnation) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(wait_ms, 0));
  while (true) {
    const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                              std::chrono::steady_clock::now())
                             .count();
    core::ActorManager* manager = Manager();
    core::ActorInfo info;
    if (manager != nullptr) {
      info = manager->Resolve(actor_id, std::max<int64_t>(left, 0), min_incarnation);
    } else {
      info.set_state(core::ActorInfo::DEAD);
      info.set_death_cause("its owner does not know it (starting)");
    }
    if (info.state() != core::ActorInfo::DEAD || info.death_cause().rfind("its owner does not know it", 0) != 0) {
      return info;
    }
    // Not one the manager has: the directory knows how it ended, or that a restarted head creates it again soon.
    auto known = directory_->Get(ActorId(core::Hex(actor_id)));
    if (!known.ok() || !known->detached) {
      info.set_death_cause("the head does not own it (it is not a detached actor)");
      return info;
    }
    if (known->state == ActorState::kDead) {
      info.set_death_cause(known->death_cause);
      return info;
    }
    if (left <= 0) {
      info.set_state(core::ActorInfo::RESTARTING);
      info.clear_death_cause();
      return info;
    }
    // Not created again yet: wait for the head to finish taking its actors up (Recover's thread says so), then ask
    // the manager once more. Once started, the manager has every live one: the caller asks again.
    absl::MutexLock lock(&mu_);
    bool woke = false;
    if (!started_) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(left);
      for (auto now = std::chrono::steady_clock::now(); !(stopping_ || started_) && now < until;
           now = std::chrono::steady_clock::now()) {
        stop_cv_.WaitWithTimeout(&mu_, absl::FromChrono(until - now));
      }
      woke = stopping_ || started_;
    }
    if (!woke || stopping_) {
      info.set_state(core::ActorInfo::RESTARTING);
      info.clear_death_cause();
      return info;
    }
  }
}

absl::Status DetachedActors::Kill(const std::string& actor_id, bool no_restart) {
  core::ActorManager* manager = Manager();
  if (manager == nullptr) return absl::UnavailableError("the head is starting or stopping; try again");
  return manager->Kill(actor_id, no_restart);
}

void DetachedActors::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  stop_cv_.SignalAll();
  if (recover_thread_.joinable()) recover_thread_.join();
  if (manager_) manager_->Abandon();
}

}  // namespace torus::head
