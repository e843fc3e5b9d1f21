#include "torus/head/head_flags.h"

#include <arpa/inet.h>

#include <filesystem>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "torus/common/parse_flags.h"

namespace torus::head {

bool IsLoopbackHost(const std::string& host) {
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return host == "::1" || host == "localhost";
}

bool HeadFlags::UseTls() const {
  return tls || !tls_ca.empty() || !join_token_file.empty() || (!plaintext && !IsLoopbackHost(host));
}
namespace {

// The python/ directory with torus_train.py: beside the source tree of a build (build/bin/../../python), in an
// install (bin/../share/torus/python), or in the source tree this binary was built from (a build folder elsewhere).
std::string DefaultPythonPath() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  for (auto candidate : {exe.parent_path() / "../../python", exe.parent_path() / "../share/torus/python",
                         std::filesystem::path(TORUS_SOURCE_DIR) / "python"}) {
    if (std::filesystem::exists(candidate / "torus_train.py", ec)) {
      return std::filesystem::weakly_canonical(candidate, ec).string();
    }
  }
  return "";
}

}  // namespace

std::optional<int> ParseHeadFlags(int argc, char** argv, HeadFlags* flags) {
  CLI::App app{"torus-head: the torus control plane (membership, cluster view, slices, reservations, jobs, runs)."};
  app.add_option("--host", flags->host, "Address to listen on; loopback unless told otherwise")->capture_default_str();
  app.add_option("--advertise-host", flags->advertise_host,
                 "Host (address or DNS name) given to clients and workers to reach this head; default: --host, or "
                 "this machine's address when --host is 0.0.0.0 or ::");
  app.add_option("--port", flags->port, "gRPC port; 0 picks a free one (written to SESSION_DIR/head_address)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--dashboard-port", flags->dashboard_port, "HTTP port of the JSON API; 0 picks a free one "
                                                           "(written to SESSION_DIR/dashboard_address)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--session-dir", flags->session_dir, "Directory for the token and the bound address")->required();
  app.add_option("--token-file", flags->token_file,
                 "Cluster token file; created (mode 0600) if missing [default: SESSION_DIR/token]");
  app.add_option("--heartbeat-period-ms", flags->heartbeat_period_ms, "Heartbeat period agents are told to use")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{10}, int64_t{60'000}));
  CLI::Option* heartbeat_port =
      app.add_option("--heartbeat-port", flags->heartbeat_port,
                     "UDP port of heartbeat datagrams (agents' beats that report nothing new); default: the number of "
                     "the gRPC port, or any free one when that is taken; 0 picks a free one")
          ->check(CLI::Range(0, 65535));
  app.add_flag("--no-heartbeat-datagrams", flags->no_heartbeat_datagrams,
               "Take every heartbeat on the agents' streams (agents fall back to them by themselves when datagrams "
               "go unanswered)")
      ->excludes(heartbeat_port);
  app.add_option("--node-timeout-ms", flags->node_timeout_ms, "A node silent this long is DEAD")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{50}, int64_t{3'600'000}));
  app.add_option("--agent-rpc-timeout-ms", flags->agent_rpc_timeout_ms,
                 "Deadline of each call to an agent (prepare, commit, release)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{10}, int64_t{600'000}));
  flags->python_path = DefaultPythonPath();
  app.add_option("--python-path", flags->python_path, "Directory with torus_train.py, put on gang workers' PYTHONPATH")
      ->capture_default_str();
  app.add_option("--failure-window-ms", flags->failure_window_ms,
                 "How long after a gang attempt failed its root cause may still be learned (default: the node "
                 "timeout + 1000)")
      ->check(CLI::Range(int64_t{0}, int64_t{600'000}));
  app.add_option("--stop-grace-ms", flags->stop_grace_ms, "Gang workers get SIGKILL this long after SIGTERM")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{600'000}));
  app.add_option("--prepare-ttl-ms", flags->prepare_ttl_ms,
                 "Agents drop a prepared reservation not committed within this time")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{3'600'000}));
  app.add_flag("--dashboard-read-only", flags->dashboard_read_only,
               "Let GET requests of the dashboard, /api/ and /metrics through without the token (logs and changes "
               "still need it)");
  app.add_option("--metrics-retention-s", flags->metrics_retention_s, "How long the head keeps sampled metrics")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{60}, int64_t{7 * 86400}));
  app.add_option("--metrics-max-points", flags->metrics_max_points, "Points kept per metric series at most")
      ->capture_default_str()
      ->check(CLI::Range(10, 100'000));
  app.add_option("--state-dir", flags->state_dir,
                 "Directory of the head's journal (its state survives a restart of the head) [default: SESSION_DIR/state]");
  app.add_option("--package-max-bytes", flags->package_max_bytes,
                 "Largest package (runtime_env working_dir or py_modules archive) the head accepts")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{16} << 30));
  app.add_option("--package-unused-grace-s", flags->package_unused_grace_s,
                 "A package no job or run uses is removed this long after its upload or its last user's end")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{30} * 86400));
  auto* no_journal =
      app.add_flag("--no-journal", flags->no_journal, "Keep the head's state in memory only: a restart forgets it");
  app.add_option("--state-store", flags->state_store,
                 "Keep the head's journal in etcd instead of --state-dir: etcd://HOST:PORT[,HOST:PORT...][/PREFIX] "
                 "(one head holds it at a time; the token and packages stay in --state-dir)")
      ->excludes(no_journal);
  app.add_option("--serve-port", flags->serve_port,
                 "Port of the ingress that routes requests to services' replicas (docs/serving.md); 0 picks a free "
                 "one, -1 runs none [default: 8000, or 0 with --dashboard-port 0]");
  app.add_option("--autoscaler-config", flags->autoscaler_config,
                 "Autoscaler configuration (YAML or JSON): node types of whole TPU slices launched for waiting groups "
                 "and removed when idle (docs/autoscaling.md); `torus up` writes one from the spec's node_types");
  app.add_option("--state-store-lease-s", flags->state_store_lease_s,
                 "With --state-store: the lease by which this head holds the journal; a head that stalls this long "
                 "loses it, and a standby takes over this long after the head's death at most")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{2}, int64_t{600}));
  app.add_flag("--standby", flags->standby,
               "With --state-store: while another head holds the journal, wait and take it when it is free (listen "
               "and serve only then)");
  // HOST:PORT[,HOST:PORT...]
  auto address_list = [](const std::string& value) -> std::string {
    for (absl::string_view part : absl::StrSplit(value, ',')) {
      const size_t colon = part.rfind(':');
      int port = 0;
      if (colon == absl::string_view::npos || colon == 0 || !absl::SimpleAtoi(part.substr(colon + 1), &port) ||
          port <= 0 || port > 65535) {
        return absl::StrCat("'", part, "' is not HOST:PORT; the form is HOST:PORT[,HOST:PORT...]");
      }
    }
    return "";
  };
  app.add_option("--head-addresses", flags->head_addresses,
                 "Every head's gRPC address, HOST:PORT[,HOST:PORT...], this one's included: given to jobs as "
                 "TORUS_ADDRESS and written to SESSION_DIR/head_address, so that they and clients follow the leader")
      ->check(address_list);
  app.add_option("--head-dashboard-addresses", flags->head_dashboard_addresses,
                 "Every head's HTTP address, HOST:PORT[,HOST:PORT...]: gang workers report to whichever leads")
      ->check(address_list);
  app.add_option("--journal-sync", flags->journal_sync,
                 "normal: a change survives a crash of the head (written to the OS before it is acknowledged); "
                 "full: also a crash of the machine (fsync per change)")
      ->capture_default_str()
      ->check(CLI::IsMember({"normal", "full"}));
  app.add_option("--compact-after", flags->compact_after, "Journal records past the snapshot that trigger a new snapshot")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{100}, int64_t{100'000'000}));
  auto* tls = app.add_flag("--tls", flags->tls,
                           "Serve gRPC and HTTP over TLS even on a loopback --host (on any other host it is the "
                           "default): a cluster CA in the state directory's tls/ (created on first start), a "
                           "certificate for each agent issued for the join token, node calls only with the node's "
                           "certificate (docs/security.md)");
  auto* plaintext = app.add_flag("--plaintext", flags->plaintext,
                                 "Serve without TLS on a --host that is not loopback: the cluster token and every "
                                 "request cross the network in clear text, and any holder of the token can act as a "
                                 "node")
                        ->excludes(tls);
  app.add_option("--tls-ca", flags->tls_ca, "The CA certificate to issue certificates with, instead of the one in "
                                           "tls/ (e.g. from a Kubernetes secret; `torus tls init` makes one)")
      ->excludes(plaintext);
  app.add_option("--tls-ca-key", flags->tls_ca_key, "The key of --tls-ca")->excludes(plaintext);
  app.add_option("--join-token-file", flags->join_token_file,
                 "A join token given in a file (e.g. a Kubernetes secret shared with the agents' pods; `torus tls "
                 "init` makes one): read at each join, so that rewriting it rotates it, and never expiring. "
                 "Default: the head makes its own in tls/join_token, valid --join-token-ttl-s")
      ->excludes(plaintext);
  app.add_option("--tls-san", flags->tls_san,
                 "More DNS names or addresses of the head for its certificate, \"A,B\" (the advertised host, "
                 "localhost and 127.0.0.1 are always in it)")
      ->excludes(plaintext);
  // At least 10 minutes: renewals are checked every 30 s and certificate files read again every 60 s.
  app.add_option("--node-cert-validity-s", flags->node_cert_validity_s,
                 "Life of the certificates the head issues (agents and the head renew theirs at two thirds)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{600}, int64_t{365} * 86'400));
  app.add_option("--join-token-ttl-s", flags->join_token_ttl_s,
                 "How long a join token is good for (a new one is made when the head starts after it expired)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{60}, int64_t{365} * 86'400));
  if (auto exit_code = ParseFlags(app, argc, argv)) return exit_code;
  // Heads that share a journal (etcd) must share the CA and join token too: agents that joined one must be accepted
  // by the next, on whatever machine it starts.
  if (flags->UseTls() && (!flags->state_store.empty() || !flags->head_addresses.empty()) &&
      (flags->tls_ca.empty() || flags->join_token_file.empty())) {
    std::cerr << "torus-head: TLS with --state-store or --head-addresses: every head of the cluster must issue with "
                 "one CA and accept one join token; give --tls-ca, --tls-ca-key and --join-token-file (`torus tls "
                 "init`, docs/deploy-ha.md), or --plaintext\n";
    return 2;
  }
  if (!flags->serve_port) flags->serve_port = flags->dashboard_port == 0 ? 0 : 8000;
  return std::nullopt;
}

}  // namespace torus::head
