// PlacementGroupManager: one scheduling attempt of one group — the head's accounting as a ClusterIndex, the
// scheduling core's decision, and the two-phase reservation on the agents.
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"
#include "torus/common/well_known_labels.h"
#include "torus/head/placement_group_manager.h"
#include "torus/rpc/convert.h"

namespace torus::head {

std::vector<AgentBundles> GroupByAgent(const std::vector<HeldBundle>& bundles) {
  std::map<std::pair<std::string, std::string>, AgentBundles> grouped;
  for (const HeldBundle& b : bundles) {
    AgentBundles& entry = grouped[{b.target, b.ledger_group}];
    entry.node_id = b.node_id;
    entry.target = b.target;
    entry.ledger_group = b.ledger_group;
    rpc::BundleSpec spec;
    spec.set_index(b.ledger_index);
    rpc::ToProto(b.resources, spec.mutable_resources());
    for (int chip : b.chips) spec.add_chips(chip);
    entry.bundles.push_back(std::move(spec));
  }
  std::vector<AgentBundles> out;
  for (auto& [key, entry] : grouped) out.push_back(std::move(entry));
  return out;
}

namespace {

std::string OutcomeReason(const sched::Pending& p) { return p.reason; }
std::string OutcomeReason(const sched::Infeasible& i) { return absl::StrCat("infeasible for now: ", i.reason); }

}  // namespace

sched::IndexInput PlacementGroupManager::IndexInputLocked(const PlacementGroup& placing) const {
  sched::IndexInput input;
  input.nodes = registry_->Snapshot(/*include_dead=*/true);
  std::map<std::string, ResourceSet> held;
  for (const auto& [id, g] : groups_) {
    if (!g->Live()) continue;
    // A slice group being placed again keeps its healthy slices by name; they must not count against it.
    const bool own_slices = g.get() == &placing && g->kind == PgKind::kSlices;
    if (!own_slices) {
      for (const std::string& s : g->slices) input.slice_holders[s] = id;
    }
    for (const HeldBundle& b : g->bundles) {
      if (b.lost || own_slices) continue;
      held[b.node_id].Add(b.resources);
      auto& chips = input.busy_chips[b.node_id];
      chips.insert(chips.end(), b.chips.begin(), b.chips.end());
    }
  }
  // The head is the only one reserving, so its own accounting is exact and never lags a heartbeat.
  for (sched::NodeSnapshot& n : input.nodes) {
    n.available = n.total;
    auto it = held.find(n.node_id);
    if (it != held.end()) n.available.Subtract(it->second);
  }
  return input;
}

std::map<std::string, std::pair<std::string, std::string>> PlacementGroupManager::AgentTargets() const {
  std::map<std::string, std::pair<std::string, std::string>> where;  // node id -> (address, agent target)
  for (const NodeRecord& r : registry_->Records(/*include_dead=*/false)) {
    where[r.info.node_id] = {r.info.address, absl::StrCat(r.info.address, ":", r.info.agent_port)};
  }
  return where;
}

PlacementGroupManager::PlacementDecision PlacementGroupManager::DecideLocked(
    PlacementGroup* g, const sched::IndexInput& input,
    const std::map<std::string, std::pair<std::string, std::string>>& where) {
  sched::ClusterIndex index = sched::ClusterIndex::Build(input);
  // Decide. New bundles go to `fresh`; a group's surviving bundles stay where they are.
  std::vector<HeldBundle> fresh;
  std::vector<std::string> new_slices;
  int alternative = g->alternative;
  std::string reason;
  if (g->kind == PgKind::kBundles) {
    sched::BundleRequest request = g->bundle_request;
    const bool rescheduling = !g->bundles.empty();
    if (rescheduling) {
      // The surviving bundles fix the alternative; only the lost ones are placed.
      request.primary = alternative == 0 ? g->bundle_request.primary : g->bundle_request.fallbacks[alternative - 1];
      request.fallbacks.clear();
      for (const HeldBundle& b : g->bundles) {
        if (!b.lost) request.fixed[b.index] = b.node_id;
      }
    }
    sched::BundleOutcome outcome = sched::PlaceBundles(index, request);
    if (auto* placed = std::get_if<sched::BundlePlacement>(&outcome)) {
      if (!rescheduling) alternative = placed->alternative;
      const sched::BundleAlternative& chosen =
          alternative == 0 ? g->bundle_request.primary : g->bundle_request.fallbacks[alternative - 1];
      for (size_t i = 0; i < placed->node_ids.size(); ++i) {
        // A survivor stays unless the policy moved it (STRICT_PACK moves all when its node cannot take the rest).
        auto fixed = request.fixed.find(static_cast<int>(i));
        if (fixed != request.fixed.end() && fixed->second == placed->node_ids[i]) continue;
        HeldBundle b;
        b.index = static_cast<int>(i);
        b.ledger_index = b.index;
        b.node_id = placed->node_ids[i];
        b.resources = chosen.bundles[i];
        b.ledger_group = g->id;
        fresh.push_back(std::move(b));
      }
    } else if (auto* pending = std::get_if<sched::Pending>(&outcome)) {
      reason = OutcomeReason(*pending);
    } else {
      reason = OutcomeReason(std::get<sched::Infeasible>(outcome));
    }
  } else {
    sched::SliceGroupRequest request = g->slice_request;
    if (!g->slices.empty()) {
      // Healthy slices are kept; the replacement must be of their shape.
      if (alternative > 0) request.primary = g->slice_request.fallbacks[alternative - 1];
      request.fallbacks.clear();
      request.keep_slices = g->slices;
    }
    sched::SliceGroupOutcome outcome = sched::PlaceSliceGroup(index, request);
    if (auto* placed = std::get_if<sched::SliceGroupPlacement>(&outcome)) {
      if (g->slices.empty()) alternative = placed->alternative;
      std::set<std::string> kept(g->slices.begin(), g->slices.end());
      new_slices = placed->slice_names;
      std::map<std::string, int> next_index;  // per slice ledger group
      for (const sched::SliceBundle& sb : placed->bundles) {
        if (kept.contains(sb.slice_name)) continue;
        HeldBundle b;
        b.ledger_index = next_index[sb.slice_name]++;
        b.node_id = sb.node_id;
        b.slice_name = sb.slice_name;
        b.worker_id = sb.worker_id;
        b.chips = sb.chips;
        b.resources = sb.resources;
        b.ledger_group = absl::StrCat(g->id, "/", sb.slice_name);
        fresh.push_back(std::move(b));
      }
    } else if (auto* pending = std::get_if<sched::Pending>(&outcome)) {
      reason = OutcomeReason(*pending);
    } else {
      reason = OutcomeReason(std::get<sched::Infeasible>(outcome));
    }
  }

  PlacementDecision decision;
  decision.id = g->id;
  if (!reason.empty()) {
    g->reason = reason;
    if (g->state == PgState::kRescheduling || g->history.back().message != reason) {
      SetStateLocked(*g, PgState::kPending, reason);
    }
    g->retry_at_micros = 0;  // retried on the next cluster change
    return decision;
  }
  for (HeldBundle& b : fresh) {
    auto it = where.find(b.node_id);
    if (it == where.end()) {  // died since the snapshot; the death event will wake us again
      g->reason = absl::StrCat("node ", b.node_id, " left while placing");
      return decision;
    }
    b.address = it->second.first;
    b.target = it->second.second;
  }
  decision.placed = true;
  decision.fresh = std::move(fresh);
  decision.new_slices = std::move(new_slices);
  decision.alternative = alternative;
  decision.attempt = ++g->attempt;
  return decision;

}

void PlacementGroupManager::HoldInInput(const PlacementDecision& d, sched::IndexInput& input) {
  std::map<std::string, ResourceSet> held;
  for (const HeldBundle& b : d.fresh) {
    held[b.node_id].Add(b.resources);
    auto& chips = input.busy_chips[b.node_id];
    chips.insert(chips.end(), b.chips.begin(), b.chips.end());
  }
  for (sched::NodeSnapshot& n : input.nodes) {
    auto it = held.find(n.node_id);
    if (it != held.end()) n.available.Subtract(it->second);
  }
  for (const std::string& s : d.new_slices) input.slice_holders[s] = d.id;
}

void PlacementGroupManager::ReserveBatch(std::vector<PlacementDecision>& batch, Lock& lock) {
  if (batch.empty()) return;
  // One round of prepares for every group of the batch, then one round of commits for those fully prepared.
  std::vector<AgentBundles> calls;
  std::vector<size_t> owner;  // calls[i] belongs to batch[owner[i]]
  for (size_t d = 0; d < batch.size(); ++d) {
    for (AgentBundles& call : GroupByAgent(batch[d].fresh)) {
      call.attempt = batch[d].attempt;
      calls.push_back(std::move(call));
      owner.push_back(d);
    }
  }
  lock.unlock();
  std::vector<absl::Status> prepared = agents_->Prepare(calls, options_.prepare_ttl);
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!prepared[i].ok() && batch[owner[i]].refusal.empty()) {
      batch[owner[i]].refusal =
          absl::StrCat("prepare refused by node ", calls[i].node_id, ": ", prepared[i].message());
    }
  }
  std::vector<AgentBundles> to_commit, to_cancel;
  std::vector<size_t> commit_owner;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (batch[owner[i]].refusal.empty()) {
      to_commit.push_back(calls[i]);
      commit_owner.push_back(owner[i]);
    } else {
      to_cancel.push_back(calls[i]);
    }
  }
  agents_->Cancel(to_cancel);
  std::vector<absl::Status> committed = agents_->Commit(to_commit);
  std::vector<AgentBundles> to_release;
  for (size_t i = 0; i < to_commit.size(); ++i) {
    if (!committed[i].ok() && batch[commit_owner[i]].refusal.empty()) {
      batch[commit_owner[i]].refusal =
          absl::StrCat("commit failed on node ", to_commit[i].node_id, ": ", committed[i].message());
    }
  }
  for (size_t i = 0; i < to_commit.size(); ++i) {
    if (!batch[commit_owner[i]].refusal.empty()) to_release.push_back(to_commit[i]);
  }
  agents_->Release(to_release);
  lock.lock();
}

bool PlacementGroupManager::ApplyLocked(PlacementDecision& d) {
  auto it = groups_.find(d.id);
  if (it == groups_.end() || !it->second->Live()) {
    // Removed (or timed out) while we reserved: give everything back.
    if (d.refusal.empty()) QueueReleaseLocked(d.fresh);
    dirty_ = true;
    return false;
  }
  PlacementGroup* g = it->second.get();
  if (!d.refusal.empty()) {
    g->backoff_ms = std::clamp<int64_t>(g->backoff_ms * 2, 50, options_.max_backoff_ms);
    g->retry_at_micros = clock_->NowMicros() + g->backoff_ms * 1000;
    g->reason = absl::StrCat(d.refusal, "; retrying in ", g->backoff_ms, " ms");
    SetStateLocked(*g, PgState::kPending, g->reason);
    return false;
  }
  if (g->kind == PgKind::kBundles) {
    std::set<int> replaced;
    for (const HeldBundle& b : d.fresh) replaced.insert(b.index);
    std::vector<HeldBundle> moved;
    for (const HeldBundle& b : g->bundles) {
      if (!b.lost && replaced.contains(b.index)) moved.push_back(b);
    }
    QueueReleaseLocked(moved);
    if (!moved.empty()) dirty_ = true;
    std::erase_if(g->bundles, [&](const HeldBundle& b) { return b.lost || replaced.contains(b.index); });
    g->bundles.insert(g->bundles.end(), d.fresh.begin(), d.fresh.end());
    std::sort(g->bundles.begin(), g->bundles.end(),
              [](const HeldBundle& a, const HeldBundle& b) { return a.index < b.index; });
  } else {
    // Slice-major in the chosen order, then worker id and chip block as placed.
    std::vector<HeldBundle> all = std::move(g->bundles);
    all.insert(all.end(), d.fresh.begin(), d.fresh.end());
    g->bundles.clear();
    for (const std::string& s : d.new_slices) {
      for (const HeldBundle& b : all) {
        if (b.slice_name == s) {
          g->bundles.push_back(b);
          g->bundles.back().index = static_cast<int>(g->bundles.size()) - 1;
        }
      }
    }
    g->slices = d.new_slices;
  }
  g->alternative = d.alternative;
  g->backoff_ms = 0;
  g->retry_at_micros = 0;
  g->reason.clear();
  std::set<std::string> nodes;
  for (const HeldBundle& b : d.fresh) nodes.insert(b.node_id);
  std::string message =
      g->kind == PgKind::kSlices
          ? absl::StrCat("reserved slice", g->slices.size() == 1 ? " " : "s ", absl::StrJoin(g->slices, ", "),
                         d.alternative > 0 ? absl::StrCat(" (fallback ", d.alternative, ")") : "")
          : absl::StrCat("placed ", d.fresh.size(), " bundle", d.fresh.size() == 1 ? "" : "s", " on ",
                         absl::StrJoin(nodes, ", "),
                         d.alternative > 0 ? absl::StrCat(" (fallback ", d.alternative, ")") : "");
  SetStateLocked(*g, PgState::kCreated, message);
  return true;
}

bool PlacementGroupManager::TrySchedule(const std::string& id, Lock& lock) {
  PlacementGroup* g = groups_.at(id).get();
  std::vector<PlacementDecision> batch = {DecideLocked(g, IndexInputLocked(*g), AgentTargets())};
  if (!batch[0].placed) return false;
  ReserveBatch(batch, lock);
  return ApplyLocked(batch[0]);
}

}  // namespace torus::head
