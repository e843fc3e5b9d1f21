// WorkloadDriver: the one mechanism that runs workloads — reserve → bind → start → watch → stop — for jobs and gang
// runs alike; what each kind does next is its state machine's pure decision (job_machine.h, run_machine.h).
//
// Level-triggered, like a Kubernetes controller: whenever a record touches a workload (its own records, its group's,
// its workers'), the driver looks at where the workload stands and applies the machine's step — status records
// and group releases in one transaction; starting and stopping workers as agent calls on its executor. Exits and
// losses arrive as records (an agent's exit report, a node's death), never by polling. After a head restart, Start
// looks at every workload once, so that nothing waits for an event that already happened.
//
// Starting: a job's worker runs on its group's bundle (or, reserving nothing, on the head host's agent or the
// lowest-id node matching its selector); a run's attempt gets one worker per bundle, with the distributed
// environment built from this placement (train/env_builder.h). The WorkerStarting records come before the agent
// is asked, so an exit is never reported for a worker the head does not know. Only nodes that registered with this
// head are started on; a workload that waits for one is looked at again when a node registers.
//
// Thread-safety: thread-safe. One driver thread decides; agent calls run on the executor, never under a lock.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "torus/common/clock.h"
#include "torus/head/agents/agent_pool.h"
#include "torus/head/placement/placement_scheduler.h"
#include "torus/head/state/liveness.h"
#include "torus/head/state/state_store.h"
#include "torus/head/workloads/executor.h"

namespace torus::head {

class WorkloadDriver {
 public:
  struct Options {
    std::string head_host;         // jobs that reserve nothing run on the agent at this address when they can
    std::string head_address;      // passed to jobs as TORUS_ADDRESS (the head's gRPC host:port)
    std::string token;             // passed to jobs as TORUS_TOKEN (drivers act for the cluster's user)
    // Runs' workers POST to <base>/api/v0/runs/<id>/report; several bases, comma-separated, for several heads (this
    // one's first): TORUS_REPORT_URL then lists one URL per head.
    std::string report_base_url;
    std::string python_path;       // prepended to runs' PYTHONPATH so that `import torus_train` works
    int64_t job_stop_grace_ms = 3000;
    int64_t run_stop_grace_ms = 2000;
    int64_t failure_window_ms = 4000;  // how long after a gang attempt's end its root cause may still be learned
    int executor_threads = 4;
  };

  WorkloadDriver(StateStore* store, const Liveness* liveness, PlacementScheduler* scheduler, AgentPool* agents,
                 const Clock* clock, Options options);
  ~WorkloadDriver();  // stops

  // Looks at every workload that is not finished (or still holds a worker or a group) once, then follows records.
  // Options must be complete by then (addresses are known once the head listens).
  void Start();
  void Stop();
  void SetHeadAddress(const std::string& address);
  void SetReportBaseUrl(const std::string& url);

  // The store's subscriber.
  void OnRecords(const std::vector<Record>& records);
  // Blocks until nothing is queued or in flight (for tests).
  void WaitIdle();

 private:
  struct Key {
    OwnerKind kind = OwnerKind::kNone;
    std::string id;
    auto operator<=>(const Key&) const = default;
  };
  struct StopOrder {
    std::string target;
    WorkerId worker;
    int64_t grace_ms = 0;
  };

  void Enqueue(const std::vector<Key>& keys);
  void Loop();
  void Advance(const Key& key);
  void AdvanceJob(const JobId& id);
  void AdvanceRun(const RunId& id);
  // Starts a job's worker or a run's attempt on the executor, unless one is in flight.
  void Launch(const Key& key);
  // Run on the executor.
  void LaunchJob(const JobId& id);
  void LaunchAttempt(const RunId& id);
  // Sends again the starts of `node`'s workers that are STARTING with their launch kept and not in flight from this
  // head: a head that stopped after recording them (a failover) may not have sent them. They go "only if new": an
  // agent that knows the worker already, running or ended, answers ALREADY_EXISTS and its report of the worker's
  // exit records how it ran — a worker never runs twice.
  void RedeliverStarts(const NodeId& node);
  // The workers of `candidates` that are not being started and were not asked to stop yet; marks them asked.
  std::vector<StopOrder> TakeStops(const std::vector<StopOrder>& candidates);
  void SendStops(std::vector<StopOrder> stops);
  void Park(const Key& key);
  // Looks at `key` again at `wall_ms` (the driver's clock).
  void WakeAt(int64_t wall_ms, const Key& key);
  void Done(const Key& key);  // a launch finished: look at the workload again unless it is parked

  StateStore* store_;
  const Liveness* liveness_;
  PlacementScheduler* scheduler_;
  AgentPool* agents_;
  const Clock* clock_;

  absl::Mutex mu_;
  absl::CondVar cv_;
  Options options_ ABSL_GUARDED_BY(mu_);
  std::deque<Key> queue_ ABSL_GUARDED_BY(mu_);
  std::set<Key> queued_ ABSL_GUARDED_BY(mu_);
  std::set<Key> launching_ ABSL_GUARDED_BY(mu_);     // a start is in flight
  std::set<Key> parked_ ABSL_GUARDED_BY(mu_);        // waiting for a node to register
  std::set<WorkerId> starting_ ABSL_GUARDED_BY(mu_); // their start RPC is in flight
  std::set<WorkerId> stops_sent_ ABSL_GUARDED_BY(mu_);
  std::multimap<int64_t, Key> timers_ ABSL_GUARDED_BY(mu_);  // wall ms -> workload to look at then
  int busy_ ABSL_GUARDED_BY(mu_) = 0;               // advances and launches running
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Executor executor_;       // launches: a start may wait minutes while agents fetch its packages
  Executor stop_executor_;  // stops, never queued behind launches
  std::thread thread_;
};

}  // namespace torus::head
