// TaskTable: what the head knows of tasks, from their owners' reports (ReportTasks): the newest `max_tasks` tasks
// with their states, and counts by function and state of every task reported since the head started. Tasks are
// not journaled (they are many and short); a restarted head counts from zero.
//
// States: PENDING (submitted, waiting for its arguments or a worker; `error` says why when an agent said so),
// RUNNING (pushed to a worker), FINISHED,
// FAILED (it raised, its worker died on its last try, it was cancelled or could not be placed). A retry goes back to
// PENDING with the next attempt. Events of one task apply in the order given; an event for a task that ended is
// ignored (a late duplicate), as is one with an unknown state.
//
// Example:
//   TaskTable tasks({.max_tasks = 10000});
//   tasks.Apply("127.0.0.1:5000", events);                   // a batch from one owner
//   auto newest = tasks.List({.state = "RUNNING", .limit = 100});
//   auto summary = tasks.Summary();                          // [{name, state, count}]
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "torus/head.pb.h"

namespace torus::head {

struct TaskRecord {
  std::string task_id;
  std::string name;
  std::string state;
  std::string job_id;
  std::string actor_id;
  std::string owner_address;
  std::string node_id;
  int64_t pid = 0;
  int attempt = 0;
  std::string error;
  int64_t submit_time_ms = 0;
  int64_t start_time_ms = 0;  // RUNNING the last time
  int64_t end_time_ms = 0;
  uint64_t seq = 0;           // order of first report
};

struct TaskQuery {
  std::string state;   // empty: any
  std::string job_id;  // empty: any
  std::string name;    // empty: any
  size_t limit = 100;
};

class TaskTable {
 public:
  struct Options {
    size_t max_tasks = 10'000;
  };
  explicit TaskTable(Options options) : options_(options) {}

  // Applies a batch of one owner's events; returns how many were applied.
  int Apply(const std::string& owner_address, const google::protobuf::RepeatedPtrField<rpc::TaskEvent>& events);
  // The newest tasks that match, newest first (by first report).
  std::vector<TaskRecord> List(const TaskQuery& query) const;
  // How many tasks match `query` (ignoring its limit), among those kept.
  size_t Count(const TaskQuery& query) const;
  // [{"name", "state", "count"}] over every task reported since start, by name then state.
  nlohmann::json Summary() const;
  // Every task reported since start, by state.
  std::map<std::string, int64_t> CountsByState() const;
  // Owners of tasks PENDING or RUNNING.
  std::set<std::string> LiveOwners() const;
  // Every PENDING or RUNNING task of `owner` is FAILED with `cause`; returns how many.
  int OwnerGone(const std::string& owner, const std::string& cause, int64_t now_ms);

  static bool IsState(const std::string& state);

 private:
  void SetStateLocked(TaskRecord& task, const std::string& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable absl::Mutex mu_;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, TaskRecord> tasks_ ABSL_GUARDED_BY(mu_);  // by id
  std::map<uint64_t, std::string> by_seq_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, int64_t> counts_ ABSL_GUARDED_BY(mu_);  // (name, state) -> tasks
};

nlohmann::json TaskJson(const TaskRecord& task);

}  // namespace torus::head
