// AgentPool: every call the head makes to agents — two-phase bundle reservation, worker control, logs and free
// ports — behind one interface, so that the head's mechanisms can be tested against a fake (fake_agent_pool.h)
// and run against gRPC (grpc_agent_pool.h) in production.
//
// Calls that take many entries run them in parallel and return once every agent answered or the deadline passed,
// one result per entry in order (DEADLINE_EXCEEDED or UNAVAILABLE for an agent that did not answer).
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "torus/head/state/model.h"
#include "torus/node.pb.h"

namespace torus::head {

// The bundles one agent is asked to hold for one ledger group, in one placement attempt.
struct AgentBundles {
  NodeId node;
  std::string target;        // "address:agent_port"
  std::string ledger_group;
  uint64_t attempt = 0;
  std::vector<HeldBundle> bundles;  // ledger_index, resources, chips and gpus are sent
  // The group's only participant: Prepare holds the bundles committed at once (one-phase commit), and a failed
  // Prepare may have held them (a lost answer), so it is undone with Release rather than Cancel.
  bool commit_at_once = false;
};

// Groups bundles by (node, ledger group); `targets` maps node id -> "address:agent_port". Bundles of nodes without
// a target are left out.
std::vector<AgentBundles> GroupByAgent(const std::vector<HeldBundle>& bundles,
                                       const std::map<NodeId, std::string>& targets);

// A worker to start. With `bundle` >= 0 the agent starts it on that bundle of `ledger_group` (committed, not
// released) and gives it the bundle's devices; otherwise it holds no bundle.
struct StartSpec {
  WorkerId id;
  std::string owner;                        // "job:<id>" or "run:<id>:a<n>", for the agent's listing
  std::vector<std::string> argv;
  std::map<std::string, std::string> env_set;
  std::vector<std::string> env_unset;
  std::string cwd;
  std::optional<Package> working_dir_package;  // the agent fetches and unpacks it; the worker runs in it
  std::vector<Package> py_module_packages;      // likewise, each put first on PYTHONPATH
  std::string ledger_group;
  int bundle = -1;
  bool only_if_new = false;  // a start sent again: ALREADY_EXISTS when the agent knows the worker, even ended
};

struct LogChunk {
  std::string data;
  int64_t next_offset = 0;
  bool finished = false;  // the worker has exited and its log was read to the end
};

// One read of a worker's output: up to `max_bytes` from `offset`; with `wait_ms` > 0 the agent waits up to that
// long for output or the worker's exit when there is none yet.
struct LogRead {
  std::string target;
  WorkerId worker;
  int64_t offset = 0;
  int64_t max_bytes = 0;
  int64_t wait_ms = 0;
};

class AgentPool {
 public:
  virtual ~AgentPool() = default;

  // Prepares each entry's bundles (committed at once for an entry with commit_at_once), all in parallel.
  virtual std::vector<absl::Status> Prepare(const std::vector<AgentBundles>& entries, int64_t ttl_ms) = 0;
  virtual std::vector<absl::Status> Commit(const std::vector<AgentBundles>& entries) = 0;
  // Drops each entry's prepares of its attempt; errors are ignored (agents drop stale prepares on their own).
  virtual void Cancel(const std::vector<AgentBundles>& entries) = 0;
  // Releases the listed bundles (by ledger index) of each entry's ledger group; errors are ignored (a dead agent
  // holds nothing any more; a live one that missed it is told again when it registers).
  virtual void Release(const std::vector<AgentBundles>& entries) = 0;

  // Starts workers in parallel; the pid of each, or why not.
  virtual std::vector<absl::StatusOr<int64_t>> StartWorkers(
      const std::vector<std::pair<std::string, StartSpec>>& targets_and_specs) = 0;
  // Stops workers (SIGTERM, SIGKILL after `grace_ms`) in parallel; errors are ignored (an agent that does not
  // answer is dead, or will be told when it registers again).
  virtual void StopWorkers(const std::vector<std::pair<std::string, WorkerId>>& targets_and_workers,
                           int64_t grace_ms) = 0;
  // Workers' output, one chunk per read: one call per agent, carrying all its reads, the agents in parallel. A read
  // with wait_ms > 0 makes its agent's call wait until one of that agent's reads has output, or all their workers
  // have ended; once an agent answers with output, the other agents' calls are cancelled and their reads answer
  // "nothing new" (no data, the read's offset, not finished).
  virtual std::vector<absl::StatusOr<LogChunk>> ReadWorkerLogs(const std::vector<LogRead>& reads) = 0;
  absl::StatusOr<LogChunk> ReadWorkerLog(const LogRead& read) { return ReadWorkerLogs({read}).front(); }
  // A TCP port that was free on the agent's host a moment ago.
  virtual absl::StatusOr<int> FreePort(const std::string& target) = 0;
  // The host's log files (agent, libtpu, workers) and a piece of one.
  virtual absl::StatusOr<rpc::ListLogsReply> ListLogs(const std::string& target) = 0;
  virtual absl::StatusOr<rpc::ReadLogReply> ReadLog(const std::string& target, const rpc::ReadLogRequest& request) = 0;
};

}  // namespace torus::head
