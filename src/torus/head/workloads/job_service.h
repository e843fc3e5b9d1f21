// JobService: what users ask of jobs (Ray Jobs API shaped) — submit, get, list, stop, delete, read the log. A job's
// entrypoint runs as one supervised worker (workload_driver.h): with entrypoint resources the job holds a one-bundle
// placement group, submitted in the same transaction as the job (so the group can never be placed before the job
// knows it), and runs on that bundle with its devices; without, it runs on the head host's agent when that matches
// its label selector, else on the lowest-id node that does.
//
// Status: PENDING -> RUNNING -> SUCCEEDED | FAILED | STOPPED (PENDING may end STOPPED or FAILED); a terminal status
// never changes. Stop sends SIGTERM to the entrypoint's process group and SIGKILL after the grace period.
//
// Thread-safety: thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/common/clock.h"
#include "torus/head/agents/agent_pool.h"
#include "torus/head/placement/placement_scheduler.h"
#include "torus/head/state/ids.h"
#include "torus/head/state/state_store.h"

namespace torus::head {

// A job as users see it: the record, its worker (once started) and where it runs.
struct JobView {
  Job job;
  std::optional<Worker> worker;
  std::string node_address;  // of its worker's node
  std::string message;       // job.message, or while PENDING why it waits
};

// Validates a submission (entrypoint present, TPU amount per semantics §7, selector, names). Pure.
absl::Status ValidateJobRequest(const JobRequest& request);

class JobService {
 public:
  JobService(StateStore* store, PlacementScheduler* scheduler, AgentPool* agents, IdGenerator* ids,
             const Clock* clock)
      : store_(store), scheduler_(scheduler), agents_(agents), ids_(ids), clock_(clock) {}

  // Validates and records the job (and its group). InvalidArgument names the field; AlreadyExists with KubeRay's
  // text for a reused id.
  absl::StatusOr<JobId> Submit(JobRequest request);
  absl::StatusOr<JobView> Get(const std::string& id) const;
  std::vector<JobView> List() const;
  // False when already terminal. A PENDING job is STOPPED when this returns; a running one once its worker exits.
  absl::StatusOr<bool> Stop(const std::string& id);
  // FailedPrecondition unless terminal.
  absl::Status Delete(const std::string& id);
  // The entrypoint's output (stdout and stderr merged) from its agent. With `wait_ms` > 0 and a running worker
  // with nothing after `offset` yet, its agent waits up to that long for output or the worker's exit; a job not
  // started yet answers at once (empty, not finished).
  absl::StatusOr<LogChunk> ReadLog(const std::string& id, int64_t offset, int64_t max_bytes, int64_t wait_ms = 0);
  // Jobs by status name, every status present (for /metrics).
  std::map<std::string, int> CountByStatus() const;

 private:
  StateStore* store_;
  PlacementScheduler* scheduler_;
  AgentPool* agents_;
  IdGenerator* ids_;
  const Clock* clock_;
};

}  // namespace torus::head
