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
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
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
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return absl::CancelledError("this process is stopping");
    if (actor.name().empty()) {
      queue_.push_back(std::move(request));
      cv_.notify_all();
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
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return;
  queue_.push_back(std::move(update));
  cv_.notify_all();
}

void ActorReporter::Flush(std::chrono::milliseconds max_wait) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, max_wait, [this] { return queue_.empty() && !sending_; });
}

void ActorReporter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Item item = queue_.front();
    sending_ = true;
    lock.unlock();
    // Retried while the head is away (a restart), until this process stops; anything else it says is final for
    // this item (an update of an actor the head does not know, say).
    std::chrono::milliseconds backoff(100);
    while (true) {
      const grpc::Status s = Send(item, std::chrono::seconds(5));
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE && s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
        break;
      }
      std::unique_lock<std::mutex> wait(mu_);
      if (cv_.wait_for(wait, backoff, [this] { return stop_; })) break;
      backoff = std::min(backoff * 2, std::chrono::milliseconds(2000));
    }
    lock.lock();
    queue_.pop_front();
    sending_ = false;
    cv_.notify_all();
  }
}

}  // namespace torus::core
