// NodeAdmissionServiceImpl: the gRPC side of node certificates (clusters with TLS). JoinCluster exchanges the join
// token for a node's first certificate; RenewNodeCertificate gives a node that presents its certificate a new one.
// A revoked node gets none (PERMISSION_DENIED); nor does a join for a node that is ALIVE (ALREADY_EXISTS: that node
// renews with its own certificate, so the join token cannot take over a running node's identity).
// IssueWorkerCertificate gives a caller with the cluster token a certificate for a core worker's port.
//
// Thread-safety: thread-safe; handlers run on gRPC's callback threads.
#pragma once

#include <string>

#include "torus/head.grpc.pb.h"
#include "torus/head/admission/cluster_authority.h"
#include "torus/head/state/state_store.h"

namespace torus::head {

class NodeAdmissionServiceImpl final : public rpc::NodeAdmissionService::CallbackService {
 public:
  NodeAdmissionServiceImpl(const ClusterAuthority* authority, const StateStore* store, std::string token);

  grpc::ServerUnaryReactor* JoinCluster(grpc::CallbackServerContext* ctx, const rpc::JoinClusterRequest* request,
                                        rpc::NodeCertificateReply* reply) override;
  grpc::ServerUnaryReactor* RenewNodeCertificate(grpc::CallbackServerContext* ctx,
                                                 const rpc::RenewNodeCertificateRequest* request,
                                                 rpc::NodeCertificateReply* reply) override;
  grpc::ServerUnaryReactor* IssueWorkerCertificate(grpc::CallbackServerContext* ctx,
                                                   const rpc::IssueWorkerCertificateRequest* request,
                                                   rpc::NodeCertificateReply* reply) override;

 private:
  const ClusterAuthority* const authority_;
  const StateStore* const store_;
  const std::string token_;
};

}  // namespace torus::head
