#include "torus/core/actor_reporter.h"

#include "absl/strings/str_cat.h"

namespace torus::core {

ActorReporter::ActorReporter(Channels* channels, std::string head_address, std::chrono::milliseconds retry_for)
    : channels_(channels),
      head_address_(std::move(head_address)),
      retry_for_(retry_for),
      stub_(rpc::HeadService::NewStub(channels_->Get(head_address_))),
      thread_([this] { Loop(); }) {}

ActorReporter::~ActorReporter() {
  Flush(std::chrono::seconds(2));
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
    // Changes queued before (of other actors) go first only as far as order matters: per actor. A registration
    // is sent at once.
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return absl::CancelledError("this process is stopping");
  }
  const grpc::Status s = Send(request, std::chrono::seconds(10));
  if (s.ok()) return absl::OkStatus();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE && actor.name().empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(request));
    cv_.notify_all();
    return absl::OkStatus();
  }
  const std::string message = absl::StrCat("the head refused the actor: ", s.error_message());
  switch (s.error_code()) {
    case grpc::StatusCode::ALREADY_EXISTS: return absl::AlreadyExistsError(s.error_message());
    case grpc::StatusCode::INVALID_ARGUMENT: return absl::InvalidArgumentError(s.error_message());
    case grpc::StatusCode::UNAVAILABLE:
      return absl::UnavailableError(absl::StrCat("the head at ", head_address_, " cannot be reached to register the "
                                                 "actor's name: ", s.error_message()));
    default: return absl::InternalError(message);
  }
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
    // Retried while the head is away (a restart); anything else it says is final for this item.
    const auto give_up = std::chrono::steady_clock::now() + retry_for_;
    std::chrono::milliseconds backoff(100);
    while (true) {
      const grpc::Status s = Send(item, std::chrono::seconds(5));
      if (s.error_code() != grpc::StatusCode::UNAVAILABLE && s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
        break;
      }
      if (std::chrono::steady_clock::now() + backoff > give_up) break;
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
