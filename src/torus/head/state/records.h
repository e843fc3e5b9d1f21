// Typed records: every change of the head's state is one of these. ClusterState::Apply is a pure function of
// (state, record); the journal appends exactly these records before a change is acknowledged and replays them at
// start, so a head that restarts rebuilds the same state.
//
// Records carry every value the change needs (times, ids, the devices chosen), never a reference to the clock or
// a generator, so that applying one again gives the same result.
//
// Thread-safety: value types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "torus/head/state/model.h"

namespace torus::head {

// A head process began serving; `epoch` counts them (1, 2, ...). Placement attempts are numbered within the epoch
// (epoch << 32 | n), so that an agent never confuses an attempt of a head that died with a new one.
struct HeadStarted {
  uint64_t epoch = 0;
  int64_t wall_ms = 0;
};

struct NodeRegistered {
  NodeRegistration info;
  uint64_t incarnation = 0;
  int64_t wall_ms = 0;
};

// The node `node` (of that incarnation) is DEAD. Its workers and bundles are marked lost by the records that follow
// it in the same transaction (WorkerExited, GroupBundlesLost).
struct NodeDied {
  NodeId node;
  uint64_t incarnation = 0;
  std::string reason;
  int64_t wall_ms = 0;
};

// A DEAD node is forgotten: its host was removed on purpose (the autoscaler removed its slice), so neither it nor
// its slice is shown any more.
struct NodeRemoved {
  NodeId node;
  std::string reason;
  int64_t wall_ms = 0;
};

// An operator revoked node `node` (torus node mark-dead --revoke): with node certificates on, the head refuses every
// call made with its certificate and issues it none again. Revocation is never undone; the host joins again under
// another node id.
struct NodeRevoked {
  NodeId node;
  std::string reason;
  int64_t wall_ms = 0;
};

// A new group, PENDING.
struct GroupSubmitted {
  Group group;
};

// The group holds `bundles` (the whole list, survivors included) on `slices`; it is CREATED.
struct GroupPlaced {
  GroupId group;
  int alternative = 0;
  std::vector<HeldBundle> bundles;
  std::vector<std::string> slices;
  std::string message;
  int64_t wall_ms = 0;
};

// The group waits: PENDING with `reason` (its history gains an entry when the state or the reason changes).
struct GroupWaiting {
  GroupId group;
  std::string reason;
  int64_t wall_ms = 0;
};

// Bundles of the group were lost with their hosts: bundle groups mark `lost_indices` lost; slice groups drop every
// bundle of `dropped_slices` (the slice is the unit of failure). The group is RESCHEDULING.
struct GroupBundlesLost {
  GroupId group;
  std::vector<int> lost_indices;
  std::vector<std::string> dropped_slices;
  std::string message;
  int64_t wall_ms = 0;
};

// The group ends REMOVED or FAILED and holds nothing.
struct GroupEnded {
  GroupId group;
  PgState state = PgState::kRemoved;
  std::string message;
  int64_t wall_ms = 0;
};

// A worker is about to be started (recorded before the agent is asked, so that its exit is never unknown).
struct WorkerStarting {
  Worker worker;
};

struct WorkerStarted {
  WorkerId worker;
  int64_t pid = 0;
  int64_t wall_ms = 0;
};

struct WorkerExited {
  WorkerId worker;
  WorkerExit exit;
};

struct JobSubmitted {
  Job job;
};

// A job's status changes (RUNNING once its worker started; a terminal status once it ended).
struct JobUpdated {
  JobId job;
  JobStatus status = JobStatus::kPending;
  std::string message;
  std::string error_type;
  std::optional<int> exit_code;
  int64_t wall_ms = 0;
};

struct JobStopRequested {
  JobId job;
};

struct JobDeleted {
  JobId job;
};

// A new run; `spec_json` is train::RunSpecToJson of its spec, from which the plan is derived again.
struct RunSubmitted {
  RunId run;
  std::string spec_json;
  std::string token;
  GroupId group;
  std::vector<std::pair<int64_t, std::string>> committed;  // what earlier runs of its name committed
  int64_t wall_ms = 0;
  std::string service;          // a service replica: its service
  int64_t service_version = 0;  // and the version of the spec it runs
};

// An attempt starts: RUNNING. Its workers come in WorkerStarting records of the same transaction.
struct AttemptStarted {
  RunId run;
  RunAttempt attempt;
};

// The current attempt failed: failures + 1, RESTARTING (a RunFinished follows when max_failures is spent).
// `reason` names the cause as far as it is known then; an AttemptExplained settles it.
struct AttemptEnded {
  RunId run;
  int number = 0;
  std::string reason;
  int64_t wall_ms = 0;
  std::string cause;    // CauseKindName
  std::string details;  // the cause's evidence (output lines, libtpu's error)
};

// The root cause of an ended attempt, settled once its workers all ended or the failure window passed.
// `run_message`: the run's new message, when the run failed with this attempt ("" = unchanged).
struct AttemptExplained {
  RunId run;
  int number = 0;
  std::string cause;
  std::string reason;
  std::string details;
  std::string run_message;
  int64_t wall_ms = 0;
};

// The run ends SUCCEEDED, FAILED or STOPPED (ending its current attempt too, with `message`).
struct RunFinished {
  RunId run;
  RunStatus status = RunStatus::kSucceeded;
  std::string message;
  int64_t wall_ms = 0;
};

struct RunStopRequested {
  RunId run;
};

// A rank's report of a step of the current attempt: rank 0's metrics, and a staged checkpoint ("" = none).
struct RunReported {
  RunId run;
  int attempt = 0;
  int rank = 0;
  int64_t step = 0;
  std::optional<std::string> metrics_json;
  std::string checkpoint;
  int64_t wall_ms = 0;
};

// Every rank reported `step`; its checkpoint is committed at `dir`. `committed` is the whole list afterwards (older
// ones may have been pruned).
struct CheckpointCommitted {
  RunId run;
  int64_t step = 0;
  std::string dir;
  std::vector<std::pair<int64_t, std::string>> committed;
  int64_t wall_ms = 0;
};

// A package's bytes are in the head's package directory (written before this record).
struct PackageStored {
  Package package;
};

// A package nothing uses any more is removed (its file is deleted after this record).
struct PackageRemoved {
  std::string name;
  int64_t wall_ms = 0;
};

// An owner created an actor (PENDING_CREATION). Its name, when it has one, is free in its namespace.
struct ActorRegistered {
  Actor actor;
};

// An actor's state as its owner (or the head, for an owner that is gone) reports it. DEAD is final.
struct ActorUpdated {
  ActorId actor;
  ActorState state = ActorState::kPendingCreation;
  NodeId node;
  int64_t pid = 0;
  std::string worker_address;
  int restarts = 0;
  std::string death_cause;
  int64_t wall_ms = 0;
  // A detached actor's lease (the head's own reports): where its worker is held; empty between workers.
  std::string lease_agent;
  std::string lease_id;
};

// A service is deployed, or its spec changed: `version` is the previous one + 1 (1 for a new service).
struct ServiceDeployed {
  std::string name;
  std::string spec_json;  // train::ServiceSpecToJson
  int64_t version = 0;
  int64_t wall_ms = 0;
};

// A service is deleted: its replicas drain and stop.
struct ServiceDeleted {
  std::string name;
  int64_t wall_ms = 0;
};

using Record = std::variant<HeadStarted, NodeRegistered, NodeDied, GroupSubmitted, GroupPlaced, GroupWaiting,
                            GroupBundlesLost, GroupEnded, WorkerStarting, WorkerStarted, WorkerExited, JobSubmitted,
                            JobUpdated, JobStopRequested, JobDeleted, RunSubmitted, AttemptStarted, AttemptEnded,
                            RunFinished, RunStopRequested, RunReported, CheckpointCommitted, PackageStored,
                            PackageRemoved, AttemptExplained, ActorRegistered, ActorUpdated, NodeRemoved, ServiceDeployed,
                            ServiceDeleted, NodeRevoked>;

// "NodeRegistered", "GroupPlaced", ...: the record's type name, as the journal writes it.
std::string_view RecordName(const Record& record);

}  // namespace torus::head
