// Agent: keeps one host registered with the head. Registers — with every bundle of its ledger and every worker it
// runs or remembers, so that the head reconciles rather than forgets — heartbeats at the period the head asks for
// on one stream (HeadService.HeartbeatStream, reopened with backoff when it breaks; the channel's keepalive pings
// notice a head that vanished without closing it) — a beat that reports nothing new goes instead as a signed UDP
// datagram (beat_sender.h) whenever the head answered the latest one —
// registers again when the head says it does not know this incarnation (the head restarted, or declared this node
// dead), and keeps retrying with backoff while the head is unreachable. The head's answer to a registration names
// the bundles to release and the workers to stop (those it does not hold here); everything else keeps running.
//
// While the head is unreachable, workers go on for `head_grace_ms`; after that the agent assumes the head gave up on
// it: it releases every bundle and stops every worker, and registers empty-handed when the head is back.
// Unregisters on Stop.
//
// Thread-safety: Run() on one thread; Stop(), NotifyLedgerChanged() and incarnation() from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "torus/head.grpc.pb.h"
#include "torus/node/beat_sender.h"
#include "torus/node/bundle_ledger.h"
#include "torus/node/heartbeat_stream.h"
#include "torus/node/node_identity.h"
#include "torus/node/worker_supervisor.h"

namespace torus::node {

// kRefused: the head refused this node (PERMISSION_DENIED: revoked, or its certificate names another node).
enum class AgentExit { kStopped, kUnauthenticated, kRefused };

class Agent {
 public:
  // `ledger` (owned by the caller) is what this host has promised; its availability is reported to the head.
  // `workers` (owned by the caller) are its workers. `agent_port` is where this host's NodeService listens.
  Agent(NodeIdentity identity, std::shared_ptr<grpc::Channel> channel, std::string token, BundleLedger* ledger,
        WorkerSupervisor* workers, int agent_port, int64_t head_grace_ms = 300'000);

  // Whether this agent talks TLS to the head (--tls-ca): for what a failed connection is said to mean.
  void set_tls(bool tls) { tls_ = tls; }

  // Serves until Stop(); returns kUnauthenticated if the head refuses the token on the very first attempt.
  AgentExit Run();
  void Stop();
  // Wakes the heartbeat loop so that a ledger change reaches the head now rather than at the next period.
  void NotifyLedgerChanged();
  // The incarnation the head gave this agent at its latest registration; 0 before the first. Thread-safe.
  uint64_t incarnation() const { return incarnation_.load(); }

 private:
  // One registration attempt; OK sets incarnation_ and period_ms_, and applies what the head says to drop.
  grpc::Status Register();
  // Releases every bundle and stops every worker: the head has been away longer than the grace.
  void GiveUpOnHead(int64_t away_ms);
  enum class Heartbeats { kReregister, kStopping };
  // Heartbeats on streams (a new one after each break, with backoff) until the head asks for a registration or
  // Stop(); falls back to UnaryHeartbeats with a head that has no streamed heartbeats.
  Heartbeats StreamHeartbeats();
  // One call per heartbeat, each acknowledged.
  Heartbeats UnaryHeartbeats();
  // The next heartbeat; carries the ledger's availability when asked to or when it changed since the last one.
  rpc::HeartbeatRequest NextHeartbeat(bool with_availability);
  // The head answered (monotonic time of it kept) / did not (after the grace, GiveUpOnHead once).
  void HeadAnswered();
  void HeadSilent();
  // Logs `what` failed with `status`, once per distinct error.
  void NoteError(const std::string& what, const grpc::Status& status);
  // Sleeps up to `ms`, until Wake() or until Stop(); returns false when stopping.
  bool SleepFor(int64_t ms);
  // Sleeps `ms` between tries to reach the head: only Stop() ends it early (a broken stream's end, or a ledger
  // change, wakes SleepFor and would make the retries a busy loop while the head is down).
  bool BackOff(int64_t ms);
  void Wake();
  void AddAuth(grpc::ClientContext& ctx) const;

  const NodeIdentity identity_;
  std::unique_ptr<rpc::HeadService::Stub> stub_;
  const std::string token_;
  BundleLedger* ledger_;
  WorkerSupervisor* workers_;
  const int agent_port_;
  const int64_t head_grace_ms_;
  std::atomic<uint64_t> incarnation_{0};  // written by Run(), read anywhere
  uint64_t reported_ledger_version_ = 0;
  int64_t period_ms_ = 500;
  // Run()'s thread only:
  bool ever_registered_ = false;
  int64_t last_answer_ms_ = 0;  // when the head last answered (steady clock)
  bool gave_up_ = false;        // whether the grace ran out since
  bool tls_ = false;
  std::string last_error_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<HeartbeatStream> stream_ ABSL_GUARDED_BY(mu_);  // the open stream, for Stop() to cancel
  std::unique_ptr<BeatSender> beats_;        // heartbeat datagrams of the latest registration; null: stream only
};

}  // namespace torus::node
