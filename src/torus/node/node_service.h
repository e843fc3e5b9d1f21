// NodeServiceImpl: the agent's gRPC handlers over its BundleLedger (prepare / commit / cancel / release, and the
// ledger view). Each checks the cluster token and converts proto to ledger types.
//
// Thread-safety: thread-safe; handlers run on gRPC's callback threads; the ledger has its own lock.
#pragma once

#include <string>

#include "torus/node.grpc.pb.h"
#include "torus/node/bundle_ledger.h"

namespace torus::node {

class NodeServiceImpl final : public rpc::NodeService::CallbackService {
 public:
  // Called after every change of the ledger, e.g. to send availability with the next heartbeat at once.
  NodeServiceImpl(BundleLedger* ledger, std::string token, std::function<void()> on_change);

  grpc::ServerUnaryReactor* PrepareBundles(grpc::CallbackServerContext* ctx, const rpc::PrepareBundlesRequest* request,
                                           rpc::PrepareBundlesReply* reply) override;
  grpc::ServerUnaryReactor* CommitBundles(grpc::CallbackServerContext* ctx, const rpc::CommitBundlesRequest* request,
                                          rpc::CommitBundlesReply* reply) override;
  grpc::ServerUnaryReactor* CancelBundles(grpc::CallbackServerContext* ctx, const rpc::CancelBundlesRequest* request,
                                          rpc::CancelBundlesReply* reply) override;
  grpc::ServerUnaryReactor* ReleaseBundles(grpc::CallbackServerContext* ctx, const rpc::ReleaseBundlesRequest* request,
                                           rpc::ReleaseBundlesReply* reply) override;
  grpc::ServerUnaryReactor* GetLedger(grpc::CallbackServerContext* ctx, const rpc::GetLedgerRequest* request,
                                      rpc::LedgerView* reply) override;

 private:
  BundleLedger* ledger_;
  const std::string token_;
  const std::function<void()> on_change_;
};

}  // namespace torus::node
