// NodeCallers: who may make a node's calls to the head (register, heartbeat, unregister, worker exits, metrics,
// package reads).
//
// Without node certificates (a plaintext cluster) the cluster token admits them, as it admits any client. With
// node certificates (TLS) only a node's own certificate does: the call must come from "torus-node:<id>" for the
// node it names, and that node must not be revoked; the cluster token alone is refused, so a process that read the
// token (a user's job) cannot register or heartbeat as a node.
//
// Thread-safety: thread-safe; Revoke/OnRecords may run while handlers check.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "torus/head/state/records.h"

namespace torus::head {

class NodeCallers {
 public:
  NodeCallers(std::string token, bool certificates);

  bool certificates() const { return certificates_; }

  // The caller's node id when it may make node calls at all ("" without certificates); UNAUTHENTICATED otherwise.
  absl::StatusOr<std::string> Admit(const grpc::ServerContextBase* ctx) const;
  // OK when a caller admitted as `caller_node` may make a call about `node_id`; PERMISSION_DENIED (saying why)
  // when it is another node's call or the node is revoked. Always OK without certificates.
  grpc::Status MaySpeakFor(std::string_view caller_node, std::string_view node_id) const;
  // Admit and MaySpeakFor in one; `node_id` "" accepts any node (a call about no node, e.g. a package read).
  grpc::Status Check(const grpc::ServerContextBase* ctx, std::string_view node_id) const;

  void Revoke(const std::string& node_id);
  // Takes up NodeRevoked records.
  void OnRecords(const std::vector<Record>& records);
  bool IsRevoked(std::string_view node_id) const;

 private:
  const std::string token_;
  const bool certificates_;
  mutable absl::Mutex mu_;
  std::set<std::string, std::less<>> revoked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace torus::head
