#include "torus/head/nodes/membership.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"
#include "torus/common/labels.h"
#include "torus/common/status.h"
#include "torus/head/placement/group_ops.h"

namespace torus::head {
namespace {

bool IsIdChar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-';
}

absl::Status ValidateResources(const std::string& field, const ResourceSet& resources) {
  for (const auto& [name, amount] : resources.amounts()) {
    absl::Status s = ValidateResourceName(name);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(field, ": ", s.message()));
    if (amount < 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": \"", name, "\" must not be negative"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateNodeId(std::string_view id) {
  if (id.empty() || id.size() > 64 || !std::all_of(id.begin(), id.end(), IsIdChar)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "node_id \"", std::string(id.substr(0, 80)), "\" is invalid; use 1-64 letters, digits, '_' or '-'"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRegistration(const NodeRegistration& r, const ResourceSet& available) {
  TORUS_RETURN_IF_ERROR(ValidateNodeId(r.node_id));
  if (r.address.empty() || r.address.size() > 255) {
    return absl::InvalidArgumentError("address must be 1-255 characters (an IP or host name)");
  }
  if (r.hostname.size() > 255) return absl::InvalidArgumentError("hostname must be at most 255 characters");
  for (const auto& [key, value] : r.labels) {
    TORUS_RETURN_IF_ERROR(ValidateLabelKey(key));
    TORUS_RETURN_IF_ERROR(ValidateLabelValue(key, value));
  }
  TORUS_RETURN_IF_ERROR(ValidateResources("resources_total", r.total));
  TORUS_RETURN_IF_ERROR(ValidateResources("resources_available", available));
  if (r.agent_port < 0 || r.agent_port > 65535) return absl::InvalidArgumentError("agent_port must be 0..65535");
  return absl::OkStatus();
}

Membership::Membership(StateStore* store, Liveness* liveness, PlacementScheduler* scheduler, const Clock* clock,
                       int64_t node_timeout_micros)
    : store_(store),
      liveness_(liveness),
      scheduler_(scheduler),
      clock_(clock),
      node_timeout_micros_(node_timeout_micros) {}

void Membership::RestoreLiveness(int64_t allowance_micros) {
  auto alive = store_->Read([](const ClusterState& s) {
    std::vector<std::pair<NodeId, uint64_t>> out;
    for (const auto& [id, n] : s.nodes()) {
      if (n.alive()) out.emplace_back(id, n.incarnation);
    }
    return out;
  });
  for (const auto& [id, incarnation] : alive) liveness_->Restored(id, incarnation, allowance_micros);
}

void Membership::Die(Txn& txn, const NodeId& node, uint64_t incarnation, const std::string& reason, HostLoss loss,
                     int64_t last_seen_ms, std::vector<HeldBundle>& release) {
  const int64_t wall = clock_->WallMillis();
  if (!txn.Apply(NodeDied{node, incarnation, reason, wall}).ok()) return;
  for (HeldBundle& b : LoseBundles(txn, node, [](const HeldBundle&) { return true; }, /*node_died=*/true, wall)) {
    release.push_back(std::move(b));
  }
  std::vector<WorkerId> lost;
  for (const Worker* w : txn.state().LiveWorkersOn(node)) lost.push_back(w->id);
  for (const WorkerId& id : lost) {
    WorkerExit exit{.lost = true,
                    .reason = absl::StrCat("node ", node.str(), " died: ", reason),
                    .wall_ms = wall,
                    .host_loss = loss,
                    .host_last_seen_ms = last_seen_ms > 0 ? last_seen_ms : wall};
    txn.Apply(WorkerExited{id, exit}).IgnoreError();
  }
  spdlog::warn("node {} is DEAD: {}", node.str(), reason);
}

absl::StatusOr<Registered> Membership::Register(AgentReport report) {
  TORUS_RETURN_IF_ERROR(ValidateRegistration(report.info, report.available));
  const NodeId node(report.info.node_id);
  if (store_->Read([&node](const ClusterState& s) { return s.IsRevoked(node); })) {
    return absl::PermissionDeniedError(
        absl::StrCat("node ", node.str(), " is revoked (torus node mark-dead --revoke); the host may join again "
                     "under another --node-id"));
  }
  const int64_t wall = clock_->WallMillis();
  std::vector<HeldBundle> release;
  Registered result = store_->Update([&](Txn& txn) {
    Registered out;
    const Node* known = txn.state().FindNode(node);
    if (known != nullptr && known->alive() &&
        (known->info.pid != report.info.pid || known->info.start_time_ms != report.info.start_time_ms)) {
      // Another agent process: whatever the head placed on the old one is gone with it.
      Die(txn, node, known->incarnation, "re-registered (agent restarted)", HostLoss::kAgentGone, 0, release);
    }
    out.incarnation = std::max<uint64_t>(txn.state().last_incarnation() + 1, static_cast<uint64_t>(wall) * 1000);
    txn.Apply(NodeRegistered{report.info, out.incarnation, wall}).IgnoreError();

    // Bundles: keep those a live group holds here from that very attempt.
    std::map<std::pair<std::string, int>, const HeldBundle*> expected;
    for (const Group* g : txn.state().GroupsOn(node)) {
      for (const HeldBundle& b : g->bundles) {
        if (!b.lost && b.node == node) expected[{b.ledger_group, b.ledger_index}] = &b;
      }
    }
    std::set<std::pair<std::string, int>> held;
    for (const ReportedBundle& b : report.bundles) {
      auto it = expected.find({b.ledger_group, b.index});
      const bool ours = it != expected.end() && it->second->attempt == b.attempt;
      if (ours && b.committed) {
        held.insert({b.ledger_group, b.index});
      } else if (!ours && (b.committed || (b.attempt >> 32) != txn.state().epoch())) {
        // Not ours: a leftover of a head that died mid-reservation, or of a group since removed. A prepare of this
        // head's own epoch is a reservation in flight and is left to finish (or expire).
        out.release.emplace_back(b.ledger_group, b.index);
      }
    }
    std::set<std::pair<std::string, int>> missing;
    for (const auto& [key, b] : expected) {
      if (!held.contains(key)) missing.insert(key);
    }
    if (!missing.empty()) {
      for (HeldBundle& b : LoseBundles(
               txn, node,
               [&](const HeldBundle& b) { return missing.contains({b.ledger_group, b.ledger_index}); },
               /*node_died=*/false, wall)) {
        release.push_back(std::move(b));
      }
    }

    // Workers: adopt those a workload runs here, apply exits that happened while the head was away, stop the rest.
    std::set<WorkerId> reported;
    for (const ReportedWorker& w : report.workers) {
      reported.insert(w.id);
      const Worker* ours = txn.state().FindWorker(w.id);
      const bool live_here = ours != nullptr && ours->node == node && ours->phase != WorkerPhase::kExited;
      if (!live_here) {
        if (w.running) out.stop.push_back(w.id);
        continue;
      }
      if (ours->phase == WorkerPhase::kStarting && w.pid > 0) {
        txn.Apply(WorkerStarted{w.id, w.pid, wall}).IgnoreError();
      }
      if (!w.running) {
        WorkerExit exit{.exit_code = w.exit_code,
                        .signal = w.signal,
                        .wall_ms = w.end_time_ms > 0 ? w.end_time_ms : wall,
                        .stopped = w.stopped};
        txn.Apply(WorkerExited{w.id, exit}).IgnoreError();
      }
    }
    std::vector<WorkerId> vanished;
    for (const Worker* w : txn.state().LiveWorkersOn(node)) {
      // One still starting whose start the agent never had (its head stopped after recording it, or the start is
      // still on its way) stays starting: the workloads' driver sends its launch again.
      if (w->phase == WorkerPhase::kStarting && w->launch) continue;
      if (!reported.contains(w->id)) vanished.push_back(w->id);
    }
    for (const WorkerId& id : vanished) {
      WorkerExit exit{.lost = true,
                      .reason = absl::StrCat("not found on node ", node.str(), " when its agent registered again"),
                      .wall_ms = wall,
                      .host_loss = HostLoss::kAgentGone,
                      .host_last_seen_ms = wall};
      txn.Apply(WorkerExited{id, exit}).IgnoreError();
    }
    // Confirmed before the records are published: whoever reacts to NodeRegistered may already place and start
    // work on the node.
    liveness_->Registered(node, out.incarnation, report.available);
    return out;
  });
  scheduler_->Release(std::move(release));
  spdlog::info("node {} registered from {} (incarnation {}, {} labels){}", node.str(), report.info.address,
               result.incarnation, report.info.labels.size(),
               result.release.empty() && result.stop.empty()
                   ? ""
                   : absl::StrCat("; told to release ", result.release.size(), " bundles and stop ",
                                  result.stop.size(), " workers it holds for nothing"));
  return result;
}

absl::Status Membership::Unregister(const NodeId& node, uint64_t incarnation, const std::string& reason) {
  std::vector<HeldBundle> release;
  absl::Status status = store_->Update([&](Txn& txn) {
    const Node* n = txn.state().FindNode(node);
    if (n == nullptr) return absl::NotFoundError(absl::StrCat("node ", node.str(), " is not registered"));
    if (n->incarnation != incarnation || !n->alive()) return absl::OkStatus();
    Die(txn, node, incarnation, reason.empty() ? "unregistered" : absl::StrCat("unregistered: ", reason),
        HostLoss::kAgentGone, 0, release);
    return absl::OkStatus();
  });
  if (status.ok()) liveness_->Forget(node, incarnation);
  scheduler_->Release(std::move(release));
  return status;
}

absl::StatusOr<bool> Membership::MarkDead(const NodeId& node, const std::string& reason, bool revoke) {
  std::vector<HeldBundle> release;
  uint64_t incarnation = 0;
  absl::StatusOr<bool> was_alive = store_->Update([&](Txn& txn) -> absl::StatusOr<bool> {
    const Node* n = txn.state().FindNode(node);
    if (n == nullptr) return absl::NotFoundError(absl::StrCat("node ", node.str(), " is not registered"));
    if (revoke && !txn.state().IsRevoked(node)) {
      TORUS_RETURN_IF_ERROR(txn.Apply(NodeRevoked{node, reason.empty() ? "revoked by an operator" : reason,
                                                  clock_->WallMillis()}));
    }
    if (!n->alive()) return false;
    incarnation = n->incarnation;
    Die(txn, node, n->incarnation,
        reason.empty() ? "marked dead by an operator" : absl::StrCat("marked dead by an operator: ", reason),
        HostLoss::kMarkedDead, 0, release);
    return true;
  });
  if (was_alive.ok() && *was_alive) liveness_->Forget(node, incarnation);
  scheduler_->Release(std::move(release));
  return was_alive;
}

std::vector<NodeId> Membership::ExpireSilent() {
  std::vector<Liveness::Silent> silent = liveness_->Expired(node_timeout_micros_);
  if (silent.empty()) return {};
  std::vector<HeldBundle> release;
  std::vector<NodeId> dead = store_->Update([&](Txn& txn) {
    std::vector<NodeId> out;
    for (const Liveness::Silent& s : silent) {
      const Node* n = txn.state().FindNode(s.node);
      if (n == nullptr || !n->alive() || n->incarnation != s.incarnation) continue;
      const int64_t silent_ms = s.silent_micros / 1000;
      Die(txn, s.node, s.incarnation, absl::StrFormat("no heartbeat for %.1f s", silent_ms / 1000.0),
          HostLoss::kSilent, clock_->WallMillis() - silent_ms, release);
      out.push_back(s.node);
    }
    return out;
  });
  for (const Liveness::Silent& s : silent) liveness_->Forget(s.node, s.incarnation);
  scheduler_->Release(std::move(release));
  return dead;
}

absl::Status Membership::ReportWorkerExit(const NodeId& node, const WorkerId& worker, WorkerExit exit, int64_t pid,
                                          int64_t start_ms) {
  std::vector<ReportedExit> one;
  one.push_back({worker, std::move(exit), pid, start_ms});
  return ReportWorkerExits(node, std::move(one)).front();
}

std::vector<absl::Status> Membership::ReportWorkerExits(const NodeId& node, std::vector<ReportedExit> exits) {
  const int64_t wall = clock_->WallMillis();
  return store_->Update([&](Txn& txn) {
    std::vector<absl::Status> out;
    out.reserve(exits.size());
    for (ReportedExit& e : exits) {
      const Worker* w = txn.state().FindWorker(e.worker);
      if (w == nullptr || w->node != node) {
        out.push_back(absl::NotFoundError(absl::StrCat("worker ", e.worker.str(), " is not known on node ", node.str())));
        continue;
      }
      if (w->phase == WorkerPhase::kExited) {
        out.push_back(absl::OkStatus());
        continue;
      }
      if (e.exit.wall_ms <= 0) e.exit.wall_ms = wall;
      absl::Status s = absl::OkStatus();
      if (w->phase == WorkerPhase::kStarting && e.pid > 0) {
        // Its start's reply is still on the way (the worker ran and exited at once).
        s = txn.Apply(WorkerStarted{e.worker, e.pid, e.start_ms > 0 ? e.start_ms : e.exit.wall_ms});
      }
      if (s.ok()) s = txn.Apply(WorkerExited{e.worker, std::move(e.exit)});
      out.push_back(std::move(s));
    }
    return out;
  });
}

}  // namespace torus::head
