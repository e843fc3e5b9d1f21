#include "torus/head/admission/admission_service.h"

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/head/nodes/membership.h"
#include "torus/rpc/convert.h"
#include "torus/rpc/server_auth.h"
#include "torus/tls/credentials.h"

namespace torus::head {
namespace {

grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx, absl::StatusOr<NodeCertificate> issued,
                                rpc::NodeCertificateReply* reply) {
  if (!issued.ok()) return rpc::FinishCall(ctx, rpc::ToGrpc(issued.status()));
  reply->set_cert_pem(issued->cert_pem);
  reply->set_ca_pem(issued->ca_pem);
  reply->set_not_after_unix(issued->not_after_s);
  return rpc::FinishCall(ctx, grpc::Status::OK);
}

}  // namespace

NodeAdmissionServiceImpl::NodeAdmissionServiceImpl(const ClusterAuthority* authority, const StateStore* store,
                                                   std::string token)
    : authority_(authority), store_(store), token_(std::move(token)) {}

grpc::ServerUnaryReactor* NodeAdmissionServiceImpl::IssueWorkerCertificate(
    grpc::CallbackServerContext* ctx, const rpc::IssueWorkerCertificateRequest* request,
    rpc::NodeCertificateReply* reply) {
  if (grpc::Status s = rpc::CheckToken(ctx, token_); !s.ok()) return rpc::FinishCall(ctx, s);
  return Reply(ctx, authority_->IssueForWorker(request->csr_pem()), reply);
}

grpc::ServerUnaryReactor* NodeAdmissionServiceImpl::JoinCluster(grpc::CallbackServerContext* ctx,
                                                               const rpc::JoinClusterRequest* request,
                                                               rpc::NodeCertificateReply* reply) {
  if (absl::Status s = ValidateNodeId(request->node_id()); !s.ok()) return rpc::FinishCall(ctx, rpc::ToGrpc(s));
  const NodeId node(request->node_id());
  enum class Standing { kNone, kAlive, kRevoked };
  const Standing standing = store_->Read([&node](const ClusterState& s) {
    if (s.IsRevoked(node)) return Standing::kRevoked;
    const Node* n = s.FindNode(node);
    return n != nullptr && n->alive() ? Standing::kAlive : Standing::kNone;
  });
  // The token first: without it, nothing is said about the node.
  auto issued =
      authority_->IssueForJoin(request->join_token(), request->node_id(), request->csr_pem());
  if (issued.ok() && standing == Standing::kRevoked) {
    issued = absl::PermissionDeniedError(
        absl::StrCat("node ", node.str(), " is revoked; the host may join again under another --node-id"));
  } else if (issued.ok() && standing == Standing::kAlive) {
    issued = absl::AlreadyExistsError(absl::StrCat(
        "node ", node.str(), " is ALIVE; a running node renews its certificate with that certificate, not the join token"));
  }
  if (issued.ok()) {
    spdlog::info("node {} joined: certificate issued until {}", node.str(), issued->not_after_s);
  } else {
    spdlog::warn("join as node {} refused: {}", node.str(), std::string(issued.status().message()));
  }
  return Reply(ctx, std::move(issued), reply);
}

grpc::ServerUnaryReactor* NodeAdmissionServiceImpl::RenewNodeCertificate(
    grpc::CallbackServerContext* ctx, const rpc::RenewNodeCertificateRequest* request,
    rpc::NodeCertificateReply* reply) {
  const std::string identity = tls::PeerIdentity(ctx);
  const std::string node_id = tls::NodeIdOfIdentity(identity);
  if (node_id.empty()) {
    return rpc::FinishCall(ctx, grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                                             "renewal needs the node's current certificate; a new node joins with "
                                             "the join token (JoinCluster)"));
  }
  if (store_->Read([&node_id](const ClusterState& s) { return s.IsRevoked(NodeId(node_id)); })) {
    return rpc::FinishCall(ctx, grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                             absl::StrCat("node ", node_id, " is revoked")));
  }
  return Reply(ctx, authority_->IssueForNode(node_id, request->csr_pem()), reply);
}

}  // namespace torus::head
