// Agent: keeps one host registered with the head. Registers — with every bundle of its ledger and every worker it
// runs or remembers, so that the head reconciles rather than forgets — heartbeats at the period the head asks for,
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
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "grpcpp/grpcpp.h"
#include "torus/head.grpc.pb.h"
#include "torus/node/bundle_ledger.h"
#include "torus/node/node_identity.h"
#include "torus/node/worker_supervisor.h"

namespace torus::node {

enum class AgentExit { kStopped, kUnauthenticated };

class Agent {
 public:
  // `ledger` (owned by the caller) is what this host has promised; its availability is reported to the head.
  // `workers` (owned by the caller) are its workers. `agent_port` is where this host's NodeService listens.
  Agent(NodeIdentity identity, std::shared_ptr<grpc::Channel> channel, std::string token, BundleLedger* ledger,
        WorkerSupervisor* workers, int agent_port, int64_t head_grace_ms = 300'000);

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
  // Sleeps up to `ms` or until Stop(); returns false when stopping.
  bool SleepFor(int64_t ms);
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
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;        // guarded by mu_
  bool ledger_changed_ = false;  // guarded by mu_
};

}  // namespace torus::node
