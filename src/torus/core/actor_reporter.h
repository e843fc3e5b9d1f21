// ActorReporter: tells the head's actor directory about the actors this process owns. Registrations and state
// changes are queued and sent in order by a thread of the reporter's own, each retried for as long as the head cannot
// be reached (a restart), so an actor's life never waits for the head. A named actor's registration is the
// exception: the creator gets the head's answer (a name taken in its namespace is refused), after everything queued
// before it has been sent (so that the death of the name's previous holder is known to the head first).
//
// Thread-safety: thread-safe.
#pragma once

#include <deque>
#include <string>
#include <thread>
#include <variant>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "torus/core/channels.h"
#include "torus/head.grpc.pb.h"

namespace torus::core {

class ActorReporter {
 public:
  ActorReporter(Channels* channels, std::string head_address);
  ~ActorReporter();  // Flush(0.5 s), then stops

  // Registers a new actor: an unnamed one is queued (OK at once); a named one is sent now. AlreadyExists (the head's
  // message) for a name taken in its namespace; InvalidArgument for a malformed one; Unavailable when the head
  // cannot be reached (a DEAD for the actor is then queued, in case the head took the registration).
  absl::Status Register(const rpc::ActorView& actor);
  // Queues a state change (ALIVE, RESTARTING, DEAD) for the head.
  void Report(rpc::UpdateActorRequest update);
  // Waits up to `max_wait` for everything queued to be sent.
  void Flush(std::chrono::milliseconds max_wait);

 private:
  using Item = std::variant<rpc::RegisterActorRequest, rpc::UpdateActorRequest>;
  // One call; its gRPC status.
  grpc::Status Send(const Item& item, std::chrono::milliseconds deadline);
  void Loop();

  Channels* channels_;
  const std::string head_address_;
  std::unique_ptr<rpc::HeadService::Stub> stub_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool sending_ ABSL_GUARDED_BY(mu_) = false;  // the front item is being sent
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace torus::core
