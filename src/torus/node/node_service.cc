#include "torus/node/node_service.h"

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/rpc/convert.h"
#include "torus/rpc/server_auth.h"

namespace torus::node {

using rpc::FinishCall;

NodeServiceImpl::NodeServiceImpl(BundleLedger* ledger, std::string token, std::function<void()> on_change)
    : ledger_(ledger), token_(std::move(token)), on_change_(std::move(on_change)) {}

grpc::ServerUnaryReactor* NodeServiceImpl::PrepareBundles(grpc::CallbackServerContext* ctx,
                                                          const rpc::PrepareBundlesRequest* request,
                                                          rpc::PrepareBundlesReply* reply) {
  if (grpc::Status auth = rpc::CheckToken(ctx, token_); !auth.ok()) return FinishCall(ctx, auth);
  if (request->group_id().empty() || request->group_id().size() > 128) {
    return FinishCall(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "group_id must be 1-128 characters"));
  }
  if (request->ttl_ms() <= 0 || request->ttl_ms() > 3'600'000) {
    return FinishCall(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "ttl_ms must be 1..3600000"));
  }
  std::vector<LedgerBundle> bundles;
  for (const rpc::BundleSpec& spec : request->bundles()) {
    auto resources = rpc::FromProto(spec.resources(), absl::StrCat("bundle ", spec.index()));
    if (!resources.ok()) return FinishCall(ctx, rpc::ToGrpc(resources.status()));
    bundles.push_back({spec.index(), *std::move(resources), {spec.chips().begin(), spec.chips().end()}});
  }
  absl::Status s = ledger_->Prepare(request->group_id(), request->attempt(), bundles, request->ttl_ms() * 1000);
  if (s.ok()) {
    on_change_();
  } else {
    spdlog::info("prepare of group {} attempt {} refused: {}", request->group_id(), request->attempt(),
                 std::string(s.message()));
  }
  return FinishCall(ctx, rpc::ToGrpc(s));
}

grpc::ServerUnaryReactor* NodeServiceImpl::CommitBundles(grpc::CallbackServerContext* ctx,
                                                         const rpc::CommitBundlesRequest* request,
                                                         rpc::CommitBundlesReply* reply) {
  if (grpc::Status auth = rpc::CheckToken(ctx, token_); !auth.ok()) return FinishCall(ctx, auth);
  absl::Status s = ledger_->Commit(request->group_id(), request->attempt());
  return FinishCall(ctx, rpc::ToGrpc(s));
}

grpc::ServerUnaryReactor* NodeServiceImpl::CancelBundles(grpc::CallbackServerContext* ctx,
                                                         const rpc::CancelBundlesRequest* request,
                                                         rpc::CancelBundlesReply* reply) {
  if (grpc::Status auth = rpc::CheckToken(ctx, token_); !auth.ok()) return FinishCall(ctx, auth);
  ledger_->Cancel(request->group_id(), request->attempt());
  on_change_();
  return FinishCall(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* NodeServiceImpl::ReleaseBundles(grpc::CallbackServerContext* ctx,
                                                          const rpc::ReleaseBundlesRequest* request,
                                                          rpc::ReleaseBundlesReply* reply) {
  if (grpc::Status auth = rpc::CheckToken(ctx, token_); !auth.ok()) return FinishCall(ctx, auth);
  reply->set_released(
      ledger_->Release(request->group_id(), {request->indices().begin(), request->indices().end()}));
  on_change_();
  return FinishCall(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* NodeServiceImpl::GetLedger(grpc::CallbackServerContext* ctx,
                                                     const rpc::GetLedgerRequest* request, rpc::LedgerView* reply) {
  if (grpc::Status auth = rpc::CheckToken(ctx, token_); !auth.ok()) return FinishCall(ctx, auth);
  ledger_->Expire();
  rpc::ToProto(ledger_->Available(), reply->mutable_resources_available());
  for (int chip : ledger_->BusyChips()) reply->add_busy_chips(chip);
  for (const LedgerEntry& e : ledger_->Entries()) {
    rpc::LedgerEntryView* view = reply->add_entries();
    view->set_group_id(e.group_id);
    view->set_attempt(e.attempt);
    view->set_committed(e.committed);
    rpc::BundleSpec* spec = view->mutable_bundle();
    spec->set_index(e.bundle.index);
    rpc::ToProto(e.bundle.resources, spec->mutable_resources());
    for (int chip : e.bundle.chips) spec->add_chips(chip);
  }
  rpc::ToProto(ledger_->total(), reply->mutable_resources_total());
  return FinishCall(ctx, grpc::Status::OK);
}

}  // namespace torus::node
