// NodeCertificateKeeper: the agent's own certificate in a cluster with TLS. On first start the agent exchanges the
// join token for a certificate (NodeAdmissionService.JoinCluster, over TLS that checks the head against the cluster
// CA); the key and certificate are kept in its directory and used while valid, so a restarted agent does not join
// again. Once two thirds of the certificate's life have passed it asks for a new one with its current certificate
// (RenewNodeCertificate) and writes it in place: servers and channels built from files() watch the files and take
// it up, so workers keep running through a renewal.
//
// Files in `dir`: ca.crt (the cluster CA, copied from --tls-ca), node.key (0600, kept across renewals), node.crt.
//
// Thread-safety: Obtain on one thread; the renewal thread runs on its own until Stop.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "torus/common/clock.h"
#include "torus/tls/credentials.h"

namespace torus::node {

struct NodeCertificateOptions {
  std::string ca_file;       // the cluster CA (--tls-ca)
  std::string join_token;    // for a first certificate
  std::string dir;           // where the agent keeps its key and certificate
  std::string node_id;
  std::string head_address;  // HOST:PORT, or several (tried in turn) "A,B"
};

class NodeCertificateKeeper {
 public:
  // Uses the certificate in `dir` when it is this node's, chains to the CA and has not expired (one past two thirds
  // of its life is renewed as soon as StartRenewal runs); otherwise joins (retrying while the head is unreachable or still knows the node as ALIVE, until `give_up_ms`).
  // PERMISSION_DENIED when the head refuses the join token or the node is revoked.
  static absl::StatusOr<std::unique_ptr<NodeCertificateKeeper>> Obtain(const NodeCertificateOptions& options,
                                                                      const Clock* clock, int64_t give_up_ms);
  ~NodeCertificateKeeper();  // Stop()

  tls::TlsFiles files() const;
  int64_t not_after_s() const;

  // Renews the certificate through `head` (a channel that presents this node's certificate) when due: at once, then
  // checking every `check_ms`.
  void StartRenewal(std::shared_ptr<grpc::Channel> head, int64_t check_ms = 60'000);
  void Stop();
  // One renewal now, whatever the certificate's age.
  absl::Status RenewNow(const std::shared_ptr<grpc::Channel>& head);

 private:
  NodeCertificateKeeper(NodeCertificateOptions options, const Clock* clock);
  absl::Status Join(int64_t give_up_ms);
  absl::Status Store(const std::string& cert_pem);
  bool Due() const;

  const NodeCertificateOptions options_;
  const Clock* const clock_;
  std::string key_pem_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  int64_t not_before_s_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t not_after_s_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread renewer_;
};

}  // namespace torus::node
