// RunService: what users and workers ask of gang runs — submit, get, list, stop, report, read a rank's log. A run
// reserves a slice group (TPU) or a placement group (CPU/GPU), submitted in the same transaction as the run; the
// driver (workload_driver.h) starts one worker per bundle and restarts the gang as run_machine.h says.
//
// Reports: each rank reports the steps it reached (rank 0 with metrics), optionally with a staged checkpoint; once
// every rank of the running attempt reported a step, its staged checkpoints are merged into
// <storage>/checkpoint_<step> and committed (train/checkpoints.h), and the next attempt resumes from the latest.
//
// Thread-safety: thread-safe. Checkpoint files are moved outside the store's lock.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "torus/common/clock.h"
#include "torus/head/agents/agent_pool.h"
#include "torus/head/placement/placement_scheduler.h"
#include "torus/head/state/ids.h"
#include "torus/head/state/state_store.h"
#include "torus/head/workloads/goodput.h"
#include "torus/train/run_spec.h"

namespace torus::head {

// A run as users see it: the record and the workers of each attempt (by attempt, then rank; unset when forgotten).
struct RunView {
  Run run;
  std::vector<std::vector<std::optional<Worker>>> workers;
  int64_t now_ms = 0;  // when it was read (the end of a running run's goodput)
};

class RunService {
 public:
  RunService(StateStore* store, PlacementScheduler* scheduler, AgentPool* agents, IdGenerator* ids,
             const Clock* clock)
      : store_(store), scheduler_(scheduler), agents_(agents), ids_(ids), clock_(clock) {}

  // Validates (PlanRun) and records the run and its group; returns the run id. InvalidArgument names the field.
  // A service's replica (service/service_version set) is recorded as such, and gets a port to serve on.
  absl::StatusOr<RunId> Submit(train::RunSpec spec, const std::string& service = "", int64_t service_version = 0);
  // By id, or the newest run of that name. NotFound otherwise.
  absl::StatusOr<RunView> Get(const std::string& id_or_name) const;
  // Every run, oldest first.
  std::vector<RunView> List() const;
  // False when already terminal; otherwise the run is STOPPED when this returns and its workers are being stopped.
  absl::StatusOr<bool> Stop(const std::string& id_or_name);
  // A worker's report (body: rank, attempt, step, metrics, checkpoint). Returns {"committed": bool[, "checkpoint"]}.
  // NotFound for an unknown run; Unauthenticated for a wrong token; FailedPrecondition for an attempt that is not
  // the running one; InvalidArgument names a bad field. A report sent again after its step was committed (its staged
  // checkpoint already moved, e.g. when the head that committed it died before answering) gets the same answer.
  absl::StatusOr<nlohmann::json> Report(const std::string& id, const std::string& bearer, const std::string& body);
  // One rank's output of an attempt (0 = the latest). A finished attempt whose host is gone reads as empty and
  // finished.
  absl::StatusOr<LogChunk> ReadLog(const std::string& id_or_name, int rank, int attempt, int64_t offset,
                                   int64_t max_bytes, int64_t wait_ms = 0);
  // Every rank's output of an attempt (0 = the latest) at once, read from the agents in parallel: rank r from
  // offsets[r] (none given: every rank from 0; otherwise one per rank, InvalidArgument naming the count). With
  // `wait_ms` > 0 and nothing new yet from any rank whose worker still runs, it first waits up to that long for
  // output of any of them or the end of all (ranks whose host does not answer are not waited for); a rank whose
  // host was still waiting when another answered with output reads as nothing new.
  struct RankLogs {
    int attempt = 0;  // 0: the run has no attempt yet (no ranks)
    std::vector<absl::StatusOr<LogChunk>> ranks;
  };
  absl::StatusOr<RankLogs> ReadLogs(const std::string& id_or_name, int attempt, const std::vector<int64_t>& offsets,
                                    int64_t max_bytes, int64_t wait_ms = 0);

  // Runs by status name (every status present), and the failed attempts of all runs, for /metrics.
  std::map<std::string, int> CountByStatus() const;
  int64_t TotalRestarts() const;
  // Each run's goodput (goodput.h), and failed attempts by the kind of their root cause (explain.h), for /metrics.
  struct RunGoodputRow {
    std::string run_id;
    std::string name;
    Goodput goodput;
  };
  std::vector<RunGoodputRow> Goodputs() const;
  std::map<std::string, int> FailedAttemptsByCause() const;

 private:
  // {"committed": true, "checkpoint"} when `step` of run `id` has a committed checkpoint in `storage` (recording
  // the commit if the state lacks it); nullopt otherwise.
  std::optional<nlohmann::json> AlreadyCommitted(const std::string& id, const std::string& storage, int64_t step);
  // Where an attempt's ranks ran: their agents ("" when the node is forgotten) and workers.
  struct AttemptRanks {
    int attempt = 0;
    bool ended = false;  // the attempt ended (or the run ended without one)
    std::vector<std::pair<std::string, WorkerId>> ranks;
  };
  absl::StatusOr<AttemptRanks> LocateRanks(const std::string& id_or_name, int attempt) const;

  StateStore* store_;
  PlacementScheduler* scheduler_;
  AgentPool* agents_;
  IdGenerator* ids_;
  const Clock* clock_;
  absl::Mutex commits_mu_;
  std::map<std::string, std::shared_ptr<absl::Mutex>> commit_locks_ ABSL_GUARDED_BY(commits_mu_);  // per run
};

}  // namespace torus::head
