#include "torus/head/state/model.h"

#include "absl/strings/str_cat.h"

namespace torus::head {

std::string NodeStateName(NodeState s) { return s == NodeState::kAlive ? "ALIVE" : "DEAD"; }

std::optional<std::string> PackageNameOf(std::string_view uri) {
  if (!uri.starts_with(kPackageScheme)) return std::nullopt;
  return std::string(uri.substr(kPackageScheme.size()));
}

std::string Node::target() const { return absl::StrCat(info.address, ":", info.agent_port); }

std::string PgStateName(PgState s) {
  switch (s) {
    case PgState::kPending: return "PENDING";
    case PgState::kCreated: return "CREATED";
    case PgState::kRescheduling: return "RESCHEDULING";
    case PgState::kRemoved: return "REMOVED";
    case PgState::kFailed: return "FAILED";
  }
  return "UNKNOWN";
}

std::string WorkerPhaseName(WorkerPhase p) {
  switch (p) {
    case WorkerPhase::kStarting: return "STARTING";
    case WorkerPhase::kRunning: return "RUNNING";
    case WorkerPhase::kExited: return "EXITED";
  }
  return "UNKNOWN";
}

std::string WorkerExit::Describe() const {
  if (lost) return absl::StrCat("was lost: ", reason);
  if (start_failed) return absl::StrCat("failed to start: ", reason);
  if (signal != 0) return absl::StrCat("was killed by signal ", signal);
  return absl::StrCat("exited with code ", exit_code);
}

std::string JobStatusName(JobStatus s) {
  switch (s) {
    case JobStatus::kPending: return "PENDING";
    case JobStatus::kRunning: return "RUNNING";
    case JobStatus::kStopped: return "STOPPED";
    case JobStatus::kSucceeded: return "SUCCEEDED";
    case JobStatus::kFailed: return "FAILED";
  }
  return "UNKNOWN";
}

std::string ActorStateName(ActorState s) {
  switch (s) {
    case ActorState::kPendingCreation: return "PENDING_CREATION";
    case ActorState::kAlive: return "ALIVE";
    case ActorState::kRestarting: return "RESTARTING";
    case ActorState::kDead: return "DEAD";
  }
  return "UNKNOWN";
}

std::string RunStatusName(RunStatus s) {
  switch (s) {
    case RunStatus::kPending: return "PENDING";
    case RunStatus::kRunning: return "RUNNING";
    case RunStatus::kRestarting: return "RESTARTING";
    case RunStatus::kSucceeded: return "SUCCEEDED";
    case RunStatus::kFailed: return "FAILED";
    case RunStatus::kStopped: return "STOPPED";
  }
  return "UNKNOWN";
}

}  // namespace torus::head
