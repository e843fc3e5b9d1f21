// Launching a head, agents and simulated libtpu metrics servers (torus-tpu-sim) into a session, and waiting until
// they are serving. Each launched daemon is recorded in the session's `processes` file (roles "head", "node",
// "sim"); each agent's full launch (argv and environment) is saved as `<session>/agents/<name>.json` so that
// `torus node restart NAME` can repeat it.
//
// Thread-safety: used from the CLI's main thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/cli/daemons.h"

namespace torus::cli {

struct HeadLaunch {
  std::string session;
  std::string host = "127.0.0.1";
  int port = 6380;
  int dashboard_port = 8265;
  int64_t heartbeat_period_ms = 500;
  int64_t node_timeout_ms = 3000;
  int64_t agent_rpc_timeout_ms = 2000;
  int64_t prepare_ttl_ms = 10'000;
  bool dashboard_read_only = false;
  std::string state_dir;  // empty: the head's default, <session>/state
  bool no_journal = false;
  std::string state_store;  // empty: the journal in state_dir
  std::optional<int64_t> package_unused_grace_s;  // unset: the head's default
  // Several heads on one journal (`torus up --ha`): each has a name ("head-a"), stands by while another leads, and
  // knows every head's address (written as the session's head_address by the one that leads).
  std::string name = "head";   // its record in `processes`, its log logs/<name>.log, its launch <name>.json
  bool standby = false;
  std::string head_addresses;            // "" for a lone head
  std::string head_dashboard_addresses;  // every head's HTTP address; "" for a lone head
  std::string autoscaler_config;         // --autoscaler-config: "" = no autoscaler
  std::optional<int> serve_port;         // --serve-port: unset = the head's default
  // TLS: on with `tls`, off with `plaintext`, otherwise the head's default (on unless `host` is loopback). The
  // session gets ca.crt and join_token when it is on.
  bool tls = false;
  bool plaintext = false;
  // Secrets several heads share (tls/cluster_secrets.h): --tls-ca, --tls-ca-key, --join-token-file; "" = the head's.
  std::string tls_ca;
  std::string tls_ca_key;
  std::string join_token_file;
  std::string tls_san;  // more names for the head's certificate, "A,B"
};

// The flags that make an agent of `session` talk TLS with node certificates (--tls-ca, --join-token-file), when the
// session's head serves TLS (it left ca.crt and join_token there); none otherwise.
std::vector<std::string> SessionTlsAgentArgs(const std::string& session);

// Starts torus-head and waits (up to 15 s) until it has written its address (a standby: until it stands by or
// leads); returns the session's head_address. The launch is saved as `<session>/<name>.json`, so that `torus head
// restart` can repeat it. On failure the error includes the end of the head's log.
absl::StatusOr<std::string> LaunchHead(const HeadLaunch& launch);

// Starts the latest session's head again with its saved launch, on the ports it served on before (agents and
// workers know them), after stopping a head of that session that still runs. Returns "host:port".
absl::StatusOr<std::string> RelaunchHead(const std::string& session);

// Stops every process a session recorded, in the order that lets each go cleanly: agents first (they unregister
// while a head still listens, and stop reading their simulators), then simulators, heads, and etcd members last;
// then removes its network namespaces (`torus up --netns`). Returns how many processes were running.
int StopSession(const std::string& session);

// The names of a session's heads, in launch order: {"head"}, or {"head-a", "head-b"} after `torus up --ha`.
std::vector<std::string> HeadNames(const std::string& session);

// Of a session with several heads: starts again, as standbys with their saved launches, the heads that are not
// running; returns their names (empty when every head runs).
absl::StatusOr<std::vector<std::string>> RestartStoppedHeads(const std::string& session);

struct AgentLaunch {
  std::string session;
  std::string name;                        // host name within the session; also the log file name
  std::vector<std::string> args;           // torus-node flags
  std::map<std::string, std::string> env;  // the agent's whole environment
};

// Starts one torus-node (in its host's network namespace when the session made one), records it, and saves its
// launch for restarts.
absl::StatusOr<pid_t> LaunchAgent(const AgentLaunch& launch);
// Reads a saved launch.
absl::StatusOr<AgentLaunch> LoadAgentLaunch(const std::string& session, const std::string& name);

// A simulator of libtpu's metrics service for one simulated TPU host of `torus up` (never a real host).
struct TpuSimLaunch {
  std::string session;
  std::string name;                        // the simulated host's name; also the log file name
  std::string generation;                  // "v6e", "v5litepod", ...
  int chips = 0;
  std::string worker_mark;                 // the host agent's work dir (its workers' TORUS_WORKER_OF)
  std::string log_dir;                     // libtpu-style logs, also given to the agent as --tpu-log-dir
  std::map<std::string, std::string> env;  // the simulator's whole environment
};

// Starts torus-tpu-sim on 127.0.0.1 (of its host's network namespace, if any) with an ephemeral port and records it
// (role "sim"); does not wait.
// It writes its port to TpuSimPortFile(session, name) once serving; log in <session>/logs/sim-<name>.log.
absl::StatusOr<pid_t> StartTpuSim(const TpuSimLaunch& launch);
std::string TpuSimPortFile(const std::string& session, const std::string& name);
// Waits until the simulator `pid` of host `name` has written its port file; returns the port. Fails, with the end
// of its log, if it exits first or `timeout` passes.
absl::StatusOr<int> WaitForTpuSimPort(const std::string& session, const std::string& name, pid_t pid,
                                      std::chrono::milliseconds timeout);

// Waits on the head until every id in `node_ids` is ALIVE, or `timeout` passes (with one agent, the end of its log
// is in the error: why it cannot register), or an agent in `agents` (name -> pid) exits (its log tail is in the
// error).
absl::Status WaitForNodes(const std::string& address, const std::string& token, const std::set<std::string>& node_ids,
                          const std::map<std::string, pid_t>& agents, const std::string& session,
                          std::chrono::milliseconds timeout);

// The dashboard's login URL of a session: http://<dashboard address>/?token=<token>; NotFound without a head there.
absl::StatusOr<std::string> DashboardLoginUrl(const std::string& session);

// The environment of this process minus what would mislead an agent's detection on another simulated host
// (TPU_*, MEGASCALE_*, TORUS_NODE_*, TORUS_TOKEN, TORUS_ADDRESS, CUDA_VISIBLE_DEVICES).
std::map<std::string, std::string> CleanAgentEnvironment();

}  // namespace torus::cli
