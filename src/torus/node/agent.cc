#include "torus/node/agent.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"
#include "torus/rpc/auth.h"
#include "torus/rpc/convert.h"
#include "torus/node/node_service.h"
#include "torus/node/worker_leases.h"

namespace torus::node {
namespace {

std::chrono::system_clock::time_point DeadlineIn(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

int64_t SteadyMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t NowWallMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Workers the head says to drop get SIGTERM, and SIGKILL this long after.
constexpr int64_t kStopGraceMicros = 3'000'000;

}  // namespace

Agent::Agent(NodeIdentity identity, std::shared_ptr<grpc::Channel> channel, std::string token, BundleLedger* ledger,
             WorkerSupervisor* workers, int agent_port, int64_t head_grace_ms)
    : identity_(std::move(identity)),
      stub_(rpc::HeadService::NewStub(channel)),
      token_(std::move(token)),
      ledger_(ledger),
      workers_(workers),
      agent_port_(agent_port),
      head_grace_ms_(head_grace_ms) {}

void Agent::NotifyLedgerChanged() { Wake(); }

void Agent::AddAuth(grpc::ClientContext& ctx) const {
  ctx.AddMetadata(rpc::kAuthMetadataKey, absl::StrCat("Bearer ", token_));
}

bool Agent::SleepFor(int64_t ms) {
  absl::MutexLock lock(&mu_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!stopping_ && !woken_) {
    if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
  }
  woken_ = false;
  return !stopping_;
}

bool Agent::BackOff(int64_t ms) {
  absl::MutexLock lock(&mu_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!stopping_) {
    if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
  }
  woken_ = false;
  return !stopping_;
}

void Agent::Wake() {
  {
    absl::MutexLock lock(&mu_);
    woken_ = true;
  }
  cv_.SignalAll();
}

void Agent::Stop() {
  std::shared_ptr<HeartbeatStream> stream;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    stream = stream_;
  }
  if (stream) stream->Cancel();  // unblocks an Open or Send waiting on the head
  cv_.SignalAll();
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
  ledger_->Expire();
  // Leases and their workers are this agent's own, not the head's.
  for (const LedgerEntry& e : ledger_->Entries()) {
    if (!IsLeaseGroup(e.group_id)) ToProto(e, request.add_bundles());
  }
  for (const WorkerInfo& w : workers_->List()) {
    if (!IsLeaseOwner(w.owner)) ToProto(w, request.add_workers());
  }

  grpc::ClientContext ctx;
  AddAuth(ctx);
  ctx.set_deadline(DeadlineIn(2000));
  rpc::RegisterNodeReply reply;
  grpc::Status status = stub_->RegisterNode(&ctx, request, &reply);
  if (status.ok()) {
    incarnation_ = reply.incarnation();
    period_ms_ = std::clamp<int64_t>(reply.heartbeat_period_ms(), 10, 60'000);
    beats_.reset();
    if (reply.beat_port() != 0 && reply.beat_key().size() == rpc::kBeatKeyBytes &&
        identity_.node_id.size() <= rpc::kMaxBeatNodeIdBytes) {
      auto beats = BeatSender::Connect(ctx.peer(), static_cast<int>(reply.beat_port()), reply.beat_key(),
                                       identity_.node_id, incarnation_);
      if (beats.ok()) {
        beats_ = *std::move(beats);
      } else {
        spdlog::info("heartbeats go on the stream only: {}", beats.status().ToString());
      }
    }
    // What the head does not hold here: bundles released (their workers stopped), workers stopped.
    std::vector<std::string> stop(reply.stop_workers().begin(), reply.stop_workers().end());
    for (const rpc::BundleRef& ref : reply.release()) {
      BundleLedger::Released released = ledger_->Release(ref.group_id(), {ref.index()});
      stop.insert(stop.end(), released.workers.begin(), released.workers.end());
    }
    for (const std::string& w : stop) workers_->Stop(w, kStopGraceMicros).IgnoreError();
    if (!reply.release().empty() || !stop.empty()) {
      spdlog::warn("the head holds nothing here for {} bundles and {} workers: released and stopped",
                   reply.release_size(), stop.size());
    }
  }
  return status;
}

void Agent::GiveUpOnHead(int64_t away_ms) {
  BundleLedger::Released released = ledger_->ReleaseAll();
  int stopped = 0;
  for (const WorkerInfo& w : workers_->List()) {
    if (w.running && workers_->Stop(w.worker_id, kStopGraceMicros).ok()) ++stopped;
  }
  spdlog::warn("the head has been unreachable for {} s (grace {} s): released {} bundles and stopped {} workers",
               away_ms / 1000, head_grace_ms_ / 1000, released.bundles, stopped);
}

void Agent::HeadAnswered() {
  last_answer_ms_ = SteadyMillis();
  gave_up_ = false;
}

void Agent::HeadSilent() {
  const int64_t away = SteadyMillis() - last_answer_ms_;
  if (ever_registered_ && !gave_up_ && away > head_grace_ms_) {
    GiveUpOnHead(away);
    gave_up_ = true;
  }
}

void Agent::NoteError(const std::string& what, const grpc::Status& status) {
  std::string error = absl::StrCat(status.error_code(), ": ", status.error_message());
  // What a transport failure usually means when the two ends disagree on TLS.
  if (!tls_ && absl::StrContains(status.error_message(), "Socket closed")) {
    absl::StrAppend(&error, " — if the head serves TLS (one listening off loopback does; `torus start --head` says "
                            "\"(TLS)\"), start this agent with --tls-ca and --join-token-file");
  } else if (tls_ && absl::StrContains(status.error_message(), "wrong version number")) {
    absl::StrAppend(&error, " — the head serves plaintext; start this agent without --tls-ca");
  }
  if (error != last_error_) spdlog::warn("{} ({}); will keep trying", what, error);
  last_error_ = error;
}

rpc::HeartbeatRequest Agent::NextHeartbeat(bool with_availability) {
  ledger_->Expire();
  rpc::HeartbeatRequest request;
  request.set_node_id(identity_.node_id);
  request.set_incarnation(incarnation_);
  const uint64_t ledger_version = ledger_->Version();
  if (with_availability || ledger_version != reported_ledger_version_) {
    request.set_has_resources_available(true);
    rpc::ToProto(ledger_->Available(), request.mutable_resources_available());
    // What leases hold, so that the head places its groups around them.
    ResourceSet leased;
    rpc::LeaseHoldings* holdings = request.mutable_leased();
    for (const LedgerEntry& e : ledger_->Entries()) {
      if (!IsLeaseGroup(e.group_id)) continue;
      leased.Add(HeldNow(e));  // less the CPU of blocked workers, which counts as free
      for (int chip : e.bundle.chips) holdings->add_chips(chip);
      for (int gpu : e.bundle.gpus) holdings->add_gpus(gpu);
    }
    rpc::ToProto(leased, holdings->mutable_resources());
    reported_ledger_version_ = ledger_version;
  }
  return request;
}

Agent::Heartbeats Agent::StreamHeartbeats() {
  int64_t backoff_ms = 100;
  while (true) {
    auto stream = std::make_shared<HeartbeatStream>(stub_.get(), absl::StrCat("Bearer ", token_), [this] { Wake(); });
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return Heartbeats::kStopping;
      stream_ = stream;
    }
    std::optional<rpc::BeatAction> refusal;  // a datagram's answer: REREGISTER or REFUSED
    if (stream->Open()) {
      HeadAnswered();
      backoff_ms = 100;
      if (!last_error_.empty()) spdlog::info("head reachable again");
      last_error_.clear();
      // The first heartbeat of a stream carries the availability: what an earlier stream sent may not have arrived.
      // A heartbeat that reports nothing new goes as a datagram when the head answered the latest one; otherwise
      // on the stream, with a datagram beside it to learn whether they arrive again.
      bool first = true;
      while (true) {
        rpc::HeartbeatRequest heartbeat = NextHeartbeat(first);
        const bool news = first || heartbeat.has_resources_available();
        const bool answered = beats_ != nullptr && beats_->LatestAnswered();
        if ((news || !answered) && !stream->Send(heartbeat)) break;
        // (Not beside a stream's first beat: the head takes datagrams only once it has read from the stream.)
        if (beats_ != nullptr && !first && !(news && answered)) beats_->Send();
        first = false;
        if (!SleepFor(period_ms_)) break;
        if (stream->ended()) break;
        if (beats_ != nullptr && (refusal = beats_->Poll())) break;
        HeadAnswered();  // the stream is up: gRPC keepalive would have ended it otherwise
      }
    }
    grpc::Status end = stream->Close();
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      stream_.reset();
      stopping = stopping_;
    }
    if (stopping) return Heartbeats::kStopping;
    if (refusal == rpc::BeatAction::kRefused) {
      // Revoked: the registration says so, and ends the agent.
      spdlog::warn("heartbeat refused (answer to a heartbeat datagram)");
      return Heartbeats::kReregister;
    }
    if (stream->reregister() || refusal == rpc::BeatAction::kReregister) {
      // The head restarted, or declared this node dead: it learns what this host holds from the registration and
      // says what to drop.
      spdlog::warn("head does not know incarnation {}{}; registering again with what this host holds",
                   incarnation_.load(), refusal ? " (answer to a heartbeat datagram)" : "");
      return Heartbeats::kReregister;
    }
    if (end.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
      // Revoked, or refused this node's certificate: the registration says which, and ends the agent.
      spdlog::warn("heartbeat refused: {}", end.error_message());
      return Heartbeats::kReregister;
    }
    if (end.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      spdlog::info("the head takes heartbeats one call at a time (no streamed heartbeats)");
      return UnaryHeartbeats();
    }
    HeadSilent();
    NoteError("heartbeat stream ended", end);
    if (!BackOff(backoff_ms)) return Heartbeats::kStopping;
    backoff_ms = std::min<int64_t>(backoff_ms * 2, 1000);
  }
}

Agent::Heartbeats Agent::UnaryHeartbeats() {
  bool resend = false;  // an availability not acknowledged goes again with the next heartbeat
  while (SleepFor(period_ms_)) {
    rpc::HeartbeatRequest request = NextHeartbeat(resend);
    grpc::ClientContext ctx;
    AddAuth(ctx);
    ctx.set_deadline(DeadlineIn(std::max<int64_t>(1000, 2 * period_ms_)));
    rpc::HeartbeatReply reply;
    grpc::Status hb = stub_->Heartbeat(&ctx, request, &reply);
    if (!hb.ok()) {
      resend = resend || request.has_resources_available();
      HeadSilent();
      NoteError("heartbeat failed", hb);
      continue;
    }
    resend = false;
    HeadAnswered();
    if (!last_error_.empty()) spdlog::info("head reachable again");
    last_error_.clear();
    if (reply.action() == rpc::HeartbeatReply::REREGISTER) {
      spdlog::warn("head does not know incarnation {}; registering again with what this host holds",
                   incarnation_.load());
      return Heartbeats::kReregister;
    }
  }
  return Heartbeats::kStopping;
}

AgentExit Agent::Run() {
  int64_t backoff_ms = 100;
  last_answer_ms_ = SteadyMillis();
  while (true) {
    // Registration, retried with backoff until it works or we are stopped.
    grpc::Status status = Register();
    if (!status.ok()) {
      if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED && !ever_registered_) {
        spdlog::error("head refused registration: {}", status.error_message());
        return AgentExit::kUnauthenticated;
      }
      if (status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
        spdlog::error("head refused this node: {}", status.error_message());
        return AgentExit::kRefused;
      }
      NoteError("cannot register with the head", status);
      HeadSilent();
      if (!BackOff(backoff_ms)) break;
      backoff_ms = std::min<int64_t>(backoff_ms * 2, 1000);
      continue;
    }
    HeadAnswered();
    ever_registered_ = true;
    backoff_ms = 100;
    last_error_.clear();
    spdlog::info("registered as node {} (incarnation {}, heartbeat every {} ms)", identity_.node_id, incarnation_.load(),
                 period_ms_);
    // Heartbeats until the head asks us to register again.
    if (StreamHeartbeats() == Heartbeats::kStopping) break;
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
