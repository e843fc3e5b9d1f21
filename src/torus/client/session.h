// Finding a running head: its address and token, from flags, the environment, or this machine's latest session.
//
// Sessions live under the temp root (`$TORUS_TEMP_DIR`, default /tmp/torus) as `session_<time>_<pid>/`, with a
// `session_latest` symlink to the newest. A head's session holds `head_address` and `token`.
//
// Thread-safety: pure functions over the file system.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace torus::client {

// $TORUS_TEMP_DIR, else /tmp/torus.
std::string TempRoot();

// <root>/session_latest resolved; NotFound when there is none.
absl::StatusOr<std::string> LatestSessionDir(const std::string& root);

struct HeadEndpoint {
  std::string address;  // host:port
  std::string token;
  // Where the address came from when it was read from a session (its dashboard_address): the HTTP client reads it
  // again when the head at `address` cannot be reached, and follows a head that took over elsewhere.
  std::string address_file;
  // The cluster CA (a file) when the head serves TLS: TORUS_TLS_CA, else the session's ca.crt when the address came
  // from that session. "" = plaintext.
  std::string tls_ca;
};

// Resolves each of address and token, in order: the explicit value, the environment (TORUS_ADDRESS,
// TORUS_TOKEN), the latest session's files; and the CA as HeadEndpoint::tls_ca says. Errors say what is missing and
// how to give it.
absl::StatusOr<HeadEndpoint> ResolveHead(std::optional<std::string> address, std::optional<std::string> token,
                                         const std::string& root);

// The head's HTTP address (host:port) and token: TORUS_DASHBOARD_ADDRESS / TORUS_TOKEN, else the latest session.
absl::StatusOr<HeadEndpoint> ResolveHttp(std::optional<std::string> address, std::optional<std::string> token,
                                         const std::string& root);

// The session's cluster CA (<session>/ca.crt, which a head with TLS writes), or "" when it has none.
std::string SessionTlsCa(const std::string& session);

// Reads a small text file and trims it; NotFound names the path.
absl::StatusOr<std::string> ReadTrimmed(const std::string& path);

}  // namespace torus::client
