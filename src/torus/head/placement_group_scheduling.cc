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

bool PlacementGroupManager::TrySchedule(const std::string& id, Lock& lock) {
  PlacementGroup* g = groups_.at(id).get();
  sched::ClusterIndex index = sched::ClusterIndex::Build(IndexInputLocked(*g));
  std::map<std::string, std::pair<std::string, std::string>> where;  // node id -> (address, agent target)
  for (const NodeRecord& r : registry_->Records(/*include_dead=*/false)) {
    where[r.info.node_id] = {r.info.address, absl::StrCat(r.info.address, ":", r.info.agent_port)};
  }

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

  if (!reason.empty()) {
    g->reason = reason;
    if (g->state == PgState::kRescheduling || g->history.back().message != reason) {
      SetStateLocked(*g, PgState::kPending, reason);
    }
    g->retry_at_micros = 0;  // retried on the next cluster change
    return false;
  }
  for (HeldBundle& b : fresh) {
    auto it = where.find(b.node_id);
    if (it == where.end()) {  // died since the snapshot; the death event will wake us again
      g->reason = absl::StrCat("node ", b.node_id, " left while placing");
      return false;
    }
    b.address = it->second.first;
    b.target = it->second.second;
  }

  // Two-phase reservation, without the lock.
  const uint64_t attempt = ++g->attempt;
  const std::vector<AgentBundles> calls = GroupByAgent(fresh);
  lock.unlock();
  std::vector<absl::Status> prepared = agents_->Prepare(calls, attempt, options_.prepare_ttl);
  std::string refusal;
  for (size_t i = 0; i < calls.size() && refusal.empty(); ++i) {
    if (!prepared[i].ok()) {
      refusal = absl::StrCat("prepare refused by node ", calls[i].node_id, ": ", prepared[i].message());
    }
  }
  if (refusal.empty()) {
    std::vector<absl::Status> committed = agents_->Commit(calls, attempt);
    for (size_t i = 0; i < calls.size() && refusal.empty(); ++i) {
      if (!committed[i].ok()) {
        refusal = absl::StrCat("commit failed on node ", calls[i].node_id, ": ", committed[i].message());
      }
    }
    if (!refusal.empty()) agents_->Release(calls);
  } else {
    agents_->Cancel(calls, attempt);
  }
  lock.lock();

  auto it = groups_.find(id);
  if (it == groups_.end() || !it->second->Live()) {
    // Removed (or timed out) while we reserved: give everything back.
    if (refusal.empty()) QueueReleaseLocked(fresh);
    return false;
  }
  g = it->second.get();
  if (!refusal.empty()) {
    g->backoff_ms = std::clamp<int64_t>(g->backoff_ms * 2, 50, options_.max_backoff_ms);
    g->retry_at_micros = clock_->NowMicros() + g->backoff_ms * 1000;
    g->reason = absl::StrCat(refusal, "; retrying in ", g->backoff_ms, " ms");
    SetStateLocked(*g, PgState::kPending, g->reason);
    return false;
  }
  if (g->kind == PgKind::kBundles) {
    std::set<int> replaced;
    for (const HeldBundle& b : fresh) replaced.insert(b.index);
    std::vector<HeldBundle> moved;
    for (const HeldBundle& b : g->bundles) {
      if (!b.lost && replaced.contains(b.index)) moved.push_back(b);
    }
    QueueReleaseLocked(moved);
    if (!moved.empty()) dirty_ = true;
    std::erase_if(g->bundles, [&](const HeldBundle& b) { return b.lost || replaced.contains(b.index); });
    g->bundles.insert(g->bundles.end(), fresh.begin(), fresh.end());
    std::sort(g->bundles.begin(), g->bundles.end(),
              [](const HeldBundle& a, const HeldBundle& b) { return a.index < b.index; });
  } else {
    // Slice-major in the chosen order, then worker id and chip block as placed.
    std::vector<HeldBundle> all = std::move(g->bundles);
    all.insert(all.end(), fresh.begin(), fresh.end());
    g->bundles.clear();
    for (const std::string& s : new_slices) {
      for (const HeldBundle& b : all) {
        if (b.slice_name == s) {
          g->bundles.push_back(b);
          g->bundles.back().index = static_cast<int>(g->bundles.size()) - 1;
        }
      }
    }
    g->slices = new_slices;
  }
  g->alternative = alternative;
  g->backoff_ms = 0;
  g->retry_at_micros = 0;
  g->reason.clear();
  std::set<std::string> nodes;
  for (const HeldBundle& b : fresh) nodes.insert(b.node_id);
  std::string message =
      g->kind == PgKind::kSlices
          ? absl::StrCat("reserved slice", g->slices.size() == 1 ? " " : "s ", absl::StrJoin(g->slices, ", "),
                         alternative > 0 ? absl::StrCat(" (fallback ", alternative, ")") : "")
          : absl::StrCat("placed ", fresh.size(), " bundle", fresh.size() == 1 ? "" : "s", " on ",
                         absl::StrJoin(nodes, ", "),
                         alternative > 0 ? absl::StrCat(" (fallback ", alternative, ")") : "");
  SetStateLocked(*g, PgState::kCreated, message);
  return true;
}

}  // namespace torus::head
