// The flags of torus-head, parsed into HeadFlags (main.cc wires the head from them).
//
// Thread-safety: not thread-safe; used by main before the head starts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace torus::head {

struct HeadFlags {
  std::string host = "127.0.0.1";
  std::string advertise_host;  // "" = --host, or this machine's address for a wildcard --host
  int port = 6380;
  int dashboard_port = 8265;
  std::string session_dir;
  std::string token_file;
  int64_t heartbeat_period_ms = 500;
  int64_t node_timeout_ms = 3000;
  // UDP port of heartbeat datagrams: -1 = the gRPC port's number (any free one when that is taken), 0 = any free.
  int heartbeat_port = -1;
  bool no_heartbeat_datagrams = false;  // agents heartbeat on their streams only
  int64_t agent_rpc_timeout_ms = 2000;
  int64_t prepare_ttl_ms = 10'000;
  std::string python_path;
  int64_t stop_grace_ms = 2000;
  int64_t failure_window_ms = -1;  // -1: node timeout + 1 s
  bool dashboard_read_only = false;
  int64_t metrics_retention_s = 3600;
  int metrics_max_points = 720;
  std::string state_dir;          // default: SESSION_DIR/state
  bool no_journal = false;
  std::string journal_sync = "normal";
  std::string state_store;  // etcd://...: the journal in etcd instead of the state directory
  int64_t state_store_lease_s = 4;
  bool standby = false;     // wait while another head holds the journal
  std::string head_addresses;  // every head's gRPC address, "A,B": for jobs and the session's head_address
  std::string head_dashboard_addresses;  // every head's HTTP address: where gang workers report
  int64_t package_max_bytes = int64_t{512} << 20;
  int64_t package_unused_grace_s = 600;
  int64_t compact_after = 20'000;
  std::string autoscaler_config;  // "" = no autoscaler
  // The ingress of services: 8000, or an ephemeral port when --dashboard-port is 0 (every port ephemeral, as tests
  // and benchmarks run heads side by side); -1 = none.
  std::optional<int> serve_port;
  // TLS (docs/security.md): the cluster CA and certificates in the state directory's tls/. On unless --host is a
  // loopback address; --tls forces it on, --plaintext off (UseTls).
  bool tls = false;
  bool plaintext = false;
  std::string tls_ca;
  std::string tls_ca_key;
  std::string tls_san;  // more names of the head, "A,B"
  int64_t node_cert_validity_s = 86'400;
  int64_t join_token_ttl_s = 86'400;
  std::string join_token_file;  // a given join token (e.g. a Kubernetes Secret): "" = the head makes its own

  // Whether the head serves TLS: --tls (or a given CA or join token), or --host not a loopback address (127.x, ::1,
  // localhost) without --plaintext.
  bool UseTls() const;
};

// 127.0.0.0/8, ::1 or localhost.
bool IsLoopbackHost(const std::string& host);

// Parses the command line into `flags` (defaults applied). Returns an exit code when the process should exit now
// (--help: 0; a bad flag or combination: 2, after saying why on stderr), nullopt to run the head. TLS with a shared
// journal (--state-store, --head-addresses) needs the given secrets (--tls-ca, --tls-ca-key, --join-token-file).
std::optional<int> ParseHeadFlags(int argc, char** argv, HeadFlags* flags);

}  // namespace torus::head
