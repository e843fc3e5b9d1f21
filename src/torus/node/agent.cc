#include "torus/node/agent.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/rpc/auth.h"
#include "torus/rpc/convert.h"

namespace torus::node {
namespace {

std::chrono::system_clock::time_point DeadlineIn(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

int64_t NowWallMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Agent::Agent(NodeIdentity identity, std::shared_ptr<grpc::Channel> channel, std::string token, BundleLedger* ledger,
             int agent_port)
    : identity_(std::move(identity)),
      stub_(rpc::HeadService::NewStub(channel)),
      token_(std::move(token)),
      ledger_(ledger),
      agent_port_(agent_port) {}

void Agent::NotifyLedgerChanged() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ledger_changed_ = true;
  }
  cv_.notify_all();
}

void Agent::AddAuth(grpc::ClientContext& ctx) const {
  ctx.AddMetadata(rpc::kAuthMetadataKey, absl::StrCat("Bearer ", token_));
}

bool Agent::SleepFor(int64_t ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return stopping_ || ledger_changed_; });
  ledger_changed_ = false;
  return !stopping_;
}

void Agent::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

grpc::Status Agent::Register() {
  rpc::RegisterNodeRequest request;
  rpc::NodeInfo* info = request.mutable_node();
  info->set_node_id(identity_.node_id);
  info->set_address(identity_.address);
  info->set_hostname(identity_.hostname);
  rpc::ToProto(identity_.resources, info->mutable_resources_total());
  rpc::ToProto(identity_.labels, info->mutable_labels());
  info->set_pid(getpid());
  static const int64_t start_ms = NowWallMillis();
  info->set_start_time_ms(start_ms);
  info->set_agent_port(agent_port_);
  reported_ledger_version_ = ledger_->Version();
  rpc::ToProto(ledger_->Available(), request.mutable_resources_available());

  grpc::ClientContext ctx;
  AddAuth(ctx);
  ctx.set_deadline(DeadlineIn(2000));
  rpc::RegisterNodeReply reply;
  grpc::Status status = stub_->RegisterNode(&ctx, request, &reply);
  if (status.ok()) {
    incarnation_ = reply.incarnation();
    period_ms_ = std::clamp<int64_t>(reply.heartbeat_period_ms(), 10, 60'000);
  }
  return status;
}

AgentExit Agent::Run() {
  bool ever_registered = false;
  int64_t backoff_ms = 100;
  std::string last_error;
  while (true) {
    // Registration, retried with backoff until it works or we are stopped.
    grpc::Status status = Register();
    if (!status.ok()) {
      if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED && !ever_registered) {
        spdlog::error("head refused registration: {}", status.error_message());
        return AgentExit::kUnauthenticated;
      }
      std::string error = absl::StrCat(status.error_code(), ": ", status.error_message());
      if (error != last_error) spdlog::warn("cannot register with the head ({}); retrying", error);
      last_error = error;
      if (!SleepFor(backoff_ms)) break;
      backoff_ms = std::min<int64_t>(backoff_ms * 2, 1000);
      continue;
    }
    ever_registered = true;
    backoff_ms = 100;
    last_error.clear();
    spdlog::info("registered as node {} (incarnation {}, heartbeat every {} ms)", identity_.node_id, incarnation_.load(),
                 period_ms_);

    // Heartbeats until the head asks us to register again.
    bool reregister = false;
    while (!reregister) {
      if (!SleepFor(period_ms_)) break;
      ledger_->Expire();
      rpc::HeartbeatRequest request;
      request.set_node_id(identity_.node_id);
      request.set_incarnation(incarnation_);
      const uint64_t ledger_version = ledger_->Version();
      if (ledger_version != reported_ledger_version_) {
        request.set_has_resources_available(true);
        rpc::ToProto(ledger_->Available(), request.mutable_resources_available());
      }
      grpc::ClientContext ctx;
      AddAuth(ctx);
      ctx.set_deadline(DeadlineIn(std::max<int64_t>(1000, 2 * period_ms_)));
      rpc::HeartbeatReply reply;
      grpc::Status hb = stub_->Heartbeat(&ctx, request, &reply);
      if (hb.ok()) {
        if (request.has_resources_available()) reported_ledger_version_ = ledger_version;
        if (!last_error.empty()) spdlog::info("head reachable again");
        last_error.clear();
        if (reply.action() == rpc::HeartbeatReply::REREGISTER) {
          spdlog::warn("head does not know incarnation {}; registering again", incarnation_.load());
          // The head gave up on this incarnation (declared it dead, or restarted): what it placed here is
          // forgotten and may already run elsewhere, so this host drops it before joining again.
          int dropped = ledger_->Clear();
          if (dropped > 0) spdlog::warn("dropped {} bundles the head no longer tracks", dropped);
          if (on_forgotten_) on_forgotten_();
          reregister = true;
        }
        continue;
      }
      std::string error = absl::StrCat(hb.error_code(), ": ", hb.error_message());
      if (error != last_error) spdlog::warn("heartbeat failed ({}); will keep trying", error);
      last_error = error;
    }
    if (!reregister) break;  // stopping
  }

  // Graceful exit: tell the head at once rather than letting it time out.
  if (incarnation_ != 0) {
    rpc::UnregisterNodeRequest request;
    request.set_node_id(identity_.node_id);
    request.set_incarnation(incarnation_);
    request.set_reason("agent stopped");
    grpc::ClientContext ctx;
    AddAuth(ctx);
    ctx.set_deadline(DeadlineIn(1000));
    rpc::UnregisterNodeReply reply;
    grpc::Status s = stub_->UnregisterNode(&ctx, request, &reply);
    if (!s.ok()) spdlog::warn("unregister failed: {}", s.error_message());
  }
  return AgentExit::kStopped;
}

}  // namespace torus::node
