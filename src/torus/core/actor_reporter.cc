#include "torus/core/actor_reporter.h"

#include "absl/strings/str_cat.h"

namespace torus::core {

ActorReporter::ActorReporter(Channels* channels, std::string head_address)
    : channels_(channels),
      head_address_(std::move(head_address)),
      stub_(rpc::HeadService::NewStub(channels_->Head(head_address_))),
      thread_([this] { Loop(); }) {}

ActorReporter::~ActorReporter() {
  Flush(std::chrono::milliseconds(500));  // CoreWorker::Shutdown flushed already
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
}

grpc::Status ActorReporter::Send(const Item& item, std::chrono::milliseconds deadline) {
  grpc::ClientContext ctx;
  channels_->Authorize(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  rpc::ActorView reply;
  if (const auto* r = std::get_if<rpc::RegisterActorRequest>(&item)) return stub_->RegisterActor(&ctx, *r, &reply);
  return stub_->UpdateActor(&ctx, std::get<rpc::UpdateActorRequest>(item), &reply);
}

absl::Status ActorReporter::Register(const rpc::ActorView& actor) {
  rpc::RegisterActorRequest request;
  *request.mutable_actor() = actor;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return absl::CancelledError("this process is stopping");
    if (actor.name().empty()) {
      queue_.push_back(std::move(request));
      cv_.SignalAll();
      return absl::OkStatus();
    }
  }
  Flush(std::chrono::seconds(10));
  const grpc::Status s = Send(request, std::chrono::seconds(10));
  if (s.ok()) return absl::OkStatus();
  switch (s.error_code()) {
    case grpc::StatusCode::ALREADY_EXISTS: return absl::AlreadyExistsError(s.error_message());
    case grpc::StatusCode::INVALID_ARGUMENT: return absl::InvalidArgumentError(s.error_message());
    default: break;
  }
  // The head may have taken it before the answer was lost: release the name.
  rpc::UpdateActorRequest dead;
  dead.set_actor_id(actor.actor_id());
  dead.set_state("DEAD");
  dead.set_death_cause("its registration failed");
  Report(std::move(dead));
  return absl::UnavailableError(absl::StrCat("the head at ", head_address_, " could not register the actor's name: ",
                                             s.error_message()));
}

void ActorReporter::Report(rpc::UpdateActorRequest update) {
  absl::MutexLock lock(&mu_);
  if (stop_) return;
  queue_.push_back(std::move(update));
  cv_.SignalAll();
}

void ActorReporter::Flush(std::chrono::milliseconds max_wait) {
  absl::MutexLock lock(&mu_);
  const auto deadline = std::chrono::steady_clock::now() + max_wait;
  while (!(queue_.empty() && !sending_)) {
    if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
  }
}

void ActorReporter::Loop() {
  mu_.Lock();
  while (true) {
    while (!(stop_ || !queue_.empty())) cv_.Wait(&mu_);
    if (stop_) break;
    Item item = queue_.front();
    sending_ = true;
    mu_.Unlock();
    // Retried while the head is away (a restart), until this process stops; anything else it says is final for
    // this item (an update of an actor the head does not know, say).
    std::chrono::milliseconds backoff(100);
    while (true) {
      const grpc::Status s = Send(item, std::chrono::seconds(5));
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE && s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
        break;
      }
      absl::MutexLock wait(&mu_);
      const auto deadline = std::chrono::steady_clock::now() + backoff;
      while (!stop_) {
        if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
      }
      if (stop_) break;
      backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
    }
    mu_.Lock();
    queue_.pop_front();
    sending_ = false;
    cv_.SignalAll();
  }
  mu_.Unlock();
}

}  // namespace torus::core
