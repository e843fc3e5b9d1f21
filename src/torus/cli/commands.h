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
};

// Flags passed through to an agent.
struct AgentFlags {
  std::string labels;
  std::string labels_file;
  std::string resources;
  std::optional<double> num_cpus;
  std::optional<std::string> memory;  // bytes, or with a suffix (16Gi)
  std::string node_ip = "127.0.0.1";
  std::string node_id;
  std::string dev_root;
  std::string sys_root;
  std::string metadata_url;
  std::optional<int> chips_per_host;
  std::optional<std::string> slice_name;
};

struct StartFlags {
  bool head = false;
  std::string address;               // join this head (without --head)
  std::string token;
  std::string token_file;
  std::string host = "127.0.0.1";    // head listen address
  int port = 6380;
  int dashboard_port = 8265;
  int64_t heartbeat_period_ms = 500;
  int64_t node_timeout_ms = 3000;
  bool no_local_node = false;        // --head without an agent on this machine
  AgentFlags agent;
};

struct UpFlags {
  std::string spec_path;
  int port = 6380;
  int dashboard_port = 8265;
  int64_t heartbeat_period_ms = 500;
  int64_t node_timeout_ms = 3000;
  int wait_s = 60;
};

int CmdStart(const StartFlags& flags);
int CmdStop();
int CmdUp(const UpFlags& flags);
int CmdDown();
int CmdStatus(const HeadFlags& head, bool json);
int CmdNodes(const HeadFlags& head, bool json, bool alive_only);
int CmdNodeMarkDead(const HeadFlags& head, const std::string& node_id, const std::string& reason);
int CmdNodeRestart(const std::string& name);

}  // namespace torus::cli
