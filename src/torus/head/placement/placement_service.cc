#include "torus/head/placement/placement_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/head/placement/group_ops.h"

namespace torus::head {

absl::StatusOr<Group> PlacementService::CreateBundles(sched::BundleRequest request, const std::string& name,
                                                      double timeout_s) {
  const NewGroup spec{name, Owner{}, timeout_s, clock_->WallMillis()};
  return store_->Update([&](Txn& txn) -> absl::StatusOr<Group> {
    auto id = SubmitBundleGroup(txn, *ids_, std::move(request), spec);
    if (!id.ok()) return id.status();
    spdlog::info("placement group {} submitted: {}", id->str(), txn.state().FindGroup(*id)->request_text);
    return *txn.state().FindGroup(*id);
  });
}

absl::StatusOr<Group> PlacementService::CreateSlices(sched::SliceGroupRequest request, const std::string& name,
                                                     double timeout_s) {
  const NewGroup spec{name, Owner{}, timeout_s, clock_->WallMillis()};
  return store_->Update([&](Txn& txn) -> absl::StatusOr<Group> {
    auto id = SubmitSliceGroup(txn, *ids_, std::move(request), spec);
    if (!id.ok()) return id.status();
    spdlog::info("slice group {} submitted: {}", id->str(), txn.state().FindGroup(*id)->request_text);
    return *txn.state().FindGroup(*id);
  });
}

absl::StatusOr<Group> PlacementService::Get(const std::string& id_or_name) const {
  return store_->Read([&](const ClusterState& s) -> absl::StatusOr<Group> {
    const Group* g = s.FindGroup(id_or_name);
    if (g == nullptr) return absl::NotFoundError(absl::StrCat("placement group ", id_or_name, " does not exist"));
    return *g;
  });
}

std::vector<Group> PlacementService::List(bool include_ended) const {
  std::vector<Group> out = store_->Read([&](const ClusterState& s) {
    std::vector<Group> groups;
    for (const auto& [id, g] : s.groups()) {
      if (include_ended || g.Live()) groups.push_back(g);
    }
    return groups;
  });
  std::sort(out.begin(), out.end(), [](const Group& a, const Group& b) { return a.seq < b.seq; });
  return out;
}

absl::StatusOr<Group> PlacementService::Remove(const std::string& id_or_name) {
  std::vector<HeldBundle> release;
  auto removed = store_->Update([&](Txn& txn) -> absl::StatusOr<Group> {
    const Group* g = txn.state().FindGroup(id_or_name);
    if (g == nullptr) return absl::NotFoundError(absl::StrCat("placement group ", id_or_name, " does not exist"));
    const GroupId id = g->id;
    release = EndGroup(txn, id, PgState::kRemoved, "removed", clock_->WallMillis());
    return *txn.state().FindGroup(id);
  });
  scheduler_->Release(std::move(release));
  return removed;
}

}  // namespace torus::head
