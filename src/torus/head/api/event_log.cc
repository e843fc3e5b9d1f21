#include "torus/head/api/event_log.h"

#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"

namespace torus::head {
namespace {

std::string_view OwnerKindName(OwnerKind kind) {
  switch (kind) {
    case OwnerKind::kJob: return "job";
    case OwnerKind::kRun: return "run";
    case OwnerKind::kNone: break;
  }
  return "";
}

// The event of one record; nullopt for records about no object (HeadStarted).
std::optional<Event> EventOf(const Record& record, const std::function<Owner(const WorkerId&)>& owner_of) {
  Event e;
  e.type = std::string(RecordName(record));
  auto about = [&e](const char* kind, std::string id) {
    e.kind = kind;
    e.id = std::move(id);
  };
  bool known = true;
  std::visit(
      [&](const auto& r) {
        using T = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<T, HeadStarted>) {
          known = false;
        } else if constexpr (std::is_same_v<T, NodeRegistered>) {
          about("node", r.info.node_id);
          e.status = NodeStateName(NodeState::kAlive);
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, NodeDied>) {
          about("node", r.node.str());
          e.status = NodeStateName(NodeState::kDead);
          e.message = r.reason;
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, NodeRemoved>) {
          about("node", r.node.str());
          e.status = "REMOVED";
          e.message = r.reason;
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, NodeRevoked>) {
          about("node", r.node.str());
          e.status = "REVOKED";
          e.message = r.reason;
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, GroupSubmitted>) {
          about("group", r.group.id.str());
          e.status = PgStateName(r.group.state);
          e.owner = r.group.owner;
          e.wall_ms = r.group.created_wall_ms;
        } else if constexpr (std::is_same_v<T, GroupPlaced>) {
          about("group", r.group.str());
          e.status = PgStateName(PgState::kCreated);
          e.message = r.message;
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, GroupWaiting>) {
          about("group", r.group.str());
          e.status = PgStateName(PgState::kPending);
          e.message = r.reason;
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, GroupBundlesLost>) {
          about("group", r.group.str());
          e.status = PgStateName(PgState::kRescheduling);
          e.message = r.message;
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, GroupEnded>) {
          about("group", r.group.str());
          e.status = PgStateName(r.state);
          e.message = r.message;
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, WorkerStarting>) {
          about("worker", r.worker.id.str());
          e.status = WorkerPhaseName(WorkerPhase::kStarting);
          e.owner = r.worker.owner;
          e.node = r.worker.node.str();
          if (r.worker.owner.kind == OwnerKind::kRun) {
            e.attempt = r.worker.attempt;
            e.rank = r.worker.rank;
          }
        } else if constexpr (std::is_same_v<T, WorkerStarted>) {
          about("worker", r.worker.str());
          e.status = WorkerPhaseName(WorkerPhase::kRunning);
          e.owner = owner_of(r.worker);
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, WorkerExited>) {
          about("worker", r.worker.str());
          e.status = WorkerPhaseName(WorkerPhase::kExited);
          e.owner = owner_of(r.worker);
          e.message = r.exit.Describe();
          e.exit = r.exit;
          e.wall_ms = r.exit.wall_ms;
        } else if constexpr (std::is_same_v<T, JobSubmitted>) {
          about("job", r.job.id.str());
          e.status = JobStatusName(r.job.status);
          e.wall_ms = r.job.submit_time_ms;
        } else if constexpr (std::is_same_v<T, JobUpdated>) {
          about("job", r.job.str());
          e.status = JobStatusName(r.status);
          e.message = r.message;
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, JobStopRequested>) {
          about("job", r.job.str());
        } else if constexpr (std::is_same_v<T, JobDeleted>) {
          about("job", r.job.str());
        } else if constexpr (std::is_same_v<T, RunSubmitted>) {
          about("run", r.run.str());
          e.status = RunStatusName(RunStatus::kPending);
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, AttemptStarted>) {
          about("run", r.run.str());
          e.status = RunStatusName(RunStatus::kRunning);
          e.attempt = r.attempt.number;
          e.wall_ms = r.attempt.start_time_ms;
        } else if constexpr (std::is_same_v<T, AttemptEnded>) {
          about("run", r.run.str());
          e.status = RunStatusName(RunStatus::kRestarting);
          e.attempt = r.number;
          e.message = r.reason;
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, AttemptExplained>) {
          about("run", r.run.str());
          e.attempt = r.number;
          e.message = r.reason;
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, RunFinished>) {
          about("run", r.run.str());
          e.status = RunStatusName(r.status);
          e.message = r.message;
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, RunStopRequested>) {
          about("run", r.run.str());
        } else if constexpr (std::is_same_v<T, RunReported>) {
          about("run", r.run.str());
          e.attempt = r.attempt;
          e.rank = r.rank;
          e.step = r.step;
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, CheckpointCommitted>) {
          about("run", r.run.str());
          e.step = r.step;
          e.message = r.dir;
        } else if constexpr (std::is_same_v<T, PackageStored>) {
          about("package", r.package.name);
          e.status = "STORED";
          e.wall_ms = r.package.stored_wall_ms;
        } else if constexpr (std::is_same_v<T, PackageRemoved>) {
          about("package", r.name);
          e.status = "REMOVED";
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, ActorRegistered>) {
          about("actor", r.actor.id.str());
          e.status = ActorStateName(r.actor.state);
          e.wall_ms = r.actor.create_time_ms;
        } else if constexpr (std::is_same_v<T, ActorUpdated>) {
          about("actor", r.actor.str());
          e.status = ActorStateName(r.state);
          e.message = r.death_cause;
          e.node = r.node.str();
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, ServiceDeployed>) {
          about("service", r.name);
          e.status = r.version == 1 ? "DEPLOYED" : "UPDATED";
          e.message = absl::StrCat("version ", r.version);
          e.wall_ms = r.wall_ms;
        } else if constexpr (std::is_same_v<T, ServiceDeleted>) {
          about("service", r.name);
          e.status = "DELETED";
          e.wall_ms = r.wall_ms;
        } else {
          static_assert(!sizeof(T), "every record makes an event, or says why not");
        }
      },
      record);
  if (!known) return std::nullopt;
  return e;
}

}  // namespace

nlohmann::json EventJson(const Event& e) {
  nlohmann::json j = {{"revision", e.revision}, {"kind", e.kind}, {"id", e.id}, {"type", e.type}};
  if (!e.status.empty()) j["status"] = e.status;
  if (!e.message.empty()) j["message"] = e.message;
  if (e.owner.kind != OwnerKind::kNone) j[std::string(OwnerKindName(e.owner.kind))] = e.owner.id;
  if (e.attempt > 0) j["attempt"] = e.attempt;
  if (e.rank >= 0) j["rank"] = e.rank;
  if (!e.node.empty()) j["node"] = e.node;
  if (e.step >= 0) j["step"] = e.step;
  if (e.exit) {
    nlohmann::json x = {{"lost", e.exit->lost}, {"start_failed", e.exit->start_failed}};
    if (!e.exit->lost && !e.exit->start_failed) {
      if (e.exit->signal != 0) {
        x["signal"] = e.exit->signal;
      } else {
        x["exit_code"] = e.exit->exit_code;
      }
    }
    j["exit"] = std::move(x);
  }
  if (e.wall_ms > 0) j["time_ms"] = e.wall_ms;
  return j;
}

std::vector<Event> EventsFromRecords(const std::vector<Record>& records,
                                     const std::function<Owner(const WorkerId&)>& owner_of) {
  std::vector<Event> events;
  events.reserve(records.size());
  for (const Record& r : records) {
    if (auto e = EventOf(r, owner_of)) events.push_back(*std::move(e));
  }
  return events;
}

bool IsEventKind(std::string_view kind) {
  return kind == "node" || kind == "group" || kind == "job" || kind == "run" || kind == "worker" ||
         kind == "package" || kind == "actor" || kind == "service";
}

bool EventFilter::Matches(const Event& e) const {
  if (!kinds.empty() && !kinds.contains(e.kind)) return false;
  if (ids.empty()) return true;
  return ids.contains(e.id) || (e.owner.kind != OwnerKind::kNone && ids.contains(e.owner.id));
}

EventLog::EventLog(uint64_t epoch, size_t capacity) : epoch_(epoch), capacity_(std::max<size_t>(capacity, 1)) {}

void EventLog::Append(std::vector<Event> events) {
  if (events.empty()) return;
  absl::MutexLock lock(&mu_);
  for (Event& e : events) {
    e.revision = ++revision_;
    events_.push_back(std::move(e));
  }
  while (events_.size() > capacity_) events_.pop_front();
}

absl::StatusOr<EventLog::Batch> EventLog::Wait(uint64_t since, const EventFilter& filter, absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  Batch batch;
  batch.revision = since;
  while (true) {
    if (closed_) return absl::CancelledError("the head is stopping");
    if (since > revision_) {
      return absl::InvalidArgumentError(
          absl::StrCat("revision ", since, " is ahead of this head's newest, ", revision_, " (epoch ", epoch_, ")"));
    }
    const uint64_t oldest = events_.empty() ? revision_ + 1 : events_.front().revision;
    if (since + 1 < oldest) {
      return absl::OutOfRangeError(absl::StrCat("events after revision ", since, " are no longer kept (the oldest is ",
                                                oldest, "); read the objects again and watch from revision ",
                                                revision_));
    }
    for (size_t i = since + 1 - oldest; i < events_.size(); ++i) {
      if (filter.Matches(events_[i])) batch.events.push_back(events_[i]);
    }
    batch.revision = revision_;
    since = revision_;
    if (!batch.events.empty()) return batch;
    auto changed = [this, since]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_ || revision_ > since; };
    if (!mu_.AwaitWithDeadline(absl::Condition(&changed), deadline)) return batch;
  }
}

void EventLog::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

uint64_t EventLog::oldest_since() const {
  absl::MutexLock lock(&mu_);
  return events_.empty() ? revision_ : events_.front().revision - 1;
}

uint64_t EventLog::revision() const {
  absl::MutexLock lock(&mu_);
  return revision_;
}

}  // namespace torus::head
