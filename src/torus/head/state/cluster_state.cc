#include "torus/head/state/cluster_state.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "torus/common/status.h"

namespace torus::head {
namespace {

absl::Status Unknown(const char* record, const char* what, const std::string& id) {
  return absl::NotFoundError(absl::StrCat(record, ": unknown ", what, " ", id));
}

}  // namespace

// ---- Apply ----

absl::Status ClusterState::Apply(const Record& record) {
  return std::visit([this](const auto& r) { return ApplyOne(r); }, record);
}

absl::Status ClusterState::ApplyOne(const HeadStarted& r) {
  if (r.epoch <= epoch_) {
    return absl::InvalidArgumentError(absl::StrCat("HeadStarted: epoch ", r.epoch, " is not after ", epoch_));
  }
  epoch_ = r.epoch;
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const NodeRegistered& r) {
  if (r.info.node_id.empty()) return absl::InvalidArgumentError("NodeRegistered: empty node id");
  Node& n = nodes_[NodeId(r.info.node_id)];
  if (n.incarnation != 0 && n.alive()) --alive_;
  n.info = r.info;
  n.state = NodeState::kAlive;
  n.incarnation = r.incarnation;
  n.registered_wall_ms = r.wall_ms;
  n.died_wall_ms = 0;
  n.death_reason.clear();
  ++alive_;
  last_incarnation_ = std::max(last_incarnation_, r.incarnation);
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const NodeDied& r) {
  auto it = nodes_.find(r.node);
  if (it == nodes_.end()) return Unknown("NodeDied", "node", r.node.str());
  Node& n = it->second;
  if (!n.alive() || n.incarnation != r.incarnation) {
    return absl::FailedPreconditionError(
        absl::StrCat("NodeDied: node ", r.node.str(), " incarnation ", r.incarnation, " is not alive"));
  }
  n.state = NodeState::kDead;
  n.death_reason = r.reason;
  n.died_wall_ms = r.wall_ms;
  --alive_;
  PruneDeadNodes();
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const NodeRemoved& r) {
  auto it = nodes_.find(r.node);
  if (it == nodes_.end()) return Unknown("NodeRemoved", "node", r.node.str());
  if (it->second.alive()) {
    return absl::FailedPreconditionError(absl::StrCat("NodeRemoved: node ", r.node.str(), " is alive"));
  }
  nodes_.erase(it);
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const NodeRevoked& r) {
  if (r.node.str().empty()) return absl::InvalidArgumentError("NodeRevoked: node is empty");
  revoked_nodes_.try_emplace(r.node, r);  // the first revocation is the one kept
  return absl::OkStatus();
}

void ClusterState::PruneDeadNodes() {
  const size_t dead = nodes_.size() - alive_;
  if (dead <= kMaxDeadNodes) return;
  std::vector<std::pair<int64_t, NodeId>> by_age;
  for (const auto& [id, n] : nodes_) {
    if (!n.alive()) by_age.emplace_back(n.died_wall_ms, id);
  }
  std::sort(by_age.begin(), by_age.end());
  for (size_t i = 0; i < dead - kMaxDeadNodes; ++i) nodes_.erase(by_age[i].second);
}

absl::Status ClusterState::ApplyOne(const GroupSubmitted& r) {
  const Group& g = r.group;
  if (g.id.empty()) return absl::InvalidArgumentError("GroupSubmitted: empty group id");
  if (groups_.contains(g.id)) {
    return absl::AlreadyExistsError(absl::StrCat("GroupSubmitted: group ", g.id.str(), " exists"));
  }
  if (!g.name.empty() && live_names_.contains(g.name)) {
    return absl::AlreadyExistsError(absl::StrCat("GroupSubmitted: a live group is named ", g.name));
  }
  groups_[g.id] = g;
  Index(g);
  if (!g.name.empty()) live_names_[g.name] = g.id;
  next_group_seq_ = std::max(next_group_seq_, g.seq + 1);
  return absl::OkStatus();
}

void ClusterState::Index(const Group& g) {
  if (g.Live()) {
    live_groups_.insert(g.id);
    ended_groups_.erase({g.seq, g.id});
  } else {
    live_groups_.erase(g.id);
    ended_groups_.insert({g.seq, g.id});
  }
  if (g.Waiting()) {
    waiting_groups_.insert(g.id);
  } else {
    waiting_groups_.erase(g.id);
  }
}

void ClusterState::AddHistory(Group& g, int64_t wall_ms, const std::string& message) {
  ++g.changes;
  g.history.push_back({wall_ms, PgStateName(g.state), message});
  if (g.history.size() > kMaxGroupHistory) g.history.erase(g.history.begin() + 1);
}

absl::Status ClusterState::ApplyOne(const GroupPlaced& r) {
  Group* g = MutableGroup(r.group);
  if (g == nullptr) return Unknown("GroupPlaced", "group", r.group.str());
  if (!g->Live()) return absl::FailedPreconditionError(absl::StrCat("GroupPlaced: group ", r.group.str(), " ended"));
  g->bundles = r.bundles;
  g->slices = r.slices;
  g->alternative = r.alternative;
  g->reason.clear();
  g->state = PgState::kCreated;
  g->placed_once = true;
  Index(*g);
  AddHistory(*g, r.wall_ms, r.message);
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const GroupWaiting& r) {
  Group* g = MutableGroup(r.group);
  if (g == nullptr) return Unknown("GroupWaiting", "group", r.group.str());
  if (!g->Live()) return absl::FailedPreconditionError(absl::StrCat("GroupWaiting: group ", r.group.str(), " ended"));
  const bool changed = g->state != PgState::kPending || g->history.empty() || g->history.back().message != r.reason;
  g->state = PgState::kPending;
  g->reason = r.reason;
  Index(*g);
  if (changed) {
    AddHistory(*g, r.wall_ms, r.reason);
  } else {
    ++g->changes;
  }
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const GroupBundlesLost& r) {
  Group* g = MutableGroup(r.group);
  if (g == nullptr) return Unknown("GroupBundlesLost", "group", r.group.str());
  if (!g->Live()) {
    return absl::FailedPreconditionError(absl::StrCat("GroupBundlesLost: group ", r.group.str(), " ended"));
  }
  const std::set<int> lost(r.lost_indices.begin(), r.lost_indices.end());
  const std::set<std::string> dropped(r.dropped_slices.begin(), r.dropped_slices.end());
  for (HeldBundle& b : g->bundles) {
    if (lost.contains(b.index)) b.lost = true;
  }
  std::erase_if(g->bundles, [&](const HeldBundle& b) { return dropped.contains(b.slice_name); });
  std::erase_if(g->slices, [&](const std::string& s) { return dropped.contains(s); });
  g->state = PgState::kRescheduling;
  g->reason = r.message;
  Index(*g);
  AddHistory(*g, r.wall_ms, r.message);
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const GroupEnded& r) {
  Group* g = MutableGroup(r.group);
  if (g == nullptr) return Unknown("GroupEnded", "group", r.group.str());
  if (!g->Live()) return absl::FailedPreconditionError(absl::StrCat("GroupEnded: group ", r.group.str(), " ended"));
  if (r.state != PgState::kRemoved && r.state != PgState::kFailed) {
    return absl::InvalidArgumentError("GroupEnded: state must be REMOVED or FAILED");
  }
  g->bundles.clear();
  g->slices.clear();
  if (!g->name.empty()) live_names_.erase(g->name);
  g->state = r.state;
  g->reason = r.state == PgState::kFailed ? r.message : "";
  Index(*g);
  AddHistory(*g, r.wall_ms, r.message);
  PruneEndedGroups();
  return absl::OkStatus();
}

void ClusterState::PruneEndedGroups() {
  while (ended_groups_.size() > kMaxEndedGroups) {
    groups_.erase(ended_groups_.begin()->second);
    ended_groups_.erase(ended_groups_.begin());
  }
}

absl::Status ClusterState::ApplyOne(const WorkerStarting& r) {
  const Worker& w = r.worker;
  if (w.id.empty()) return absl::InvalidArgumentError("WorkerStarting: empty worker id");
  if (auto it = workers_.find(w.id); it != workers_.end() && it->second.phase != WorkerPhase::kExited) {
    return absl::AlreadyExistsError(absl::StrCat("WorkerStarting: worker ", w.id.str(), " is running"));
  }
  if (w.owner.kind == OwnerKind::kJob) {
    auto job = jobs_.find(JobId(w.owner.id));
    if (job == jobs_.end()) return Unknown("WorkerStarting", "job", w.owner.id);
    job->second.worker = w.id;
  } else if (w.owner.kind == OwnerKind::kRun && !runs_.contains(RunId(w.owner.id))) {
    return Unknown("WorkerStarting", "run", w.owner.id);
  }
  workers_[w.id] = w;
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const WorkerStarted& r) {
  auto it = workers_.find(r.worker);
  if (it == workers_.end()) return Unknown("WorkerStarted", "worker", r.worker.str());
  Worker& w = it->second;
  w.pid = r.pid;
  w.start_wall_ms = r.wall_ms;
  w.launch.reset();  // delivered
  // A quick worker may have exited (and been reported) before its start was acknowledged; it stays exited.
  if (w.phase == WorkerPhase::kStarting) w.phase = WorkerPhase::kRunning;
  // ... and its job may have ended already: it still ran, from when it started.
  if (w.owner.kind == OwnerKind::kJob) {
    if (auto job = jobs_.find(JobId(w.owner.id)); job != jobs_.end() && job->second.worker == w.id &&
                                                  job->second.Terminal() && job->second.start_time_ms == 0) {
      job->second.start_time_ms = std::min(r.wall_ms, job->second.end_time_ms);
    }
  }
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const WorkerExited& r) {
  auto it = workers_.find(r.worker);
  if (it == workers_.end()) return Unknown("WorkerExited", "worker", r.worker.str());
  Worker& w = it->second;
  if (w.phase == WorkerPhase::kExited) {
    return absl::FailedPreconditionError(absl::StrCat("WorkerExited: worker ", r.worker.str(), " already exited"));
  }
  w.phase = WorkerPhase::kExited;
  w.exit = r.exit;
  w.launch.reset();
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const JobSubmitted& r) {
  if (r.job.id.empty()) return absl::InvalidArgumentError("JobSubmitted: empty job id");
  if (jobs_.contains(r.job.id)) {
    return absl::AlreadyExistsError(absl::StrCat("JobSubmitted: job ", r.job.id.str(), " exists"));
  }
  jobs_[r.job.id] = r.job;
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const JobUpdated& r) {
  auto it = jobs_.find(r.job);
  if (it == jobs_.end()) return Unknown("JobUpdated", "job", r.job.str());
  Job& job = it->second;
  if (job.Terminal()) {
    return absl::FailedPreconditionError(absl::StrCat("JobUpdated: job ", r.job.str(), " is ",
                                                      JobStatusName(job.status), " already"));
  }
  job.status = r.status;
  job.message = r.message;
  job.error_type = r.error_type;
  if (r.exit_code) job.exit_code = r.exit_code;
  if (r.status == JobStatus::kRunning) {
    job.start_time_ms = r.wall_ms;
  } else if (job.Terminal()) {
    job.end_time_ms = r.wall_ms;
    // A job whose worker ran and exited before its start was acknowledged still ran: it has a start time.
    if (job.start_time_ms == 0) {
      if (const Worker* w = FindWorker(job.worker); w != nullptr && w->pid != 0 && w->start_wall_ms > 0) {
        job.start_time_ms = std::min(w->start_wall_ms, r.wall_ms);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const JobStopRequested& r) {
  auto it = jobs_.find(r.job);
  if (it == jobs_.end()) return Unknown("JobStopRequested", "job", r.job.str());
  it->second.stop_requested = true;
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const JobDeleted& r) {
  auto it = jobs_.find(r.job);
  if (it == jobs_.end()) return Unknown("JobDeleted", "job", r.job.str());
  if (!it->second.Terminal()) {
    return absl::FailedPreconditionError(absl::StrCat("JobDeleted: job ", r.job.str(), " has not ended"));
  }
  if (!it->second.worker.empty()) workers_.erase(it->second.worker);
  jobs_.erase(it);
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const PackageStored& r) {
  if (r.package.name.empty()) return absl::InvalidArgumentError("PackageStored: empty name");
  if (packages_.contains(r.package.name)) {
    return absl::AlreadyExistsError(absl::StrCat("PackageStored: package ", r.package.name, " is already stored"));
  }
  packages_[r.package.name] = r.package;
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const PackageRemoved& r) {
  auto it = packages_.find(r.name);
  if (it == packages_.end()) return Unknown("PackageRemoved", "package", r.name);
  packages_.erase(it);
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const ActorRegistered& r) {
  const Actor& a = r.actor;
  if (a.id.empty()) return absl::InvalidArgumentError("ActorRegistered: empty actor id");
  if (actors_.contains(a.id)) {
    return absl::AlreadyExistsError(absl::StrCat("ActorRegistered: actor ", a.id.str(), " exists"));
  }
  if (a.state == ActorState::kDead) {
    return absl::InvalidArgumentError(absl::StrCat("ActorRegistered: actor ", a.id.str(), " is DEAD"));
  }
  if (!a.name.empty()) {
    if (const Actor* holder = FindNamedActor(a.ns, a.name); holder != nullptr) {
      return absl::AlreadyExistsError(absl::StrCat("ActorRegistered: the name \"", a.name, "\" is taken in namespace \"",
                                                   a.ns, "\" by actor ", holder->id.str()));
    }
    actor_names_[{a.ns, a.name}] = a.id;
  }
  actors_[a.id] = a;
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const ActorUpdated& r) {
  auto it = actors_.find(r.actor);
  if (it == actors_.end()) return Unknown("ActorUpdated", "actor", r.actor.str());
  Actor& a = it->second;
  if (a.state == ActorState::kDead) {
    return absl::FailedPreconditionError(absl::StrCat("ActorUpdated: actor ", r.actor.str(), " is DEAD already"));
  }
  a.state = r.state;
  if (!r.node.empty()) a.node = r.node;
  if (r.pid != 0) a.pid = r.pid;
  a.worker_address = r.state == ActorState::kAlive ? r.worker_address : "";
  a.restarts = r.restarts;
  a.lease_agent = r.lease_agent;
  a.lease_id = r.lease_id;
  if (r.state == ActorState::kAlive && a.start_time_ms == 0) a.start_time_ms = r.wall_ms;
  if (r.state == ActorState::kDead) {
    a.creation.clear();
    a.death_cause = r.death_cause;
    a.end_time_ms = r.wall_ms;
    if (!a.name.empty()) actor_names_.erase({a.ns, a.name});
    dead_actors_.insert({a.end_time_ms, a.id});
    while (dead_actors_.size() > kMaxDeadActors) {
      actors_.erase(dead_actors_.begin()->second);
      dead_actors_.erase(dead_actors_.begin());
    }
  }
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const RunSubmitted& r) {
  if (r.run.empty()) return absl::InvalidArgumentError("RunSubmitted: empty run id");
  if (runs_.contains(r.run)) return absl::AlreadyExistsError(absl::StrCat("RunSubmitted: run ", r.run.str(), " exists"));
  auto spec = train::RunSpecFromJson(r.spec_json);
  if (!spec.ok()) return absl::InvalidArgumentError(absl::StrCat("RunSubmitted: spec: ", spec.status().message()));
  auto plan = train::PlanRun(*spec);
  if (!plan.ok()) return absl::InvalidArgumentError(absl::StrCat("RunSubmitted: plan: ", plan.status().message()));
  Run& run = runs_[r.run];
  run.id = r.run;
  run.spec = *std::move(spec);
  run.plan = *std::move(plan);
  run.group = r.group;
  run.token = r.token;
  run.created_time_ms = r.wall_ms;
  run.committed = r.committed;
  run.service = r.service;
  run.service_version = r.service_version;
  run.message = "waiting for resources";
  return absl::OkStatus();
}

namespace {

absl::StatusOr<Run*> LiveRun(std::map<RunId, Run>& runs, const RunId& id, const char* record) {
  auto it = runs.find(id);
  if (it == runs.end()) return absl::NotFoundError(absl::StrCat(record, ": unknown run ", id.str()));
  if (it->second.Terminal()) {
    return absl::FailedPreconditionError(absl::StrCat(record, ": run ", id.str(), " has ended"));
  }
  return &it->second;
}

}  // namespace

absl::Status ClusterState::ApplyOne(const AttemptStarted& r) {
  TORUS_ASSIGN_OR_RETURN(Run* run, LiveRun(runs_, r.run, "AttemptStarted"));
  if (r.attempt.number != static_cast<int>(run->attempts.size()) + 1) {
    return absl::InvalidArgumentError(absl::StrCat("AttemptStarted: attempt ", r.attempt.number, " of run ",
                                                   r.run.str(), " is not the next one"));
  }
  run->attempts.push_back(r.attempt);
  run->reports.clear();
  run->status = RunStatus::kRunning;
  run->message = absl::StrCat("attempt ", r.attempt.number, ": ", r.attempt.ranks.size(), " workers",
                              r.attempt.checkpoint_dir.empty() ? "" : " from " + r.attempt.checkpoint_dir);
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const AttemptEnded& r) {
  TORUS_ASSIGN_OR_RETURN(Run* run, LiveRun(runs_, r.run, "AttemptEnded"));
  if (run->attempts.empty() || run->attempts.back().number != r.number || run->attempts.back().ended()) {
    return absl::FailedPreconditionError(
        absl::StrCat("AttemptEnded: attempt ", r.number, " of run ", r.run.str(), " is not the running one"));
  }
  RunAttempt& a = run->attempts.back();
  a.end_time_ms = r.wall_ms;
  a.end_reason = r.reason;
  a.cause = r.cause;
  a.end_details = r.details;
  run->failures += 1;
  run->status = RunStatus::kRestarting;
  run->message = absl::StrCat("attempt ", r.number, " failed: ", r.reason, "; restarting");
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const AttemptExplained& r) {
  auto it = runs_.find(r.run);
  if (it == runs_.end()) return Unknown("AttemptExplained", "run", r.run.str());
  Run& run = it->second;
  if (r.number < 1 || r.number > static_cast<int>(run.attempts.size()) || !run.attempts[r.number - 1].ended()) {
    return absl::FailedPreconditionError(
        absl::StrCat("AttemptExplained: attempt ", r.number, " of run ", r.run.str(), " has not ended"));
  }
  RunAttempt& a = run.attempts[r.number - 1];
  a.end_reason = r.reason;
  a.cause = r.cause;
  a.end_details = r.details;
  a.explained = true;
  if (!r.run_message.empty()) run.message = r.run_message;
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const RunFinished& r) {
  TORUS_ASSIGN_OR_RETURN(Run* run, LiveRun(runs_, r.run, "RunFinished"));
  if (r.status != RunStatus::kSucceeded && r.status != RunStatus::kFailed && r.status != RunStatus::kStopped) {
    return absl::InvalidArgumentError("RunFinished: status must be SUCCEEDED, FAILED or STOPPED");
  }
  run->status = r.status;
  run->message = r.message;
  run->end_time_ms = r.wall_ms;
  if (!run->attempts.empty() && !run->attempts.back().ended()) {
    run->attempts.back().end_time_ms = r.wall_ms;
    run->attempts.back().end_reason = r.message;
  }
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const RunStopRequested& r) {
  auto it = runs_.find(r.run);
  if (it == runs_.end()) return Unknown("RunStopRequested", "run", r.run.str());
  it->second.stop_requested = true;
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const RunReported& r) {
  TORUS_ASSIGN_OR_RETURN(Run* run, LiveRun(runs_, r.run, "RunReported"));
  if (run->attempts.empty() || run->attempts.back().number != r.attempt || run->attempts.back().ended()) {
    return absl::FailedPreconditionError(
        absl::StrCat("RunReported: attempt ", r.attempt, " of run ", r.run.str(), " is not the running one"));
  }
  RunAttempt& a = run->attempts.back();
  if (r.rank < 0 || r.rank >= static_cast<int>(a.ranks.size())) {
    return absl::InvalidArgumentError(absl::StrCat("RunReported: rank ", r.rank, " is out of range"));
  }
  if (a.first_report_ms == 0) a.first_report_ms = r.wall_ms;
  a.last_report_ms = std::max(a.last_report_ms, r.wall_ms);
  if (r.metrics_json) {
    a.metrics.push_back({r.step, *r.metrics_json, r.wall_ms});
    if (a.metrics.size() > kMaxMetricPoints) a.metrics.erase(a.metrics.begin());
  }
  auto& reported = run->reports[r.step];
  reported[r.rank] = r.checkpoint;
  // A complete step without any checkpoint is done; one with checkpoints waits for its CheckpointCommitted.
  if (reported.size() == a.ranks.size() &&
      std::all_of(reported.begin(), reported.end(), [](const auto& kv) { return kv.second.empty(); })) {
    run->reports.erase(run->reports.begin(), run->reports.upper_bound(r.step));
  }
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const CheckpointCommitted& r) {
  auto it = runs_.find(r.run);
  if (it == runs_.end()) return Unknown("CheckpointCommitted", "run", r.run.str());
  Run& run = it->second;
  run.committed = r.committed;
  if (!run.attempts.empty() && !run.attempts.back().ended()) {
    RunAttempt& a = run.attempts.back();
    a.kept_until_ms = r.wall_ms > 0 ? r.wall_ms : a.last_report_ms;
  }
  // Older steps can no longer complete.
  run.reports.erase(run.reports.begin(), run.reports.upper_bound(r.step));
  return absl::OkStatus();
}

const Service* ClusterState::FindService(std::string_view name) const {
  auto it = services_.find(name);
  return it == services_.end() ? nullptr : &it->second;
}

absl::Status ClusterState::ApplyOne(const ServiceDeployed& r) {
  auto spec = train::ParseServiceSpec(r.spec_json);
  if (!spec.ok()) return absl::InvalidArgumentError(absl::StrCat("ServiceDeployed: spec: ", spec.status().message()));
  if (spec->name != r.name) {
    return absl::InvalidArgumentError(absl::StrCat("ServiceDeployed: spec names ", spec->name, ", not ", r.name));
  }
  auto it = services_.find(r.name);
  const int64_t expected = it == services_.end() ? 1 : it->second.version + 1;
  if (r.version != expected) {
    return absl::FailedPreconditionError(absl::StrCat("ServiceDeployed: version ", r.version, " of service ", r.name,
                                                      " is not the next one (", expected, ")"));
  }
  Service& s = services_[r.name];
  if (r.version == 1) s.created_ms = r.wall_ms;
  s.name = r.name;
  s.spec = *std::move(spec);
  s.spec_json = r.spec_json;
  s.version = r.version;
  s.updated_ms = r.wall_ms;
  return absl::OkStatus();
}

absl::Status ClusterState::ApplyOne(const ServiceDeleted& r) {
  auto it = services_.find(r.name);
  if (it == services_.end()) return Unknown("ServiceDeleted", "service", r.name);
  services_.erase(it);
  return absl::OkStatus();
}

}  // namespace torus::head
