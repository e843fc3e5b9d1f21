// The secrets a cluster's heads are given rather than make: the cluster CA (its certificate and key) and a join
// token. `torus tls init DIR` writes them for a Kubernetes Secret (deploy/, docs/gke.md); `torus up --ha` writes them
// into its session for both heads. A head given them (--tls-ca, --tls-ca-key, --join-token-file) issues with that CA
// and accepts that join token, which does not expire: whoever holds the file rotates it by rewriting it.
//
// Files in DIR: ca.crt (0644), ca.key (0600), join_token (0600, the token and a newline).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace torus::tls {

struct ClusterSecretFiles {
  std::string ca_cert;     // DIR/ca.crt
  std::string ca_key;      // DIR/ca.key
  std::string join_token;  // DIR/join_token
};

ClusterSecretFiles ClusterSecretsIn(const std::string& dir);

// Creates DIR (0700) if needed and writes a new CA (valid 10 years from now_s) and join token into it. ALREADY_EXISTS,
// naming the file, when one of them is there: a cluster's CA is never replaced by accident.
absl::StatusOr<ClusterSecretFiles> WriteClusterSecrets(const std::string& dir, int64_t now_s);

// A new join token: "join-" and 40 hex digits from the system's random source.
absl::StatusOr<std::string> NewJoinToken();

// The join token in `path`: its first line, blanks trimmed. INVALID_ARGUMENT naming the file when it is empty or
// shorter than 16 characters; NOT_FOUND / PERMISSION_DENIED when it cannot be read.
absl::StatusOr<std::string> ReadJoinToken(const std::string& path);

}  // namespace torus::tls
