// JobManager: submitted jobs (Ray Jobs API shaped). A job's entrypoint runs as one supervised process on a node the
// scheduler picks: with entrypoint resources, the job holds a one-bundle placement group (with its label selector)
// and runs where it was placed; without, it runs on the head host's agent if that matches its label selector, else
// on the lowest-id alive node that does. A job given TPU chips sees only its aligned block (TPU_VISIBLE_CHIPS).
//
// Status: PENDING -> RUNNING -> SUCCEEDED | FAILED | STOPPED (PENDING may end STOPPED or FAILED); a terminal status
// never changes. Stop sends SIGTERM to the entrypoint's process group and SIGKILL 3 s later.
//
// Thread-safety: thread-safe (one mutex). Agent calls run on the TaskQueue, never under the lock.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/common/clock.h"
#include "torus/common/resources.h"
#include "torus/head/agent_pool.h"
#include "torus/head/node_registry.h"
#include "torus/head/placement_group_manager.h"
#include "torus/head/task_queue.h"

namespace torus::head {

enum class JobStatus { kPending, kRunning, kStopped, kSucceeded, kFailed };
std::string JobStatusName(JobStatus s);

struct JobRequest {
  std::string entrypoint;
  std::string submission_id;                       // generated when empty
  std::map<std::string, std::string> env_vars;
  std::string working_dir;
  std::map<std::string, std::string> metadata;
  ResourceSet resources;                           // entrypoint_num_cpus/gpus/memory/resources
  std::map<std::string, std::string> label_selector;
  std::string runtime_env_json = "null";           // as submitted, echoed in JobDetails
};

struct Job {
  JobRequest request;
  JobStatus status = JobStatus::kPending;
  std::string message;
  std::string error_type;
  int64_t start_time_ms = 0;
  int64_t end_time_ms = 0;
  std::string node_id;
  std::string node_address;
  std::string target;                              // agent address:port
  int64_t pid = 0;
  std::optional<int> exit_code;
  std::string group_id;                            // internal placement group, if any
  std::vector<int> chips;                          // TPU chips of its node it was given (TPU_VISIBLE_CHIPS)
  bool stop_requested = false;
  std::string worker_id() const { return "job-" + request.submission_id; }
  bool Terminal() const {
    return status == JobStatus::kStopped || status == JobStatus::kSucceeded || status == JobStatus::kFailed;
  }
};

class JobManager {
 public:
  struct Options {
    std::string head_host;        // the head's listen address; its agent runs resource-less jobs
    std::string head_address;     // gRPC host:port, passed to jobs as TORUS_ADDRESS
    std::string token;            // passed to jobs as TORUS_TOKEN (drivers act for the cluster's user)
    int64_t stop_grace_ms = 3000;
  };
  JobManager(const NodeRegistry* registry, PlacementGroupManager* groups, AgentPool* agents, TaskQueue* tasks,
             const Clock* clock, Options options);

  // The head's bound gRPC address, known once it listens; passed to jobs as TORUS_ADDRESS.
  void SetHeadAddress(const std::string& address);

  // Validates and queues. InvalidArgument names the field; AlreadyExists with KubeRay's text for a reused id.
  absl::StatusOr<std::string> Submit(JobRequest request);
  absl::StatusOr<Job> Get(const std::string& id) const;
  std::vector<Job> List() const;
  // False when already terminal.
  absl::StatusOr<bool> Stop(const std::string& id);
  // FailedPrecondition unless terminal.
  absl::Status Delete(const std::string& id);
  // Reads the entrypoint's output (stdout and stderr merged) from its agent.
  absl::StatusOr<rpc::ReadWorkerLogReply> ReadLog(const std::string& id, int64_t offset, int64_t max_bytes);

  // Jobs by status name, every status present (for /metrics).
  std::map<std::string, int> CountByStatus() const;

  // Events.
  void OnGroupState(const std::string& group_id, PgState state);
  void OnWorkerExited(const std::string& node_id, const std::string& worker_id, int exit_code, int signal);
  void OnNodeDead(const std::string& node_id);
  void OnClusterChanged();

 private:
  // Runs on the task queue: start the entrypoint on its node.
  void Launch(const std::string& id);
  void TryPlaceUnreserved();
  // Gives a TPU job the lowest free aligned block of `k` chips on its node and the matching environment.
  // REQUIRES: mu_ held.
  absl::Status IsolateChipsLocked(Job& job, int k, rpc::StartWorkerRequest& request);
  void FinishLocked(Job& job, JobStatus status, const std::string& message, const std::string& error_type);
  void ReleaseGroup(const std::string& group_id);

  const NodeRegistry* registry_;
  PlacementGroupManager* groups_;
  AgentPool* agents_;
  TaskQueue* tasks_;
  const Clock* clock_;
  Options options_;  // head_address is set once, before jobs run
  mutable std::mutex mu_;
  std::map<std::string, Job> jobs_;                  // guarded by mu_
  std::map<std::string, std::string> job_of_group_;  // group id -> job id; guarded by mu_
  bool placement_queued_ = false;                    // guarded by mu_
};

// Validates a submission (entrypoint present, TPU amount per semantics §7, selector, names). Pure.
absl::Status ValidateJobRequest(const JobRequest& request);

}  // namespace torus::head
