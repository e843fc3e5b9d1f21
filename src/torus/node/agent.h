// Agent: keeps one host registered with the head. Registers, heartbeats at the period the head asks for,
// re-registers when the head says it does not know this incarnation (head restart, or marked dead while alive),
// and keeps retrying with backoff while the head is unreachable. Unregisters on Stop.
//
// Thread-safety: Run() on one thread; Stop(), NotifyLedgerChanged() and incarnation() from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "grpcpp/grpcpp.h"
#include "torus/head.grpc.pb.h"
#include "torus/node/bundle_ledger.h"
#include "torus/node/node_identity.h"

namespace torus::node {

enum class AgentExit { kStopped, kUnauthenticated };

class Agent {
 public:
  // `ledger` (owned by the caller) is what this host has promised; its availability is reported to the head.
  // `agent_port` is where this host's NodeService listens.
  Agent(NodeIdentity identity, std::shared_ptr<grpc::Channel> channel, std::string token, BundleLedger* ledger,
        int agent_port);

  // Serves until Stop(); returns kUnauthenticated if the head refuses the token on the very first attempt.
  AgentExit Run();
  void Stop();
  // Called when the head has forgotten this incarnation (after the ledger is cleared), e.g. to stop its workers.
  void SetOnForgotten(std::function<void()> callback) { on_forgotten_ = std::move(callback); }
  // Wakes the heartbeat loop so that a ledger change reaches the head now rather than at the next period.
  void NotifyLedgerChanged();
  // The incarnation the head gave this agent at its latest registration; 0 before the first. Thread-safe.
  uint64_t incarnation() const { return incarnation_.load(); }

 private:
  // One registration attempt; OK sets incarnation_ and period_ms_.
  grpc::Status Register();
  // Sleeps up to `ms` or until Stop(); returns false when stopping.
  bool SleepFor(int64_t ms);
  void AddAuth(grpc::ClientContext& ctx) const;

  const NodeIdentity identity_;
  std::unique_ptr<rpc::HeadService::Stub> stub_;
  const std::string token_;
  BundleLedger* ledger_;
  const int agent_port_;
  std::function<void()> on_forgotten_;
  std::atomic<uint64_t> incarnation_{0};  // written by Run(), read anywhere
  uint64_t reported_ledger_version_ = 0;
  int64_t period_ms_ = 500;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;        // guarded by mu_
  bool ledger_changed_ = false;  // guarded by mu_
};

}  // namespace torus::node
