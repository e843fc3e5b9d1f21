#include "torus/head/tasks/task_table.h"

#include <algorithm>

namespace torus::head {
namespace {

bool Terminal(const std::string& state) { return state == "FINISHED" || state == "FAILED"; }

bool Matches(const TaskRecord& t, const TaskQuery& q) {
  return (q.state.empty() || t.state == q.state) && (q.job_id.empty() || t.job_id == q.job_id) &&
         (q.name.empty() || t.name == q.name);
}

}  // namespace

bool TaskTable::IsState(const std::string& state) {
  return state == "PENDING" || state == "RUNNING" || Terminal(state);
}

void TaskTable::SetStateLocked(TaskRecord& task, const std::string& state) {
  if (!task.state.empty()) --counts_[{task.name, task.state}];
  task.state = state;
  ++counts_[{task.name, task.state}];
}

int TaskTable::Apply(const std::string& owner_address,
                     const google::protobuf::RepeatedPtrField<rpc::TaskEvent>& events) {
  absl::MutexLock lock(&mu_);
  int applied = 0;
  for (const rpc::TaskEvent& e : events) {
    if (e.task_id().empty() || !IsState(e.state())) continue;
    auto it = tasks_.find(e.task_id());
    if (it == tasks_.end()) {
      TaskRecord t{.task_id = e.task_id(), .name = e.name(), .job_id = e.job_id(), .actor_id = e.actor_id(),
                   .owner_address = owner_address, .submit_time_ms = e.time_ms(), .seq = next_seq_++};
      it = tasks_.emplace(e.task_id(), std::move(t)).first;
      by_seq_[it->second.seq] = e.task_id();
    } else if (Terminal(it->second.state)) {
      continue;  // ended: a late duplicate
    }
    TaskRecord& t = it->second;
    SetStateLocked(t, e.state());
    t.attempt = e.attempt();
    t.error = e.error();  // why it waits (PENDING), or why it failed
    if (e.state() == "RUNNING") {
      t.node_id = e.node_id();
      t.pid = e.pid();
      t.start_time_ms = e.time_ms();
    }
    if (Terminal(e.state())) t.end_time_ms = e.time_ms();
    ++applied;
  }
  EvictLocked();
  return applied;
}

void TaskTable::EvictLocked() {
  // The oldest ended tasks go first; live ones only when there are more of them than the bound.
  auto oldest = by_seq_.begin();
  while (tasks_.size() > options_.max_tasks && oldest != by_seq_.end()) {
    auto t = tasks_.find(oldest->second);
    if (t != tasks_.end() && !Terminal(t->second.state) && tasks_.size() <= options_.max_tasks * 2) {
      ++oldest;
      continue;
    }
    if (t != tasks_.end()) {
      // Ended tasks stay counted; a live one forgotten is no longer counted as pending or running.
      if (!Terminal(t->second.state)) --counts_[{t->second.name, t->second.state}];
      tasks_.erase(t);
    }
    oldest = by_seq_.erase(oldest);
  }
}

std::vector<TaskRecord> TaskTable::List(const TaskQuery& query) const {
  absl::MutexLock lock(&mu_);
  std::vector<TaskRecord> out;
  for (auto it = by_seq_.rbegin(); it != by_seq_.rend() && out.size() < query.limit; ++it) {
    const TaskRecord& t = tasks_.at(it->second);
    if (Matches(t, query)) out.push_back(t);
  }
  return out;
}

size_t TaskTable::Count(const TaskQuery& query) const {
  absl::MutexLock lock(&mu_);
  return static_cast<size_t>(
      std::count_if(tasks_.begin(), tasks_.end(), [&](const auto& kv) { return Matches(kv.second, query); }));
}

nlohmann::json TaskTable::Summary() const {
  absl::MutexLock lock(&mu_);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, count] : counts_) {
    if (count > 0) out.push_back({{"name", key.first}, {"state", key.second}, {"count", count}});
  }
  return out;
}

std::map<std::string, int64_t> TaskTable::CountsByState() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, int64_t> out = {{"PENDING", 0}, {"RUNNING", 0}, {"FINISHED", 0}, {"FAILED", 0}};
  for (const auto& [key, count] : counts_) out[key.second] += count;
  return out;
}

std::set<std::string> TaskTable::LiveOwners() const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> owners;
  for (const auto& [id, t] : tasks_) {
    if (!Terminal(t.state)) owners.insert(t.owner_address);
  }
  return owners;
}

int TaskTable::OwnerGone(const std::string& owner, const std::string& cause, int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (auto& [id, t] : tasks_) {
    if (Terminal(t.state) || t.owner_address != owner) continue;
    SetStateLocked(t, "FAILED");
    t.error = cause;
    t.end_time_ms = now_ms;
    ++n;
  }
  return n;
}

nlohmann::json TaskJson(const TaskRecord& t) {
  return {{"task_id", t.task_id},       {"name", t.name},
          {"state", t.state},           {"job_id", t.job_id},
          {"actor_id", t.actor_id},     {"owner_address", t.owner_address},
          {"node_id", t.node_id},       {"pid", t.pid},
          {"attempt", t.attempt},       {"error", t.error},
          {"submit_time_ms", t.submit_time_ms}, {"start_time_ms", t.start_time_ms},
          {"end_time_ms", t.end_time_ms}};
}

}  // namespace torus::head
