// WorkerLeases: the agent's side of tasks. A driver (or a worker running a nested task) asks for a worker of some
// resource shape; the agent holds the resources in its ledger — as a one-bundle group `lease:<id>`, so that they count
// against the head's bundles exactly as a reservation does — gives the lease devices (an aligned block of TPU chips,
// the lowest free GPUs), and grants a worker process: an idle one from its pool, or a new one that it starts and that
// announces where its core worker listens. The holder then pushes tasks straight to that worker and returns the
// lease when it has no more.
//
// Workers are pooled per (job, environment, working directory) and only when they hold no device: one that holds
// TPU chips or GPUs is started with TPU_VISIBLE_CHIPS and bounds (CUDA_VISIBLE_DEVICES) set, because libtpu and CUDA
// read them once, and it is stopped when its lease ends; its chips stay held until it has exited. Idle pooled
// workers are stopped after `idle_worker_ms`.
//
// A lease ends when it is returned, when its worker exits, or when its holder does: a holder on this machine (same
// kernel boot id) is watched by pid, and its leases are returned and their workers stopped once it is gone.
//
// Lease workers and their bundles are the agent's own: they are not reported to the head as workers or groups.
//
// A worker whose task waits in get/wait for objects not yet ready says it is blocked: its lease lends its CPU to the
// host (the ledger counts it as free), so that the tasks it waits for can be leased, and nested tasks never deadlock
// on CPUs their waiting parents hold. Only CPU: TPU chips, GPUs and memory stay held; a lease inside a placement
// group's bundle lends nothing (its CPUs are the group's, as in Ray). When the worker runs again it takes its CPU
// back at once, even if that over-subscribes the host until other leases end (worker_leases_blocked.cc).
//
// Thread-safety: thread-safe. Request blocks (up to its wait, and a worker's start) and is meant for RPC threads.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "torus/common/resources.h"
#include "torus/node/bundle_ledger.h"
#include "torus/node/metrics_sampler.h"
#include "torus/node/node_service.h"
#include "torus/node/worker_supervisor.h"

namespace torus::node {

// Ledger groups and worker owners of leases start with these.
inline constexpr char kLeaseGroupPrefix[] = "lease:";
inline constexpr char kLeaseOwnerPrefix[] = "tasks:";
bool IsLeaseGroup(const std::string& group_id);
bool IsLeaseOwner(const std::string& owner);

// How a worker went, for the holder of its lease: "exited with code 3", "was killed by signal 9 (SIGKILL)", "was
// killed for using too much memory (peak ... MiB)", "was stopped by the agent", then its last output when it failed.
std::string DescribeExit(const WorkerExit& exit);

// This machine's kernel boot id (/proc/sys/kernel/random/boot_id), "" when unreadable.
std::string ReadBootId();

struct LeaseAsk {
  std::string job_id;                        // 1-128 of [0-9A-Za-z_.:-]
  ResourceSet resources;                     // an empty set holds nothing (not even a CPU)
  std::map<std::string, std::string> env;    // the worker's runtime_env env_vars
  std::string working_dir;                   // "" = the agent's
  pid_t holder_pid = 0;                      // watched when holder_boot_id is this machine's
  std::string holder_boot_id;
  int64_t wait_ms = 0;                       // how long to wait for resources to free up
  // A lease inside a bundle of a placement group this agent holds committed (group_id set): it takes its resources
  // and chips from what the bundle holds (less the bundle's other leases), and its worker is stopped when the
  // bundle is released.
  std::string group_id;
  int bundle_index = -1;
};

struct LeaseGrant {
  std::string lease_id;
  std::string worker_id;
  std::string worker_address;  // host:port
  pid_t worker_pid = 0;
  std::vector<int> chips;
  std::vector<int> gpus;
};

struct LeaseInfo {
  std::string lease_id;
  std::string job_id;
  std::string worker_id;
  pid_t worker_pid = 0;
  ResourceSet resources;
  std::vector<int> chips;
  std::vector<int> gpus;
  pid_t holder_pid = 0;
  int64_t granted_ms = 0;  // Unix ms
  std::string group_id;    // a lease inside a placement group's bundle: the group and the bundle's index
  int bundle_index = -1;
  bool blocked = false;    // its worker waits in get/wait
  ResourceSet lent;        // what it lends the host meanwhile (its CPU; empty inside a placement group)
};

struct WorkerLeasesOptions {
  std::string node_ip = "127.0.0.1";             // where workers listen
  std::vector<std::string> worker_argv;          // how to start a worker (python3 -m torus._private.default_worker)
  std::map<std::string, std::string> worker_env;  // added to every worker's environment (agent address, token, ...)
  int64_t start_timeout_ms = 60'000;             // a new worker must announce itself within this
  int64_t idle_worker_ms = 10'000;               // pooled workers idle longer than this are stopped
  int max_idle_workers = 16;                     // per pool key
};

class WorkerLeases {
 public:
  // `ledger`, `workers` are the agent's (owned by the caller); `on_ledger_change` runs after each hold or release
  // (to send availability with the next heartbeat). Starts a thread that watches holders and idle workers.
  WorkerLeases(BundleLedger* ledger, WorkerSupervisor* workers, HostDevices devices, WorkerLeasesOptions options,
               std::function<void()> on_ledger_change);
  ~WorkerLeases();

  WorkerLeases(const WorkerLeases&) = delete;
  WorkerLeases& operator=(const WorkerLeases&) = delete;

  // Grants a lease, waiting up to ask.wait_ms for the resources. InvalidArgument naming a bad field;
  // FailedPrecondition when this host can never hold the shape (its total, naming the resource); ResourceExhausted
  // when it did not free up in time (naming what is short); Unavailable when the worker failed to start (its
  // output's last lines) or the agent is stopping.
  absl::StatusOr<LeaseGrant> Request(const LeaseAsk& ask);
  // Ends a lease: its resources are free (a device worker's once it exited); its worker goes back to the pool unless
  // `kill_worker` or it holds devices. NotFound for an unknown (or already ended) lease.
  absl::Status Return(const std::string& lease_id, bool kill_worker);
  // A worker this agent started says where it listens. NotFound for a worker it is not starting.
  absl::Status Announce(const std::string& worker_id, int port, pid_t pid);
  // The worker of a lease is blocked in get/wait (`blocked`), or runs again: lends its lease's CPU to the host, or
  // takes it back (see above). Repeating the current state is a no-op. NotFound when the worker holds no lease here.
  absl::Status SetWorkerBlocked(const std::string& worker_id, bool blocked);
  // The ledger changed outside the leases (bundles prepared, committed or released; a bundle's worker gone): lease
  // requests waiting for resources look again.
  void LedgerChanged();
  // The supervisor saw a worker exit (any worker; others are ignored). `how` describes it ("exited with code 3").
  void OnWorkerExited(const std::string& worker_id, const std::string& how = "exited");
  // Waits up to `wait_ms` for a lease to end; returns how ("returned", or how its worker exited), or nullopt while it
  // lasts. NotFound for a lease this agent never granted (or forgot: it keeps the last 1000 ends).
  absl::StatusOr<std::optional<std::string>> WaitEnd(const std::string& lease_id, int64_t wait_ms);
  // Returns leases whose local holder is gone and stops idle workers past their time. Called by the watch thread;
  // public for tests.
  void Sweep();
  // Stops handing out leases and wakes every waiting request (they fail Unavailable).
  void Shutdown();

  std::vector<LeaseInfo> Leases() const;
  // For /metrics: torus_node_task_leases{job_id} (leases held), torus_node_task_workers{state="leased"|"idle"} and
  // torus_node_task_lease_requests_waiting.
  std::vector<AgentSample> Samples() const;
  int IdleWorkers() const;
  int WaitingRequests() const;

 private:
  struct Worker {
    std::string worker_id;
    pid_t pid = 0;
    std::string address;     // once announced
    std::string pool_key;    // "" when it holds devices (never pooled)
    bool exited = false;
    bool starting = false;      // its starter waits for it to announce itself, and drops it if it fails
    int64_t idle_since_ms = 0;  // steady ms, while idle in the pool
  };
  struct Lease {
    LeaseInfo info;
    std::string holder_boot_id;
    std::string pool_key;
    std::pair<std::string, int> bundle;  // (group, index) of a lease inside a bundle; group "" otherwise
  };
  // What leases inside one bundle hold of it.
  struct BundleUse {
    ResourceSet used;
    std::set<int> chips;
    std::set<int> gpus;
  };

  // Holds the resources and devices of `ask` as lease `lease_id` if they fit now; the reason when they do not.
  std::optional<std::string> TryHoldLocked(const std::string& lease_id, const LeaseAsk& ask, LedgerBundle& held)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The same inside a bundle: NotFound-like reasons come back through `never` (the bundle is not held here, or can
  // never hold the ask). REQUIRES: mu_ held.
  std::optional<std::string> TryHoldInBundleLocked(const LeaseAsk& ask, LedgerBundle& held, std::string& never)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a worker for a lease; returns it once it announced, or an error. REQUIRES: mu_ held (released while
  // waiting).
  absl::StatusOr<Worker*> StartWorkerLocked(const LeaseAsk& ask, const std::string& lease_id, const LedgerBundle& held)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases a lease's bundle; stops what must stop; remembers `how` it ended. REQUIRES: mu_ held.
  void EndLeaseLocked(const std::string& lease_id, bool kill_worker, const std::string& how)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WatchLoop();
  // Gives a bundle lease's share back to its bundle. REQUIRES: mu_ held.
  void UnuseLocked(const std::pair<std::string, int>& bundle, const ResourceSet& resources,
                   const std::vector<int>& chips, const std::vector<int>& gpus) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  BundleLedger* ledger_;
  WorkerSupervisor* workers_;
  const HostDevices devices_;
  const WorkerLeasesOptions options_;
  const std::function<void()> on_ledger_change_;
  const std::string boot_id_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // a lease ended, a worker announced or exited
  std::map<std::string, Lease> leases_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Worker> workers_by_id_ ABSL_GUARDED_BY(mu_);      // every live lease worker
  std::map<std::string, std::vector<std::string>> idle_ ABSL_GUARDED_BY(mu_);  // pool key -> idle worker ids
  std::map<std::string, std::string> worker_lease_ ABSL_GUARDED_BY(mu_);  // worker id -> its lease
  std::map<std::pair<std::string, int>, BundleUse> bundle_use_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> ended_ ABSL_GUARDED_BY(mu_);  // lease id -> how it ended (the last 1000)
  std::deque<std::string> ended_order_ ABSL_GUARDED_BY(mu_);
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;  // requests waiting for resources
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

}  // namespace torus::node
