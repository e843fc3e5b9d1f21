#include "torus/core/groups.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace torus::core {
namespace {

template <typename Call>
absl::StatusOr<rpc::PlacementGroupView> Ask(Channels& channels, const std::string& head, int64_t deadline_ms, Call call) {
  auto stub = rpc::HeadService::NewStub(channels.Head(head));
  grpc::ClientContext ctx;
  channels.Authorize(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
  rpc::PlacementGroupView view;
  grpc::Status s = call(*stub, ctx, view);
  if (!s.ok()) {
    absl::Status out(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    return out;
  }
  return view;
}

}  // namespace

absl::StatusOr<rpc::PlacementGroupView> GetGroup(Channels& channels, const std::string& head, const std::string& id,
                                                 int64_t wait_ready_ms) {
  rpc::GetPlacementGroupRequest request;
  request.set_id(id);
  request.set_wait_ready_ms(wait_ready_ms);
  return Ask(channels, head, wait_ready_ms + 10'000, [&](rpc::HeadService::Stub& stub, grpc::ClientContext& ctx,
                                                          rpc::PlacementGroupView& view) {
    return stub.GetPlacementGroup(&ctx, request, &view);
  });
}

absl::StatusOr<rpc::PlacementGroupView> CreateGroup(Channels& channels, const std::string& head,
                                                    const rpc::PlacementGroupSpec& spec) {
  return Ask(channels, head, 30'000, [&](rpc::HeadService::Stub& stub, grpc::ClientContext& ctx,
                                         rpc::PlacementGroupView& view) {
    return stub.CreatePlacementGroup(&ctx, spec, &view);
  });
}

absl::StatusOr<rpc::PlacementGroupView> ReserveSlices(Channels& channels, const std::string& head,
                                                      const rpc::SliceGroupSpec& spec) {
  return Ask(channels, head, 30'000, [&](rpc::HeadService::Stub& stub, grpc::ClientContext& ctx,
                                         rpc::PlacementGroupView& view) {
    return stub.ReserveSlices(&ctx, spec, &view);
  });
}

absl::Status RemoveGroup(Channels& channels, const std::string& head, const std::string& id) {
  rpc::RemovePlacementGroupRequest request;
  request.set_id(id);
  return Ask(channels, head, 30'000, [&](rpc::HeadService::Stub& stub, grpc::ClientContext& ctx,
                                         rpc::PlacementGroupView& view) {
           return stub.RemovePlacementGroup(&ctx, request, &view);
         })
      .status();
}

absl::StatusOr<GroupState> GroupStateOf(const rpc::PlacementGroupView& view) {
  static const auto* const kStates = new std::map<std::string, GroupState, std::less<>>{
      {"PENDING", GroupState::kPending},   {"CREATED", GroupState::kCreated},
      {"RESCHEDULING", GroupState::kRescheduling}, {"REMOVED", GroupState::kRemoved},
      {"FAILED", GroupState::kFailed}};
  auto it = kStates->find(view.state());
  if (it == kStates->end()) {
    return absl::InvalidArgumentError(absl::StrCat("placement group ", view.id(), ": unknown state \"", view.state(),
                                                   "\" (known: PENDING, CREATED, RESCHEDULING, REMOVED, FAILED)"));
  }
  return it->second;
}

absl::StatusOr<std::vector<BundleLocation>> WaitForBundles(Channels& channels, const std::string& head,
                                                           const std::string& id, const std::function<bool()>& stop) {
  while (!stop()) {
    auto view = GetGroup(channels, head, id, 2'000);
    if (!view.ok()) return view.status();
    absl::StatusOr<GroupState> state = GroupStateOf(*view);
    if (!state.ok()) return state.status();
    if (*state == GroupState::kCreated) {
      std::vector<BundleLocation> out;
      std::map<std::string, int> per_slice;  // the next ledger index of each slice's ledger group
      for (const auto& b : view->bundles()) {
        BundleLocation where{.index = b.index(), .node_id = b.node_id(), .ledger_group = id, .ledger_index = b.index()};
        if (view->kind() == "slice_group" && !b.slice_name().empty()) {
          where.ledger_group = absl::StrCat(id, "/", b.slice_name());
          where.ledger_index = per_slice[b.slice_name()]++;
        }
        out.push_back(std::move(where));
      }
      return out;
    }
    if (*state == GroupState::kRemoved || *state == GroupState::kFailed) {
      return absl::FailedPreconditionError(
          absl::StrCat("placement group ", id, " is ", view->state(), view->reason().empty() ? "" : ": ",
                       view->reason()));
    }
  }
  return absl::CancelledError("stopping");
}

}  // namespace torus::core
