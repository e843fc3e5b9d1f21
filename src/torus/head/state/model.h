// The head's domain: what ClusterState holds about nodes, reservations (placement groups and slice groups, with the
// devices each bundle holds), workers, jobs and gang runs. Plain value types with typed ids; no proto, no JSON.
//
// Thread-safety: value types; ClusterState owns them and StateStore guards it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "torus/common/labels.h"
#include "torus/common/resources.h"
#include "torus/head/state/ids.h"
#include "torus/sched/bundle_policy.h"
#include "torus/sched/slice_group_policy.h"
#include "torus/train/service_spec.h"
#include "torus/train/run_spec.h"

namespace torus::head {

// ---- Nodes ----

// What an agent says about itself when it registers.
struct NodeRegistration {
  std::string node_id;
  std::string address;
  std::string hostname;
  ResourceSet total;
  Labels labels;
  int64_t pid = 0;
  int64_t start_time_ms = 0;
  int32_t agent_port = 0;  // the agent's NodeService port on `address`
  bool operator==(const NodeRegistration&) const = default;
};

enum class NodeState { kAlive, kDead };
std::string NodeStateName(NodeState s);  // "ALIVE", "DEAD"

struct Node {
  NodeRegistration info;
  NodeState state = NodeState::kAlive;
  uint64_t incarnation = 0;
  int64_t registered_wall_ms = 0;
  int64_t died_wall_ms = 0;
  std::string death_reason;
  NodeId id() const { return NodeId(info.node_id); }
  bool alive() const { return state == NodeState::kAlive; }
  // "address:agent_port", where the head calls the agent.
  std::string target() const;
  bool operator==(const Node&) const = default;
};

// ---- Reservations: placement groups and slice groups ----

enum class PgState { kPending, kCreated, kRescheduling, kRemoved, kFailed };
std::string PgStateName(PgState s);
enum class PgKind { kBundles, kSlices };

// Who a reservation, or a worker, belongs to.
enum class OwnerKind { kNone, kJob, kRun };
struct Owner {
  OwnerKind kind = OwnerKind::kNone;
  std::string id;  // the JobId or RunId
  static Owner Job(const JobId& id) { return {OwnerKind::kJob, id.str()}; }
  static Owner Run(const RunId& id) { return {OwnerKind::kRun, id.str()}; }
  bool operator==(const Owner&) const = default;
};

// One bundle a group holds (or held, while `lost`). Its devices are chosen by the head when it is placed and held
// by the agent's ledger; a worker started on the bundle gets exactly these.
struct HeldBundle {
  int index = 0;             // position in the group: slice-major, then worker id, then chip block
  int ledger_index = 0;      // index within its ledger group on the agent
  NodeId node;
  std::string ledger_group;  // the agent-side group: "<pg id>" or "<pg id>/<slice>"
  uint64_t attempt = 0;      // the placement attempt that reserved it on the agent
  std::string slice_name;    // slice groups
  int worker_id = -1;        // the host's TPU worker id (slice groups)
  std::vector<int> chips;    // TPU chip indices on its host
  std::vector<int> gpus;     // GPU indices on its host
  ResourceSet resources;
  bool lost = false;         // its node died; waiting to be placed again
  bool operator==(const HeldBundle&) const = default;
};

struct PgEvent {
  int64_t time_ms = 0;
  std::string state;
  std::string message;
  bool operator==(const PgEvent&) const = default;
};

struct Group {
  GroupId id;
  std::string name;
  PgKind kind = PgKind::kBundles;
  sched::BundleRequest bundle_request;     // kBundles
  sched::SliceGroupRequest slice_request;  // kSlices
  std::string request_text;
  Owner owner;                             // the job or run that made it, if any
  uint64_t seq = 0;                        // submission order
  PgState state = PgState::kPending;
  std::string reason;                      // why it is not CREATED
  int alternative = 0;
  std::vector<HeldBundle> bundles;
  std::vector<std::string> slices;         // slice groups: held slices, in order
  std::vector<PgEvent> history;
  int64_t created_wall_ms = 0;
  double timeout_s = 0;                    // bounds the wait for its first creation; 0 = wait until removed
  bool placed_once = false;                // it was CREATED at least once (a later loss does not time out)
  uint64_t changes = 0;                    // bumped by every record about the group

  bool Live() const { return state != PgState::kRemoved && state != PgState::kFailed; }
  bool Waiting() const { return state == PgState::kPending || state == PgState::kRescheduling; }
  bool Settled() const { return state == PgState::kCreated || !Live(); }
};

// ---- Workers: processes agents run for jobs and runs ----

enum class WorkerPhase { kStarting, kRunning, kExited };
std::string WorkerPhaseName(WorkerPhase p);

// How the host of a lost worker went.
enum class HostLoss {
  kNone,        // not lost, or not with its host
  kSilent,      // its agent was not heard from for the node timeout (agent or host dead, or cut off)
  kMarkedDead,  // an operator marked the node dead
  kAgentGone,   // its agent unregistered or restarted
};

// How a worker ended. `lost`: it vanished with its host or was not found there (no exit code); `start_failed`:
// its agent could not start it.
struct WorkerExit {
  int exit_code = 0;  // valid when signal == 0 and !lost and !start_failed
  int signal = 0;
  bool lost = false;
  bool start_failed = false;
  std::string reason;  // for lost workers and failed starts: why
  int64_t wall_ms = 0;
  // Why, as far as its agent could tell (reported with the exit):
  bool stopped = false;            // torus stopped it
  bool oom_killed = false;         // the kernel's OOM killer killed it
  int64_t peak_rss_bytes = 0;
  std::string output_tail;         // failed: the last lines of its output
  std::string accelerator_error;   // failed: the last error line libtpu logged while it ran
  // Lost with its host: how, and when the host was last heard from (when the loss may have begun).
  HostLoss host_loss = HostLoss::kNone;
  int64_t host_last_seen_ms = 0;
  bool Succeeded() const { return !lost && !start_failed && signal == 0 && exit_code == 0; }
  // "exited with code 1", "was killed by signal 9", "was lost: <reason>", "failed to start: <reason>"
  std::string Describe() const;
  bool operator==(const WorkerExit&) const = default;
};

// A package the head holds; its bytes are a file in the head's package directory (PackageStore).
struct Package {
  std::string name;    // "_ray_pkg_<hash>.zip", "_torus_pkg_<hash>.zip", ...
  std::string sha256;  // of the archive's bytes, lowercase hex
  uint64_t size = 0;
  int64_t stored_wall_ms = 0;
  bool operator==(const Package&) const = default;
};

// What a worker's start carries to its agent, kept while the start is in flight (until the worker is known started
// or ended), so that a head that takes over after sending it can send it again.
struct WorkerLaunch {
  std::string owner_tag;  // the agent's owner tag: "job:<id>" or "run:<id>:a<n>"
  std::vector<std::string> argv;
  std::map<std::string, std::string> env_set;
  std::vector<std::string> env_unset;
  std::string cwd;
  std::optional<Package> working_dir_package;
  std::vector<Package> py_module_packages;
  bool operator==(const WorkerLaunch&) const = default;
};

struct Worker {
  WorkerId id;
  Owner owner;
  int attempt = 0;           // runs: the attempt it belongs to
  int rank = 0;              // runs: its rank
  NodeId node;
  GroupId group;             // the reservation it runs on; empty for an unreserved job
  std::string ledger_group;  // the bundle on its agent: (ledger_group, bundle)
  int bundle = -1;
  std::vector<int> chips;    // its bundle's devices (copies: they stay shown after the group is gone)
  std::vector<int> gpus;
  WorkerPhase phase = WorkerPhase::kStarting;
  int64_t pid = 0;
  int64_t start_wall_ms = 0;
  std::optional<WorkerExit> exit;
  std::optional<WorkerLaunch> launch;  // while STARTING (none in a journal written before launches were kept)
  bool bound() const { return bundle >= 0; }
  bool operator==(const Worker&) const = default;
};

// ---- Jobs ----

enum class JobStatus { kPending, kRunning, kStopped, kSucceeded, kFailed };
std::string JobStatusName(JobStatus s);

struct JobRequest {
  std::string entrypoint;
  std::string submission_id;  // generated when empty
  std::map<std::string, std::string> env_vars;
  std::string working_dir;               // a path on the node, or a package URI ("gcs://_ray_pkg_<hash>.zip")
  std::vector<std::string> py_modules;   // package URIs or paths on the node, put on PYTHONPATH
  std::map<std::string, std::string> metadata;
  ResourceSet resources;      // entrypoint_num_cpus/gpus/memory/resources
  std::map<std::string, std::string> label_selector;
  std::string runtime_env_json = "null";  // as submitted, echoed in JobDetails
  bool operator==(const JobRequest&) const = default;
};

struct Job {
  JobId id;  // = request.submission_id
  JobRequest request;
  JobStatus status = JobStatus::kPending;
  std::string message;
  std::string error_type;
  int64_t submit_time_ms = 0;
  int64_t start_time_ms = 0;
  int64_t end_time_ms = 0;
  GroupId group;     // its one-bundle reservation when it asked for resources
  WorkerId worker;   // set once it is started
  std::optional<int> exit_code;
  bool stop_requested = false;
  bool Terminal() const {
    return status == JobStatus::kStopped || status == JobStatus::kSucceeded || status == JobStatus::kFailed;
  }
  bool operator==(const Job&) const = default;
};

// ---- Actors ----

// Actors are placed by their owners (the processes that create them, through worker leases from agents); the head
// keeps their directory: names, states and where they run, as the owners report them. An actor whose owner cannot
// be reached is DEAD (the agents end its lease with its owner).
enum class ActorState { kPendingCreation, kAlive, kRestarting, kDead };
std::string ActorStateName(ActorState s);  // "PENDING_CREATION", "ALIVE", "RESTARTING", "DEAD"

struct Actor {
  ActorId id;
  std::string name;                       // empty: unnamed
  std::string ns;                         // the namespace its name is unique in
  std::string class_name;
  std::vector<std::string> methods;       // what a handle from get_actor may call
  std::string job_id;
  std::string owner_address;              // the owner's core worker (host:port)
  ActorState state = ActorState::kPendingCreation;
  NodeId node;                            // where its current (or last) worker runs
  int64_t pid = 0;
  std::string worker_address;             // its worker's core worker while ALIVE
  std::map<std::string, int64_t> resources;  // fixed point, as leased
  int restarts = 0;
  int max_restarts = 0;                   // -1: without limit
  int max_task_retries = 0;               // a call's retries after its worker died, for every handle; -1: no limit
  std::string death_cause;
  int64_t create_time_ms = 0;
  int64_t start_time_ms = 0;              // ALIVE the first time
  int64_t end_time_ms = 0;                // DEAD
  // A detached actor is owned by the head (owner_address is the head's) and outlives the program that created it.
  // The head keeps what it needs to create it again (`creation`: a serialized torus.core.ActorCreation, base64;
  // dropped when DEAD) and the lease of its current worker (agent address, lease id) to take it up after a restart.
  bool detached = false;
  std::string creation;
  std::string lease_agent;
  std::string lease_id;
  bool operator==(const Actor&) const = default;
};

// ---- Gang runs ----

enum class RunStatus { kPending, kRunning, kRestarting, kSucceeded, kFailed, kStopped };
std::string RunStatusName(RunStatus s);

// One rank of an attempt; its process is the worker `worker` (exit and pid live there).
struct RankState {
  int rank = 0;
  WorkerId worker;
  NodeId node;
  std::string address;
  std::string slice_name;
  std::vector<int> chips;
  std::vector<int> gpus;
  bool operator==(const RankState&) const = default;
};

struct StepMetrics {
  int64_t step = 0;
  std::string metrics_json;  // rank 0's metrics object, as reported
  int64_t time_ms = 0;
  bool operator==(const StepMetrics&) const = default;
};

struct RunAttempt {
  int number = 0;
  int64_t start_time_ms = 0;
  int64_t end_time_ms = 0;
  std::string end_reason;
  std::string cause;          // a failed attempt: the kind of its root cause (CauseKindName)
  std::string end_details;    // the cause's evidence: the failed rank's last output lines, libtpu's error line
  bool explained = false;     // the cause is settled (AttemptExplained)
  // For goodput: the first and last report of any rank, and when the last checkpoint committed in this attempt
  // was (the work up to it is kept when the attempt fails).
  int64_t first_report_ms = 0;
  int64_t last_report_ms = 0;
  int64_t kept_until_ms = 0;
  std::string checkpoint_dir;  // what it resumed from
  int serve_port = 0;          // a service replica's: where rank 0 serves HTTP (TORUS_SERVE_PORT)
  std::vector<RankState> ranks;
  std::vector<StepMetrics> metrics;  // the last kMaxMetricPoints reports of rank 0
  bool ended() const { return end_time_ms != 0; }
  bool operator==(const RunAttempt&) const = default;
};

inline constexpr size_t kMaxMetricPoints = 10'000;

struct Run {
  RunId id;
  train::RunSpec spec;
  train::GangPlan plan;  // derived from spec (PlanRun) when the run is submitted or replayed
  GroupId group;
  std::string token;     // workers report with it
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
  // A service replica's: the service and the version of its spec it runs ("" / 0 for a gang run of a user's).
  std::string service;
  int64_t service_version = 0;
  std::string storage() const { return spec.run.storage_path + "/" + spec.run.name; }
  bool Terminal() const {
    return status == RunStatus::kSucceeded || status == RunStatus::kFailed || status == RunStatus::kStopped;
  }
  const RunAttempt* current() const { return attempts.empty() ? nullptr : &attempts.back(); }
};

// ---- Services: replicas of a model server behind the ingress (train/service_spec.h) ----

// A deployed service. Its replicas are gang runs whose `service` is its name; those of an older version are
// replaced by the controller (head/services) once new ones are READY.
struct Service {
  std::string name;
  train::ServiceSpec spec;
  std::string spec_json;  // train::ServiceSpecToJson(spec)
  int64_t version = 0;    // 1 at the first deploy, +1 at each change of the spec
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
};

// ---- Packages: zip archives uploaded for runtime_env working_dir / py_modules ----

// The URI scheme Ray's job clients give uploaded packages ("gcs://<name>").
inline constexpr std::string_view kPackageScheme = "gcs://";

// (Package, a package the head holds, is declared with the workers that start in one.)
// The package name of `uri` when it is a package URI ("gcs://x.zip" -> "x.zip"); nullopt for a path on the node.
std::optional<std::string> PackageNameOf(std::string_view uri);

}  // namespace torus::head
