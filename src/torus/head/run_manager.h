// RunManager: gang training runs. A run reserves a slice group (TPU) or a placement group (CPU/GPU), then starts
// one worker per bundle together, each with the distributed environment computed from the actual placement of
// this attempt (train/env_builder.h).
//
// Failure is a gang event: a worker exiting non-zero or killed, or a host of the run's slices lost (its group goes
// RESCHEDULING), stops every worker of the attempt (SIGTERM, then SIGKILL after the grace period) and counts one
// failure; unless max_failures is spent, attempt N+1 starts once the group is CREATED again (the same slices, a
// replacement, or a fallback shape), from the latest committed checkpoint. Success is every rank exiting 0.
//
// Status: PENDING -> RUNNING -> (RESTARTING -> RUNNING)* -> SUCCEEDED | FAILED | STOPPED.
//
// Thread-safety: thread-safe (one mutex); agent calls run on the TaskQueue without the lock.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "torus/common/clock.h"
#include "torus/head/agent_pool.h"
#include "torus/head/node_registry.h"
#include "torus/head/placement_group_manager.h"
#include "torus/head/task_queue.h"
#include "torus/train/run_spec.h"

namespace torus::head {

enum class RunStatus { kPending, kRunning, kRestarting, kSucceeded, kFailed, kStopped };
std::string RunStatusName(RunStatus s);

struct RankState {
  int rank = 0;
  std::string node_id;
  std::string address;
  std::string target;     // agent address:port
  std::string worker_id;
  std::string slice_name;
  std::vector<int> chips;
  std::vector<int> gpus;  // GPU indices on its host (CUDA_VISIBLE_DEVICES)
  bool exited = false;
  int exit_code = 0;
  int signal = 0;
};

struct RunAttempt {
  int number = 0;
  int64_t start_time_ms = 0;
  int64_t end_time_ms = 0;
  std::string end_reason;
  std::string checkpoint_dir;          // what it resumed from
  std::vector<RankState> ranks;
  std::vector<nlohmann::json> metrics;  // one entry per reported step: {"step", "metrics"} (rank 0's)
};

struct Run {
  std::string id;
  train::RunSpec spec;
  train::GangPlan plan;
  std::string group_id;
  std::string token;                   // workers report with it
  RunStatus status = RunStatus::kPending;
  std::string message;
  int failures = 0;
  std::vector<RunAttempt> attempts;
  int64_t created_time_ms = 0;
  int64_t end_time_ms = 0;
  bool stop_requested = false;
  // Reports of the current attempt: step -> rank -> staged checkpoint dir ("" = none).
  std::map<int64_t, std::map<int, std::string>> reports;
  std::vector<std::pair<int64_t, std::string>> committed;  // ascending by step
  std::string storage() const { return spec.run.storage_path + "/" + spec.run.name; }
  bool Terminal() const {
    return status == RunStatus::kSucceeded || status == RunStatus::kFailed || status == RunStatus::kStopped;
  }
};

class RunManager {
 public:
  struct Options {
    std::string report_base_url;   // "http://127.0.0.1:8265"; workers POST to <base>/api/v0/runs/<id>/report
    std::string python_path;       // prepended to PYTHONPATH so that `import torus_train` works
    int64_t stop_grace_ms = 2000;
  };
  RunManager(const NodeRegistry* registry, PlacementGroupManager* groups, AgentPool* agents, TaskQueue* tasks,
             const Clock* clock, Options options);
  void SetReportBaseUrl(const std::string& url);

  // Validates (PlanRun) and reserves; returns the run id. InvalidArgument names the field.
  absl::StatusOr<std::string> Submit(train::RunSpec spec);
  absl::StatusOr<nlohmann::json> Get(const std::string& id_or_name) const;
  std::vector<nlohmann::json> List() const;
  // False when already terminal.
  absl::StatusOr<bool> Stop(const std::string& id_or_name);
  // A worker's report (body: rank, attempt, step, metrics, checkpoint). Returns {"committed": bool, ...}.
  // Unauthenticated for a wrong token; FailedPrecondition for a stale attempt.
  absl::StatusOr<nlohmann::json> Report(const std::string& id, const std::string& bearer, const std::string& body);
  // One rank's output of an attempt (0 = the latest).
  absl::StatusOr<rpc::ReadWorkerLogReply> ReadLog(const std::string& id_or_name, int rank, int attempt,
                                                  int64_t offset, int64_t max_bytes);

  // Runs by status name (every status present) and the failed attempts of all runs, for /metrics.
  std::map<std::string, int> CountByStatus() const;
  int64_t TotalRestarts() const;

  void OnGroupState(const std::string& group_id, PgState state);
  void OnWorkerExited(const std::string& node_id, const std::string& worker_id, int exit_code, int signal);

 private:
  Run* FindLocked(const std::string& id_or_name);
  const Run* FindLocked(const std::string& id_or_name) const;
  void StartAttempt(const std::string& id);
  // Stops the current attempt's workers and decides what comes next; runs on the task queue.
  void FailAttempt(const std::string& id, int attempt, const std::string& reason);
  void FinishLocked(Run& run, RunStatus status, const std::string& message);
  nlohmann::json ToJson(const Run& run) const;

  const NodeRegistry* registry_;
  PlacementGroupManager* groups_;
  AgentPool* agents_;
  TaskQueue* tasks_;
  const Clock* clock_;
  Options options_;
  mutable std::mutex mu_;
  std::map<std::string, Run> runs_;                  // guarded by mu_
  std::map<std::string, std::string> run_of_group_;  // guarded by mu_
};

}  // namespace torus::head
