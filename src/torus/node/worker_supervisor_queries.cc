// WorkerSupervisor: what it knows of its workers, running and ended (worker_supervisor.h).
#include "torus/node/worker_supervisor.h"

namespace torus::node {

bool WorkerSupervisor::Knows(const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  return workers_.contains(worker_id);
}

bool WorkerSupervisor::IsRunning(const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  return it != workers_.end() && it->second.info.running;
}

std::vector<WorkerInfo> WorkerSupervisor::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerInfo> out;
  for (const auto& [id, record] : workers_) {
    if (record.exec_confirmed) out.push_back(record.info);
  }
  return out;
}

std::vector<RunningWorker> WorkerSupervisor::Running() const {
  absl::MutexLock lock(&mu_);
  std::vector<RunningWorker> out;
  for (const auto& [id, record] : workers_) {
    if (record.exec_confirmed && record.info.running) {
      out.push_back({record.info.worker_id, record.info.owner, record.info.pid, record.env_set, record.info.chips,
                     record.info.gpus});
    }
  }
  return out;
}

int WorkerSupervisor::RunningCount() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [id, record] : workers_) n += record.exec_confirmed && record.info.running;
  return n;
}

}  // namespace torus::node
