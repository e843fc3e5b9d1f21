#include "torus/head/api/node_callers.h"

#include "absl/strings/str_cat.h"
#include "torus/rpc/server_auth.h"
#include "torus/tls/credentials.h"
#include "torus/tls/pki.h"

namespace torus::head {

NodeCallers::NodeCallers(std::string token, bool certificates)
    : token_(std::move(token)), certificates_(certificates) {}

absl::StatusOr<std::string> NodeCallers::Admit(const grpc::ServerContextBase* ctx) const {
  if (!certificates_) {
    grpc::Status s = rpc::CheckToken(ctx, token_);
    if (!s.ok()) return absl::UnauthenticatedError(s.error_message());
    return std::string();
  }
  const std::string identity = tls::PeerIdentity(ctx);
  std::string node = tls::NodeIdOfIdentity(identity);
  if (node.empty()) {
    return absl::UnauthenticatedError(
        identity.empty() ? "a node's calls need the node's certificate (this cluster uses TLS; the cluster token is "
                           "not enough): start the agent with --tls-ca and --join-token"
                         : absl::StrCat("'", identity, "' is not a node; a node's calls need the node's certificate"));
  }
  return node;
}

grpc::Status NodeCallers::MaySpeakFor(std::string_view caller_node, std::string_view node_id) const {
  if (!certificates_) return grpc::Status::OK;
  if (!node_id.empty() && caller_node != node_id) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("node ", std::string(caller_node), "'s certificate cannot make calls for node ",
                                     std::string(node_id)));
  }
  if (IsRevoked(caller_node)) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        absl::StrCat("node ", std::string(caller_node), " is revoked"));
  }
  return grpc::Status::OK;
}

grpc::Status NodeCallers::Check(const grpc::ServerContextBase* ctx, std::string_view node_id) const {
  auto caller = Admit(ctx);
  if (!caller.ok()) return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(caller.status().message()));
  return MaySpeakFor(*caller, node_id);
}

void NodeCallers::Revoke(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  revoked_.insert(node_id);
}

void NodeCallers::OnRecords(const std::vector<Record>& records) {
  for (const Record& r : records) {
    if (const auto* revoked = std::get_if<NodeRevoked>(&r)) Revoke(revoked->node.str());
  }
}

bool NodeCallers::IsRevoked(std::string_view node_id) const {
  absl::ReaderMutexLock lock(&mu_);
  return revoked_.find(node_id) != revoked_.end();
}

}  // namespace torus::head
