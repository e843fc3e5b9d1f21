// ClusterAuthority: the head's side of the cluster's TLS. It holds the cluster CA (created in its directory on first
// start, or given), issues the head its own certificate and renews it, keeps the join token, and issues nodes their
// certificates: first for the join token (as kubeadm's bootstrap tokens are exchanged for a kubelet's certificate),
// then renewals for the node's current certificate.
//
// Files in `dir` (keys 0600):
//   ca.crt, ca.key     the cluster CA (unless --tls-ca/--tls-ca-key name another)
//   head.crt, head.key the head's certificate ("torus-head", with the head's hosts as subject alternative names)
//   join_token         the join token on its first line; "expires <unix seconds>" on the second (unless the join
//                      token is given: --join-token-file, read at each join and never expiring; see cluster_secrets.h)
//
// Thread-safety: thread-safe; StartRenewal and Stop from one thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "torus/common/clock.h"
#include "torus/tls/credentials.h"
#include "torus/tls/pki.h"

namespace torus::head {

struct AuthorityOptions {
  std::string dir;
  // Another CA to issue with (both or neither): files, e.g. mounted from a Kubernetes secret.
  std::string ca_cert_file;
  std::string ca_key_file;
  // Subject alternative names of the head's certificate: DNS names or IP addresses clients reach it at
  // (localhost and 127.0.0.1 are always added).
  std::vector<std::string> head_hosts;
  int64_t node_validity_s = 86'400;
  int64_t head_validity_s = 86'400;
  int64_t join_token_ttl_s = 86'400;
  // A join token given in a file (e.g. from a Kubernetes Secret, shared by several heads): read at each join, so that
  // rewriting the file rotates it; it does not expire. "": the head makes its own, valid join_token_ttl_s.
  std::string join_token_file;
};

struct NodeCertificate {
  std::string cert_pem;
  std::string ca_pem;
  int64_t not_after_s = 0;
};

class ClusterAuthority {
 public:
  // Loads or creates the CA, issues the head's certificate and, unless a current one exists, a join token.
  // Errors name the file or option.
  static absl::StatusOr<std::unique_ptr<ClusterAuthority>> Open(AuthorityOptions options, const Clock* clock);

  // The head's files: CA, certificate, key (for its server and its calls to agents).
  tls::TlsFiles head_files() const;
  const std::string& ca_pem() const { return ca_.cert_pem; }
  std::string join_token_path() const {
    return options_.join_token_file.empty() ? options_.dir + "/join_token" : options_.join_token_file;
  }

  // A certificate for node `node_id`, for the current join token: PERMISSION_DENIED for another token or an expired
  // one, INVALID_ARGUMENT for a bad node id or signing request.
  // Certificates of nodes and core workers name no address or host (one a caller could choose would let it pose as
  // the head to a browser or HTTPS client that trusts the cluster CA): their only name is tls::kMemberServerName,
  // which torus's channels to members ask for (tls::NameMembersByIdentity); the identity is what they check.
  absl::StatusOr<NodeCertificate> IssueForJoin(std::string_view join_token, std::string_view node_id,
                                               std::string_view csr_pem) const;
  // A certificate for node `node_id` (the caller proved it holds one): INVALID_ARGUMENT for a bad request.
  absl::StatusOr<NodeCertificate> IssueForNode(std::string_view node_id, std::string_view csr_pem) const;

  // A certificate for a core worker's port, identity "torus-worker:<random id>" (the caller holds the cluster token):
  // INVALID_ARGUMENT for a bad request.
  absl::StatusOr<NodeCertificate> IssueForWorker(std::string_view csr_pem) const;

  // Issues the head a new certificate (same key) once two thirds of the current one's life have passed; true when
  // it did. Servers and channels built from head_files() take it up when they next read the files.
  absl::StatusOr<bool> RenewHeadIfDue();

  // A new join token valid for the configured time, written to join_token_path(); the old one stops working.
  // FAILED_PRECONDITION when the join token is given (whoever gave the file rotates it).
  absl::StatusOr<std::string> RotateJoinToken();

  // Copies the CA certificate (ca.crt) and the join token (join_token, 0600) into `dir`, a session directory where
  // clients find the CA and `torus up`/`torus start` find both for the agents they start.
  absl::Status Publish(const std::string& dir) const;

  // Checks every `check` on a thread of its own whether the head's certificate is due (RenewHeadIfDue) until Stop.
  void StartRenewal(std::chrono::milliseconds check = std::chrono::seconds(30));
  void Stop();
  ~ClusterAuthority();  // Stop()

 private:
  ClusterAuthority(AuthorityOptions options, const Clock* clock, tls::KeyAndCertificate ca);
  int64_t NowSeconds() const { return clock_->WallMillis() / 1000; }
  absl::Status IssueHead();
  absl::StatusOr<NodeCertificate> Issue(std::string_view node_id, std::string_view csr_pem) const;
  absl::StatusOr<NodeCertificate> IssueAs(const std::string& identity, std::string_view csr_pem) const;

  const AuthorityOptions options_;
  const Clock* const clock_;
  const tls::KeyAndCertificate ca_;
  std::thread renewer_;
  absl::Mutex stop_mu_;
  bool stopping_ ABSL_GUARDED_BY(stop_mu_) = false;
  mutable absl::Mutex mu_;
  std::string join_token_ ABSL_GUARDED_BY(mu_);
  int64_t join_token_expires_s_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t head_not_before_s_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t head_not_after_s_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace torus::head
