#include "torus/head/workloads/workload_driver.h"

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/head/workloads/steps.h"

namespace torus::head {

WorkloadDriver::WorkloadDriver(StateStore* store, const Liveness* liveness, PlacementScheduler* scheduler,
                               AgentPool* agents, const Clock* clock, Options options)
    : store_(store),
      liveness_(liveness),
      scheduler_(scheduler),
      agents_(agents),
      clock_(clock),
      options_(options),
      executor_(options.executor_threads),
      stop_executor_(2) {}

WorkloadDriver::~WorkloadDriver() { Stop(); }

void WorkloadDriver::SetHeadAddress(const std::string& address) {
  absl::MutexLock lock(&mu_);
  options_.head_address = address;
}

void WorkloadDriver::SetReportBaseUrl(const std::string& url) {
  absl::MutexLock lock(&mu_);
  options_.report_base_url = url;
}

void WorkloadDriver::Start() {
  // Catch up after a replay: every workload that is not finished, or still holds a worker or a group.
  std::vector<Key> all = store_->Read([](const ClusterState& s) {
    std::vector<Key> out;
    for (const auto& [id, job] : s.jobs()) {
      const JobFacts f = JobFactsOf(s, job);
      const bool holds = (f.group && f.group->Live()) || (f.worker && f.worker->phase != WorkerPhase::kExited);
      if (!job.Terminal() || holds) out.push_back({OwnerKind::kJob, id.str()});
    }
    for (const auto& [id, run] : s.runs()) {
      const RunFacts f = RunFactsOf(s, run);
      bool holds = f.group != nullptr && f.group->Live();
      // An ended attempt whose cause is not settled yet.
      holds = holds || (run.current() != nullptr && run.current()->ended() && !run.current()->explained);
      for (const Worker* w : f.workers) holds = holds || (w != nullptr && w->phase != WorkerPhase::kExited);
      if (!run.Terminal() || holds) out.push_back({OwnerKind::kRun, id.str()});
    }
    return out;
  });
  Enqueue(all);
  thread_ = std::thread([this] { Loop(); });
}

void WorkloadDriver::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  executor_.Stop();
  stop_executor_.Stop();
}

void WorkloadDriver::OnRecords(const std::vector<Record>& records) {
  std::vector<Key> keys;
  bool node_joined = false;
  std::vector<NodeId> registered;
  store_->Read([&](const ClusterState& s) {
    auto owner_of_group = [&](const GroupId& id) {
      const Group* g = s.FindGroup(id);
      if (g != nullptr && g->owner.kind != OwnerKind::kNone) keys.push_back({g->owner.kind, g->owner.id});
    };
    auto owner_of_worker = [&](const WorkerId& id) {
      const Worker* w = s.FindWorker(id);
      if (w != nullptr) keys.push_back({w->owner.kind, w->owner.id});
    };
    for (const Record& r : records) {
      if (auto* x = std::get_if<JobSubmitted>(&r)) keys.push_back({OwnerKind::kJob, x->job.id.str()});
      if (auto* x = std::get_if<JobUpdated>(&r)) keys.push_back({OwnerKind::kJob, x->job.str()});
      if (auto* x = std::get_if<JobStopRequested>(&r)) keys.push_back({OwnerKind::kJob, x->job.str()});
      if (auto* x = std::get_if<RunSubmitted>(&r)) keys.push_back({OwnerKind::kRun, x->run.str()});
      if (auto* x = std::get_if<AttemptEnded>(&r)) keys.push_back({OwnerKind::kRun, x->run.str()});
      if (auto* x = std::get_if<RunFinished>(&r)) keys.push_back({OwnerKind::kRun, x->run.str()});
      if (auto* x = std::get_if<RunStopRequested>(&r)) keys.push_back({OwnerKind::kRun, x->run.str()});
      if (auto* x = std::get_if<GroupPlaced>(&r)) owner_of_group(x->group);
      if (auto* x = std::get_if<GroupWaiting>(&r)) owner_of_group(x->group);
      if (auto* x = std::get_if<GroupBundlesLost>(&r)) owner_of_group(x->group);
      if (auto* x = std::get_if<GroupEnded>(&r)) owner_of_group(x->group);
      if (auto* x = std::get_if<WorkerStarted>(&r)) owner_of_worker(x->worker);
      if (auto* x = std::get_if<WorkerExited>(&r)) owner_of_worker(x->worker);
      if (auto* x = std::get_if<NodeRegistered>(&r)) {
        node_joined = true;
        registered.push_back(NodeId(x->info.node_id));
      }
    }
  });
  std::erase_if(keys, [](const Key& k) { return k.kind == OwnerKind::kNone; });
  if (node_joined) {
    absl::MutexLock lock(&mu_);
    keys.insert(keys.end(), parked_.begin(), parked_.end());
    parked_.clear();
  }
  for (const Record& r : records) {
    if (auto* x = std::get_if<WorkerExited>(&r)) {
      absl::MutexLock lock(&mu_);
      stops_sent_.erase(x->worker);
    }
  }
  Enqueue(keys);
  for (const NodeId& node : registered) {
    {
      absl::MutexLock lock(&mu_);
      ++busy_;
    }
    executor_.Post([this, node] {
      RedeliverStarts(node);
      absl::MutexLock lock(&mu_);
      --busy_;
      cv_.SignalAll();
    });
  }
}

void WorkloadDriver::Enqueue(const std::vector<Key>& keys) {
  if (keys.empty()) return;
  absl::MutexLock lock(&mu_);
  for (const Key& k : keys) {
    if (queued_.insert(k).second) queue_.push_back(k);
  }
  cv_.SignalAll();
}

void WorkloadDriver::WakeAt(int64_t wall_ms, const Key& key) {
  absl::MutexLock lock(&mu_);
  for (auto [it, end] = timers_.equal_range(wall_ms); it != end; ++it) {
    if (it->second == key) return;
  }
  timers_.emplace(wall_ms, key);
  cv_.SignalAll();
}

void WorkloadDriver::Park(const Key& key) {
  absl::MutexLock lock(&mu_);
  parked_.insert(key);
}

void WorkloadDriver::Done(const Key& key) {
  bool parked;
  {
    absl::MutexLock lock(&mu_);
    launching_.erase(key);
    --busy_;
    parked = parked_.contains(key);
    cv_.SignalAll();
  }
  // A launch that waits for a node is looked at again when one registers; any other is looked at now, since what
  // it recorded (or found changed) may call for the next step.
  if (!parked) Enqueue({key});
}

void WorkloadDriver::WaitIdle() {
  absl::MutexLock lock(&mu_);
  while (!(queue_.empty() && busy_ == 0) && !stopping_) cv_.Wait(&mu_);
}

void WorkloadDriver::Loop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    while (true) {
      // Timers due: their workloads join the queue.
      const int64_t now = clock_->WallMillis();
      while (!timers_.empty() && timers_.begin()->first <= now) {
        const Key k = timers_.begin()->second;
        timers_.erase(timers_.begin());
        if (queued_.insert(k).second) queue_.push_back(k);
      }
      if (!queue_.empty() || stopping_) break;
      if (timers_.empty()) {
        cv_.Wait(&mu_);
      } else {
        cv_.WaitWithTimeout(&mu_, absl::Milliseconds(timers_.begin()->first - now));
      }
    }
    if (stopping_) return;
    Key key = queue_.front();
    queue_.pop_front();
    queued_.erase(key);
    ++busy_;
    mu_.Unlock();
    Advance(key);
    mu_.Lock();
    --busy_;
    cv_.SignalAll();
  }
}

void WorkloadDriver::Advance(const Key& key) {
  if (key.kind == OwnerKind::kJob) AdvanceJob(JobId(key.id));
  if (key.kind == OwnerKind::kRun) AdvanceRun(RunId(key.id));
}

std::vector<WorkloadDriver::StopOrder> WorkloadDriver::TakeStops(const std::vector<StopOrder>& candidates) {
  std::vector<StopOrder> out;
  absl::MutexLock lock(&mu_);
  for (const StopOrder& s : candidates) {
    // A worker whose start is in flight is stopped once its start is known (the driver looks again then).
    if (starting_.contains(s.worker) || !stops_sent_.insert(s.worker).second) continue;
    out.push_back(s);
  }
  return out;
}

void WorkloadDriver::SendStops(std::vector<StopOrder> stops) {
  if (stops.empty()) return;
  std::map<int64_t, std::vector<std::pair<std::string, WorkerId>>> by_grace;
  for (StopOrder& s : stops) by_grace[s.grace_ms].emplace_back(std::move(s.target), std::move(s.worker));
  stop_executor_.Post([this, by_grace = std::move(by_grace)] {
    for (const auto& [grace, targets] : by_grace) agents_->StopWorkers(targets, grace);
  });
}

void WorkloadDriver::AdvanceJob(const JobId& id) {
  int64_t grace_ms;
  {
    absl::MutexLock lock(&mu_);
    grace_ms = options_.job_stop_grace_ms;
  }
  std::vector<HeldBundle> release;
  std::vector<StopOrder> stops;
  bool start = false;
  store_->Update([&](Txn& txn) {
    const JobStep step = ApplyJobStep(txn, id, clock_->WallMillis(), release);
    if (step.stop_worker) {
      const Job* job = txn.state().FindJob(id);
      const Worker* w = job == nullptr ? nullptr : txn.state().FindWorker(job->worker);
      const Node* n = w == nullptr ? nullptr : txn.state().FindNode(w->node);
      if (n != nullptr && n->alive()) stops.push_back({n->target(), w->id, grace_ms});
    }
    start = step.start;
  });
  scheduler_->Release(std::move(release));
  SendStops(TakeStops(stops));
  if (start) Launch({OwnerKind::kJob, id.str()});
}

void WorkloadDriver::AdvanceRun(const RunId& id) {
  int64_t grace_ms;
  int64_t window_ms;
  {
    absl::MutexLock lock(&mu_);
    grace_ms = options_.run_stop_grace_ms;
    window_ms = options_.failure_window_ms;
  }
  std::vector<HeldBundle> release;
  std::vector<StopOrder> stops;
  bool start = false;
  int64_t wake_at_ms = 0;
  store_->Update([&](Txn& txn) {
    const RunStep step = ApplyRunStep(txn, id, clock_->WallMillis(), release, window_ms);
    wake_at_ms = step.wake_at_ms;
    if (step.stop_workers) {
      for (const Worker* w : RunFactsOf(txn.state(), *txn.state().FindRun(id)).workers) {
        if (w == nullptr || w->phase == WorkerPhase::kExited) continue;
        const Node* n = txn.state().FindNode(w->node);
        if (n != nullptr && n->alive()) stops.push_back({n->target(), w->id, grace_ms});
      }
    }
    start = step.start_attempt;
  });
  scheduler_->Release(std::move(release));
  SendStops(TakeStops(stops));
  if (wake_at_ms > 0) WakeAt(wake_at_ms, {OwnerKind::kRun, id.str()});
  if (start) Launch({OwnerKind::kRun, id.str()});
}

void WorkloadDriver::Launch(const Key& key) {
  {
    absl::MutexLock lock(&mu_);
    if (!launching_.insert(key).second) return;
    parked_.erase(key);
    ++busy_;
  }
  if (key.kind == OwnerKind::kJob) {
    executor_.Post([this, id = JobId(key.id)] { LaunchJob(id); });
  } else {
    executor_.Post([this, id = RunId(key.id)] { LaunchAttempt(id); });
  }
}

}  // namespace torus::head
