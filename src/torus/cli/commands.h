// The `torus` subcommands. Each returns the process exit code: 0 success, 1 failure, 2 bad input.
// Thread-safety: each runs on the CLI's main thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace torus::cli {

// Where to find the head; unset fields come from the environment or the latest session.
struct HeadFlags {
  std::optional<std::string> address;
  std::optional<std::string> token;
  std::optional<std::string> dashboard_address;  // the head's HTTP API (jobs, runs)
};

struct JobSubmitFlags {
  std::vector<std::string> command;
  bool no_wait = false;
  std::string submission_id;
  std::string resources;       // JSON object
  std::string label_selector;  // JSON object
  std::vector<std::string> env;
  std::string working_dir;               // a local directory (uploaded) or a package URI
  std::vector<std::string> py_modules;   // likewise, each put on PYTHONPATH
  std::vector<std::string> excludes;     // gitignore patterns left out of what is uploaded
};

struct TrainFlags {
  std::vector<std::string> command;
  std::optional<int> num_workers;
  std::string accelerator_type;
  std::string topology;
  int num_slices = 1;
  std::optional<int> chips_per_host;
  bool use_gpu = false;
  std::string resources_per_worker;  // JSON object
  std::string placement_strategy;
  std::string label_selector;        // JSON object
  std::vector<std::string> fallbacks;
  int max_failures = 0;
  std::string name;
  std::string storage_path;
  std::optional<int> checkpoints_to_keep;
  int placement_timeout_s = 0;
  std::vector<std::string> env;
  std::string working_dir;               // a local directory (uploaded) or a package URI
  std::vector<std::string> py_modules;
  std::vector<std::string> excludes;
  bool no_wait = false;
};

// Flags passed through to an agent.
struct AgentFlags {
  std::string labels;
  std::string labels_file;
  std::string resources;
  std::optional<double> num_cpus;
  std::optional<std::string> memory;  // bytes, or with a suffix (16Gi)
  std::optional<std::string> object_store_memory;
  std::string node_ip = "127.0.0.1";
  std::string node_id;
  std::string dev_root;
  std::string sys_root;
  std::string metadata_url;
  std::optional<int> chips_per_host;
  std::optional<std::string> slice_name;
  std::string task_python;  // the interpreter of task and actor workers (the agent's default: /usr/bin/python3)
};

struct StartFlags {
  bool head = false;
  std::string address;               // join this head (without --head)
  std::string token;
  std::string token_file;
  std::string host = "127.0.0.1";    // head listen address
  int port = 6380;
  int dashboard_port = 8265;
  std::optional<int> serve_port;     // head: the ingress; unset: 8000, or any free port with --dashboard-port 0
  int64_t heartbeat_period_ms = 500;
  int64_t node_timeout_ms = 3000;
  bool no_local_node = false;        // --head without an agent on this machine
  bool dashboard_read_only = false;  // head: GET needs no token
  std::string state_dir;             // head: its journal (an existing one brings the cluster's state back)
  std::string state_store;           // head: its journal in etcd instead (etcd://...)
  std::optional<int64_t> package_unused_grace_s;  // head: when unused packages are removed
  bool tls = false;                  // head: gRPC and HTTPS with a cluster CA (docs/security.md), even on loopback
  bool plaintext = false;            // head: no TLS on a --host that is not loopback (where TLS is the default)
  std::string tls_ca;                // joining: the cluster CA's certificate (TLS with a node certificate)
  std::string join_token_file;       // joining with --tls-ca: the join token's file
  AgentFlags agent;
};

struct UpFlags {
  std::string spec_path;
  int port = 6380;
  int dashboard_port = 8265;
  std::optional<int> serve_port;  // the ingress; unset: 8000, or any free port with --dashboard-port 0
  int64_t agent_rpc_timeout_ms = 2000;
  int64_t prepare_ttl_ms = 10'000;
  int64_t heartbeat_period_ms = 500;
  int64_t node_timeout_ms = 3000;
  int wait_s = 60;
  bool tpu_sim = true;  // start a simulated libtpu metrics server (torus-tpu-sim) for each simulated TPU host
  bool no_journal = false;  // the head keeps its state in memory only
  std::string state_store;  // the head's journal in etcd (etcd://...)
  bool ha = false;          // a local 3-member etcd and two heads, one leading and one standing by
  bool netns = false;       // each simulated host but the head's in a network namespace of its own (netns.h)
  bool dashboard_read_only = false;
  std::optional<int64_t> metrics_period_ms;  // agents' sampling period (their default when unset)
  std::optional<int64_t> package_unused_grace_s;  // the head's default when unset
  // TLS (the head serves gRPC and HTTPS with a cluster CA; agents join with node certificates): with --tls, and by
  // default with --netns (hosts talk across a bridge), unless --plaintext.
  bool tls = false;
  bool plaintext = false;
  bool UseTls() const { return tls || (netns && !plaintext); }
};

struct PgCreateFlags {
  std::string bundles;                 // JSON list
  std::string strategy = "PACK";
  std::string bundle_label_selector;   // JSON list or object
  std::vector<std::string> fallbacks;  // JSON objects
  std::string name;
  double wait_s = 0;
  double timeout_s = 0;
  bool json = false;
};

struct SliceReserveFlags {
  std::string accelerator_type;
  std::string topology;
  int num_slices = 1;
  int chips_per_host = 0;
  bool per_chip = false;
  std::string label_selector;          // JSON object
  std::vector<std::string> fallbacks;  // TYPE:TOPOLOGY[:N]
  std::string resources_per_bundle;    // JSON object
  std::string name;
  double wait_s = 0;
  double timeout_s = 0;
  bool json = false;
};

int CmdStart(const StartFlags& flags);
// Starts the latest session's head again (after a crash, or stopping the one that runs), from its journal.
int CmdHeadRestart();
int CmdStop();
int CmdUp(const UpFlags& flags);
// Prints the dashboard's login URL of the latest session.
int CmdDashboard();
int CmdDown();
int CmdStatus(const HeadFlags& head, bool json);
int CmdNodes(const HeadFlags& head, bool json, bool alive_only);
int CmdNodeMarkDead(const HeadFlags& head, const std::string& node_id, const std::string& reason, bool revoke);
int CmdNodeRestart(const std::string& name);
// torus node add-slice SLICE --node-type T --capacity-class C: starts every simulated host of a slice of one of the
// session's node types (the local autoscaler provider runs it); remove-slice SLICE stops them all.
struct AddSliceFlags {
  std::string slice;
  std::string node_type;
  std::string capacity_class = "on-demand";
  std::string session;  // "" = the latest session
};
int CmdNodeAddSlice(const AddSliceFlags& flags);
int CmdNodeRemoveSlice(const std::string& slice, const std::string& session);
// torus autoscaler check FILE: parses an autoscaler config (torus-head --autoscaler-config) and prints its node types,
// or the error (exit 2).
int CmdAutoscalerCheck(const std::string& path);

// torus tls init DIR: writes a new cluster CA (ca.crt, ca.key) and join token (join_token) into DIR for heads given
// them (--tls-ca, --tls-ca-key, --join-token-file) and their agents, e.g. as a Kubernetes Secret. Exit 1 when DIR
// already holds one of them (never replaced), 2 for another error.
int CmdTlsInit(const std::string& dir);

// torus serve deploy FILE [--wait] | status NAME [--json] | list [--json] | delete NAME
int CmdServeDeploy(const HeadFlags& head, const std::string& path, bool wait, int timeout_s);
int CmdServeStatus(const HeadFlags& head, const std::string& name, bool json);
int CmdServeList(const HeadFlags& head, bool json);
int CmdServeDelete(const HeadFlags& head, const std::string& name);
// torus serve ingress [--host H] [--port P]: an ingress apart from the head, in the foreground until SIGTERM/SIGINT.
int CmdServeIngress(const HeadFlags& head, const std::string& host, int port);
// torus node cut|heal NAME: takes a simulated host's network link down or up (`torus up --netns`).
int CmdNodeLink(const std::string& name, bool up);
int CmdNodeLedger(const HeadFlags& head, const std::string& node_id, bool json);
int CmdPgCreate(const HeadFlags& head, const PgCreateFlags& flags);
int CmdSliceReserve(const HeadFlags& head, const SliceReserveFlags& flags);
int CmdPgList(const HeadFlags& head, bool include_removed, bool json);
int CmdPgGet(const HeadFlags& head, const std::string& id, double wait_s, bool json);
int CmdPgRemove(const HeadFlags& head, const std::string& id);

int CmdJobSubmit(const HeadFlags& head, const JobSubmitFlags& flags);
int CmdJobStatus(const HeadFlags& head, const std::string& id, bool json);
int CmdJobLogs(const HeadFlags& head, const std::string& id, bool follow, std::optional<int> rank, int attempt);
int CmdJobStop(const HeadFlags& head, const std::string& id);
int CmdJobList(const HeadFlags& head, bool json);
int CmdJobDelete(const HeadFlags& head, const std::string& id);

int CmdTrain(const HeadFlags& head, const TrainFlags& flags);
int CmdTrainStatus(const HeadFlags& head, const std::string& id, bool json);
int CmdTrainStop(const HeadFlags& head, const std::string& id);
int CmdTrainList(const HeadFlags& head, bool json);
struct ListTasksFlags {
  std::string state;
  std::string job_id;
  std::string name;
  int limit = 100;
  bool summary = false;
  bool json = false;
};
// torus list tasks [--state S] [--job-id J] [--name F] [--limit N] [--summary] [--json]
int CmdListTasks(const HeadFlags& head, const ListTasksFlags& flags);
// torus list actors [--state S] [--job-id J] [--json]
int CmdListActors(const HeadFlags& head, const std::string& state, const std::string& job_id, bool json);

}  // namespace torus::cli
