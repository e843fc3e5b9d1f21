#include "torus/head/placement/group_ops.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/head/placement/group_requests.h"

namespace torus::head {
namespace {

absl::StatusOr<GroupId> Submit(Txn& txn, IdGenerator& ids, Group group, const NewGroup& spec) {
  if (spec.name.size() > 128) return absl::InvalidArgumentError("name must be at most 128 characters");
  if (!spec.name.empty()) {
    if (const Group* existing = txn.state().FindGroup(spec.name); existing != nullptr && existing->Live() &&
                                                                  existing->name == spec.name) {
      return absl::AlreadyExistsError(absl::StrCat("a placement group named \"", spec.name, "\" exists (",
                                                   existing->id.str(), "); remove it first"));
    }
  }
  do {
    group.id = GroupId(absl::StrCat("pg-", ids.Suffix(10)));
  } while (txn.state().FindGroup(group.id) != nullptr);
  group.name = spec.name;
  group.owner = spec.owner;
  group.timeout_s = spec.timeout_s;
  group.seq = txn.state().next_group_seq();
  group.created_wall_ms = spec.wall_ms;
  group.state = PgState::kPending;
  group.reason = "waiting to be scheduled";
  group.history.push_back({spec.wall_ms, "PENDING", "submitted: " + group.request_text});
  const GroupId id = group.id;
  absl::Status applied = txn.Apply(GroupSubmitted{std::move(group)});
  if (!applied.ok()) return applied;
  return id;
}

}  // namespace

absl::StatusOr<GroupId> SubmitBundleGroup(Txn& txn, IdGenerator& ids, sched::BundleRequest request,
                                          const NewGroup& spec) {
  if (absl::Status s = sched::ValidateBundleRequest(request); !s.ok()) return s;
  Group group;
  group.kind = PgKind::kBundles;
  group.request_text = DescribeBundleRequest(request);
  group.bundle_request = std::move(request);
  return Submit(txn, ids, std::move(group), spec);
}

absl::StatusOr<GroupId> SubmitSliceGroup(Txn& txn, IdGenerator& ids, sched::SliceGroupRequest request,
                                         const NewGroup& spec) {
  if (absl::Status s = sched::ValidateSliceGroupRequest(request); !s.ok()) return s;
  Group group;
  group.kind = PgKind::kSlices;
  group.request_text = DescribeSliceRequest(request);
  group.slice_request = std::move(request);
  return Submit(txn, ids, std::move(group), spec);
}

std::vector<HeldBundle> EndGroup(Txn& txn, const GroupId& id, PgState state, const std::string& message,
                                 int64_t wall_ms) {
  const Group* g = txn.state().FindGroup(id);
  if (g == nullptr || !g->Live()) return {};
  std::vector<HeldBundle> held;
  for (const HeldBundle& b : g->bundles) {
    if (!b.lost) held.push_back(b);
  }
  if (!txn.Apply(GroupEnded{id, state, message, wall_ms}).ok()) return {};
  return held;
}

std::vector<HeldBundle> LoseBundles(Txn& txn, const NodeId& node, const std::function<bool(const HeldBundle&)>& which,
                                    bool node_died, int64_t wall_ms) {
  std::vector<HeldBundle> release;
  std::vector<GroupBundlesLost> records;
  for (const Group* g : txn.state().GroupsOn(node)) {
    GroupBundlesLost r{.group = g->id, .wall_ms = wall_ms};
    if (g->kind == PgKind::kBundles) {
      for (const HeldBundle& b : g->bundles) {
        if (!b.lost && b.node == node && which(b)) r.lost_indices.push_back(b.index);
      }
      if (r.lost_indices.empty()) continue;
      r.message = absl::StrCat("node ", node.str(), node_died ? " died" : " no longer holds them", ": bundle",
                               r.lost_indices.size() == 1 ? " " : "s ", absl::StrJoin(r.lost_indices, ", "),
                               " lost; placing again");
    } else {
      std::set<std::string> degraded;
      for (const HeldBundle& b : g->bundles) {
        if (b.node == node && which(b)) degraded.insert(b.slice_name);
      }
      if (degraded.empty()) continue;
      for (const HeldBundle& b : g->bundles) {
        // What `which` picked is gone already; the rest of a degraded slice is given back.
        if (degraded.contains(b.slice_name) && !(b.node == node && which(b))) release.push_back(b);
      }
      r.dropped_slices.assign(degraded.begin(), degraded.end());
      r.message = absl::StrCat("slice", degraded.size() == 1 ? " " : "s ", absl::StrJoin(degraded, ", "),
                               " degraded (", node_died ? "a host died" : "a host lost its bundles",
                               "): released whole; reserving a replacement");
    }
    records.push_back(std::move(r));
  }
  for (GroupBundlesLost& r : records) txn.Apply(std::move(r)).IgnoreError();
  return release;
}

}  // namespace torus::head
