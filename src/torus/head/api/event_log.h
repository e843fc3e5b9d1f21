// Events: what changed in the head's state, in commit order, for clients that watch instead of polling (the CLI
// waiting for a job or a run, the dashboard).
//
// Each committed record becomes one event (EventsFromRecords, a pure function) about one object — a node, group,
// job, run or worker — with the object's status after the change when the record sets it. The EventLog numbers
// events with a revision (1, 2, ... within the head's epoch; a restarted head starts again at 1 in a new epoch),
// keeps the newest `capacity` of them, and hands them to readers that wait for events after a revision they hold.
//
// Readers never slow the head: Append only adds to the ring and wakes waiters. A reader that falls more than
// `capacity` events behind is told so (OutOfRange) and must read the objects again and watch from the revision it
// is given, as a Kubernetes watch does on 410 Gone.
//
// Thread-safety: EventLog is thread-safe. EventsFromRecords is pure.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "torus/head/state/records.h"

namespace torus::head {

// A watch or event stream with nothing new is sent a progress note (its revision) this often, so that a client
// tells a quiet head from a lost one.
inline constexpr absl::Duration kEventProgressInterval = absl::Seconds(10);

struct Event {
  uint64_t revision = 0;
  std::string kind;     // "node", "group", "job", "run", "worker", "package"
  std::string id;
  std::string type;     // the record's name: "JobUpdated", "WorkerExited", ...
  std::string status;   // the object's status after the change; "" when the record leaves it as it was
  std::string message;  // why, when the record says
  Owner owner;          // groups and workers: the job or run they belong to
  int attempt = 0;      // workers of runs, and attempts of runs
  int rank = -1;        // workers of runs
  std::string node;     // workers
  int64_t step = -1;    // RunReported, CheckpointCommitted
  std::optional<WorkerExit> exit;  // WorkerExited
  int64_t wall_ms = 0;  // when it happened, when the record says
  bool operator==(const Event&) const = default;
};

// {"revision", "kind", "id", "type", ...}: the optional fields only when set.
nlohmann::json EventJson(const Event& event);

// The events of one committed batch, in order (revision 0: the log numbers them). `owner_of` names a worker's
// job or run for records that carry only the worker's id.
std::vector<Event> EventsFromRecords(const std::vector<Record>& records,
                                     const std::function<Owner(const WorkerId&)>& owner_of);

// Whether `kind` names a kind of event: node, group, job, run, worker or package.
bool IsEventKind(std::string_view kind);

// Which events a reader wants: by kind (empty = all), and by id (empty = all; an id matches the event's object
// and, for groups and workers, their owner — so watching a job also shows its workers).
struct EventFilter {
  std::set<std::string> kinds;
  std::set<std::string> ids;
  bool Matches(const Event& event) const;
};

class EventLog {
 public:
  EventLog(uint64_t epoch, size_t capacity);

  // Numbers the events and keeps them; wakes readers.
  void Append(std::vector<Event> events);

  struct Batch {
    std::vector<Event> events;  // after the reader's revision, matching its filter, in order
    uint64_t revision = 0;      // the newest revision the reader has now seen (matching or not)
  };
  // The events after `since` that match `filter`, waiting until `deadline` for one when there is none yet (an
  // empty batch at the deadline). OutOfRange when events after `since` are no longer kept; InvalidArgument when
  // `since` is ahead of the newest revision; Cancelled once the log is closed.
  absl::StatusOr<Batch> Wait(uint64_t since, const EventFilter& filter, absl::Time deadline) const;

  // Wakes every reader; Wait answers Cancelled from now on.
  void Close();

  uint64_t epoch() const { return epoch_; }
  uint64_t revision() const;
  // The revision just before the oldest event kept: Wait(oldest_since()) reads every event kept.
  uint64_t oldest_since() const;

 private:
  const uint64_t epoch_;
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<Event> events_ ABSL_GUARDED_BY(mu_);  // revisions oldest() .. revision_
  uint64_t revision_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace torus::head
