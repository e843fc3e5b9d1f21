#include "torus/head/owners/owner_monitor.h"

#include <memory>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"
#include "torus/core.grpc.pb.h"
#include "torus/tls/credentials.h"

namespace torus::head {

int OwnerMonitor::CheckOnce() {
  int dead = 0;
  std::map<std::string, int> seen;
  for (const std::string& owner : owners_()) {
    const absl::Status s = probe_(owner);
    int failed = s.ok() ? 0 : failures_[owner] + 1;
    if (failed >= failures_needed_) {
      const int n = gone_(owner, absl::StrCat("its owner ", owner, " is gone (", s.message(), ")"));
      spdlog::info("owner {} is gone ({}); {} of its actors and tasks ended", owner, std::string(s.message()), n);
      dead += n;
      failed = 0;
    }
    if (failed > 0) seen[owner] = failed;
  }
  failures_ = std::move(seen);  // owners with no live actors left are forgotten
  return dead;
}

void OwnerMonitor::Start() {
  thread_ = std::thread([this] {
    mu_.Lock();
    while (!stop_) {
      // Waits up to a period for Stop (spurious wakeups wait on).
      const auto until = std::chrono::steady_clock::now() + period_;
      for (auto now = std::chrono::steady_clock::now(); !stop_ && now < until; now = std::chrono::steady_clock::now()) {
        cv_.WaitWithTimeout(&mu_, absl::FromChrono(until - now));
      }
      if (stop_) break;
      mu_.Unlock();
      CheckOnce();
      mu_.Lock();
    }
    mu_.Unlock();
  });
}

void OwnerMonitor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  if (thread_.joinable()) thread_.join();
}

OwnerMonitor::Probe GrpcOwnerProbe(std::string token, std::chrono::milliseconds deadline,
                                   std::shared_ptr<grpc::ChannelCredentials> credentials) {
  const bool tls = credentials != nullptr;
  if (!credentials) credentials = grpc::InsecureChannelCredentials();
  // One channel per owner, reused between rounds (owners are few: drivers and the workers that create actors); the
  // cache starts over once it holds kMaxChannels, so owners long gone do not accumulate.
  constexpr size_t kMaxChannels = 1024;
  auto channels = std::make_shared<std::map<std::string, std::shared_ptr<grpc::Channel>>>();
  return [token = std::move(token), deadline, channels, credentials, tls](const std::string& owner) -> absl::Status {
    if (channels->size() >= kMaxChannels && !channels->contains(owner)) channels->clear();
    auto& channel = (*channels)[owner];
    if (!channel) {
      grpc::ChannelArguments args;
      if (tls) tls::NameMembersByIdentity(&args);  // owners are dialled by address; their certificates name none
      channel = grpc::CreateCustomChannel(owner, credentials, args);
    }
    auto stub = core::CoreWorkerService::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    core::ResolveActorRequest request;
    core::ActorInfo reply;
    const grpc::Status s = stub->ResolveActor(&ctx, request, &reply);
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return absl::UnavailableError(s.error_message().empty() ? "no answer" : s.error_message());
    }
    return absl::OkStatus();
  };
}

}  // namespace torus::head
