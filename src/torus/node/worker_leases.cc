#include "torus/node/worker_leases.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"
#include "torus/common/clock.h"
#include "torus/common/device_env.h"
#include "torus/common/steady_wait.h"
#include "torus/rpc/auth.h"

namespace torus::node {
namespace {

constexpr int64_t kStopGraceMicros = 2'000'000;

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::Status ValidateJobId(const std::string& id) {
  if (id.empty() || id.size() > 128) return absl::InvalidArgumentError("job_id: 1 to 128 characters are required");
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-' && c != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("job_id \"", id, "\": only letters, digits and _ . - : are allowed"));
    }
  }
  return absl::OkStatus();
}

// What identifies a pool of interchangeable device-less workers.
std::string PoolKey(const LeaseAsk& ask) {
  std::string key = absl::StrCat(ask.job_id, "\n", ask.working_dir);
  for (const auto& [k, v] : ask.env) absl::StrAppend(&key, "\n", k, "=", v);
  return key;
}

bool HolderAlive(pid_t pid) { return pid <= 0 || kill(pid, 0) == 0 || errno == EPERM; }

}  // namespace

bool IsLeaseGroup(const std::string& group_id) { return group_id.rfind(kLeaseGroupPrefix, 0) == 0; }
bool IsLeaseOwner(const std::string& owner) { return owner.rfind(kLeaseOwnerPrefix, 0) == 0; }

std::string DescribeExit(const WorkerExit& exit) {
  std::string how;
  if (exit.stopped) {
    how = "was stopped by the agent";
  } else if (exit.oom_killed) {
    how = absl::StrCat("was killed for using too much memory (peak ", exit.peak_rss_bytes >> 20, " MiB)");
  } else if (exit.signal != 0) {
    const char* name = sigabbrev_np(exit.signal);
    how = absl::StrCat("was killed by signal ", exit.signal, name ? absl::StrCat(" (SIG", name, ")") : "");
  } else {
    how = absl::StrCat("exited with code ", exit.exit_code);
  }
  if (!exit.output_tail.empty()) absl::StrAppend(&how, "; its output ends:\n", exit.output_tail);
  return how;
}

std::string ReadBootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return std::string(absl::StripAsciiWhitespace(id));
}

WorkerLeases::WorkerLeases(BundleLedger* ledger, WorkerSupervisor* workers, HostDevices devices,
                           WorkerLeasesOptions options, std::function<void()> on_ledger_change)
    : ledger_(ledger),
      workers_(workers),
      devices_(std::move(devices)),
      options_(std::move(options)),
      on_ledger_change_(std::move(on_ledger_change)),
      boot_id_(ReadBootId()) {
  auto token = rpc::GenerateToken();
  next_id_ = token.ok() ? std::stoull(token->substr(0, 8), nullptr, 16) << 16 : static_cast<uint64_t>(WallMs()) << 16;
  watcher_ = std::thread([this] { WatchLoop(); });
}

WorkerLeases::~WorkerLeases() {
  Shutdown();
  if (watcher_.joinable()) watcher_.join();
}

void WorkerLeases::Shutdown() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  changed_.SignalAll();
}

std::optional<std::string> WorkerLeases::TryHoldLocked(const std::string& lease_id, const LeaseAsk& ask,
                                                       LedgerBundle& held) {
  held = LedgerBundle{.index = 0, .resources = ask.resources};
  const int64_t tpu = ask.resources.GetFixed(kResourceTpu) / kResourceScale;
  const int64_t gpu = ask.resources.GetFixed(kResourceGpu) / kResourceScale;
  if (tpu > 0) {
    std::vector<bool> busy(static_cast<size_t>(devices_.chips), false);
    for (int chip : ledger_->BusyChips()) {
      if (chip >= 0 && chip < devices_.chips) busy[static_cast<size_t>(chip)] = true;
    }
    auto block = AllocateChipBlock(busy, static_cast<int>(tpu));
    if (!block.ok()) return std::string(block.status().message());
    held.chips = *block;
  }
  if (gpu > 0) {
    std::vector<int> busy = ledger_->BusyGpus();
    for (int g = 0; g < devices_.gpus && static_cast<int64_t>(held.gpus.size()) < gpu; ++g) {
      if (!std::binary_search(busy.begin(), busy.end(), g)) held.gpus.push_back(g);
    }
    if (static_cast<int64_t>(held.gpus.size()) < gpu) return absl::StrCat("no ", gpu, " free GPUs");
  }
  const std::string group = kLeaseGroupPrefix + lease_id;
  if (absl::Status s = ledger_->Prepare(group, 1, {held}, 60'000'000); !s.ok()) return std::string(s.message());
  if (absl::Status s = ledger_->Commit(group, 1); !s.ok()) {
    ledger_->Cancel(group, 1);
    return std::string(s.message());
  }
  return std::nullopt;
}

std::optional<std::string> WorkerLeases::TryHoldInBundleLocked(const LeaseAsk& ask, LedgerBundle& held,
                                                              std::string& never) {
  const std::string which = absl::StrCat("bundle ", ask.bundle_index, " of group ", ask.group_id);
  std::optional<LedgerEntry> entry;
  for (LedgerEntry& e : ledger_->Entries()) {
    if (e.group_id == ask.group_id && e.bundle.index == ask.bundle_index) entry = std::move(e);
  }
  if (!entry || !entry->committed || entry->released) {
    never = absl::StrCat(which, " is not held on this node", entry && entry->released ? " (released)" : "");
    return never;
  }
  if (!entry->bundle.resources.Contains(ask.resources)) {
    never = absl::StrCat(which, " holds ", entry->bundle.resources.ToJson(), "; the lease asks for ",
                         ask.resources.ToJson());
    return never;
  }
  BundleUse& use = bundle_use_[{ask.group_id, ask.bundle_index}];
  ResourceSet left = entry->bundle.resources;
  left.Subtract(use.used);
  if (!left.Contains(ask.resources)) {
    return absl::StrCat(which, " has ", left.ToJson(), " left beside its other leases");
  }
  held = LedgerBundle{.index = ask.bundle_index, .resources = ask.resources};
  const int64_t tpu = ask.resources.GetFixed(kResourceTpu) / kResourceScale;
  if (tpu > 0) {
    // An aligned block among the bundle's chips that its other leases do not hold.
    std::vector<bool> busy(static_cast<size_t>(devices_.chips), true);
    for (int chip : entry->bundle.chips) {
      if (chip >= 0 && chip < devices_.chips && !use.chips.contains(chip)) busy[static_cast<size_t>(chip)] = false;
    }
    auto block = AllocateChipBlock(busy, static_cast<int>(tpu));
    if (!block.ok()) return absl::StrCat(which, ": ", block.status().message());
    held.chips = *block;
  }
  const int64_t gpu = ask.resources.GetFixed(kResourceGpu) / kResourceScale;
  for (int g : entry->bundle.gpus) {
    if (static_cast<int64_t>(held.gpus.size()) < gpu && !use.gpus.contains(g)) held.gpus.push_back(g);
  }
  if (static_cast<int64_t>(held.gpus.size()) < gpu) return absl::StrCat(which, ": no ", gpu, " free GPUs");
  use.used.Add(ask.resources);
  use.chips.insert(held.chips.begin(), held.chips.end());
  use.gpus.insert(held.gpus.begin(), held.gpus.end());
  return std::nullopt;
}

absl::StatusOr<LeaseGrant> WorkerLeases::Request(const LeaseAsk& ask) {
  if (absl::Status s = ValidateJobId(ask.job_id); !s.ok()) return s;
  for (const auto& [k, v] : ask.env) {
    if (k.empty() || k.find('=') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("env: \"", k, "\" is not a variable name"));
    }
  }
  for (const auto& [name, amount] : ask.resources.amounts()) {
    if (ask.group_id.empty() && amount > ledger_->total().GetFixed(name)) {
      return absl::FailedPreconditionError(absl::StrCat("this node has ", FormatFixed(ledger_->total().GetFixed(name)),
                                                        " ", name, " in all; the lease asks for ",
                                                        FormatFixed(amount)));
    }
  }
  const int64_t tpu_fixed = ask.resources.GetFixed(kResourceTpu);
  if (tpu_fixed % kResourceScale != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resources.TPU: TPU chips are whole; got ", FormatFixed(tpu_fixed)));
  }
  if (ask.resources.GetFixed(kResourceGpu) % kResourceScale != 0) {
    return absl::InvalidArgumentError("resources.GPU: only whole GPUs are leased to task workers");
  }

  absl::MutexLock lock(&mu_);
  const std::string lease_id = absl::StrCat(absl::Hex(++next_id_, absl::kZeroPad16));
  LedgerBundle held;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(ask.wait_ms, 0));
  std::optional<std::string> short_of;
  ++waiting_;
  while (true) {
    if (stopping_) {
      --waiting_;
      return absl::UnavailableError("the agent is stopping");
    }
    std::string never;
    short_of = ask.group_id.empty() ? TryHoldLocked(lease_id, ask, held) : TryHoldInBundleLocked(ask, held, never);
    if (!short_of) break;
    if (!never.empty()) {
      --waiting_;
      return absl::FailedPreconditionError(never);
    }
    // Woken by leases ending and by LedgerChanged (the head's releases, workers' exits); a change that reaches the
    // ledger another way (an expired prepare) is seen within a second.
    const auto next = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(1));
    if (std::chrono::steady_clock::now() >= deadline) {
      --waiting_;
      return absl::ResourceExhaustedError(
          absl::StrCat("waited ", ask.wait_ms, " ms and the lease still does not fit: ", *short_of));
    }
    WaitUntil(changed_, mu_, next);
  }
  --waiting_;
  if (on_ledger_change_) on_ledger_change_();

  Lease lease{.info = {.lease_id = lease_id,
                       .job_id = ask.job_id,
                       .resources = ask.resources,
                       .chips = held.chips,
                       .gpus = held.gpus,
                       .holder_pid = ask.holder_pid,
                       .granted_ms = WallMs(),
                       .group_id = ask.group_id,
                       .bundle_index = ask.bundle_index},
              .holder_boot_id = ask.holder_boot_id,
              .pool_key = held.chips.empty() && held.gpus.empty() && ask.group_id.empty() ? PoolKey(ask) : "",
              .bundle = {ask.group_id, ask.bundle_index}};
  Worker* worker = nullptr;
  if (!lease.pool_key.empty()) {
    auto pool = idle_.find(lease.pool_key);
    while (pool != idle_.end() && !pool->second.empty() && worker == nullptr) {
      const std::string id = pool->second.back();
      pool->second.pop_back();
      auto it = workers_by_id_.find(id);
      if (it != workers_by_id_.end() && !it->second.exited) worker = &it->second;
    }
  }
  if (worker == nullptr) {
    auto started = StartWorkerLocked(ask, lease_id, held);
    if (!started.ok()) {
      if (ask.group_id.empty()) {
        ledger_->Release(kLeaseGroupPrefix + lease_id, {});
      } else {
        UnuseLocked(lease.bundle, ask.resources, held.chips, held.gpus);
      }
      changed_.SignalAll();
      if (on_ledger_change_) on_ledger_change_();
      return started.status();
    }
    worker = *started;
  }
  worker->idle_since_ms = 0;
  lease.info.worker_id = worker->worker_id;
  lease.info.worker_pid = worker->pid;
  worker_lease_[worker->worker_id] = lease_id;
  LeaseGrant grant{.lease_id = lease_id,
                   .worker_id = worker->worker_id,
                   .worker_address = worker->address,
                   .worker_pid = worker->pid,
                   .chips = held.chips,
                   .gpus = held.gpus};
  leases_.emplace(lease_id, std::move(lease));
  return grant;
}

absl::StatusOr<WorkerLeases::Worker*> WorkerLeases::StartWorkerLocked(const LeaseAsk& ask,
                                                                      const std::string& lease_id,
                                                                      const LedgerBundle& held) {
  if (options_.worker_argv.empty()) return absl::FailedPreconditionError("this agent starts no task workers");
  const std::string worker_id = absl::StrCat("task-", lease_id);
  WorkerSpec spec{.worker_id = worker_id,
                  .owner = absl::StrCat(kLeaseOwnerPrefix, ask.job_id),
                  .argv = options_.worker_argv,
                  .env_set = options_.worker_env,
                  .cwd = ask.working_dir,
                  .chips = held.chips,
                  .gpus = held.gpus};
  for (const auto& [k, v] : ask.env) spec.env_set[k] = v;
  spec.env_set["TORUS_WORKER_ID"] = worker_id;
  spec.env_set["TORUS_JOB_ID"] = ask.job_id;
  const bool holds_devices = !held.chips.empty() || !held.gpus.empty();
  const bool in_bundle = !ask.group_id.empty();
  if (in_bundle || holds_devices) {
    // Bound to its bundle: the chips stay held until it exited, and a released bundle stops it.
    spec.group_id = in_bundle ? ask.group_id : kLeaseGroupPrefix + lease_id;
    spec.bundle_index = in_bundle ? ask.bundle_index : 0;
    if (auto bound = ledger_->Bind(spec.group_id, *spec.bundle_index, worker_id); !bound.ok()) return bound.status();
  }
  std::map<std::string, std::string> inherited = devices_.base_env;
  for (const auto& [k, v] : spec.env_set) inherited[k] = v;
  auto device_env = BundleDeviceEnv(devices_, held.chips, held.gpus, spec.env_set, inherited);
  if (!device_env.ok()) {
    if (in_bundle || holds_devices) ledger_->Unbind(worker_id);
    return absl::FailedPreconditionError(absl::StrCat("the lease's devices: ", device_env.status().message()));
  }
  for (const auto& [k, v] : device_env->set) spec.env_set[k] = v;
  for (const std::string& k : device_env->unset) {
    spec.env_set.erase(k);
    spec.env_unset.push_back(k);
  }
  Worker& worker = workers_by_id_[worker_id];
  worker = Worker{.worker_id = worker_id,
                  .pool_key = holds_devices || in_bundle ? "" : PoolKey(ask),
                  .starting = true};
  // The supervisor's exit callback takes mu_: start without it.
  mu_.Unlock();
  auto started = workers_->Start(spec);
  mu_.Lock();
  if (!started.ok()) {
    workers_by_id_.erase(worker_id);
    if (in_bundle || holds_devices) ledger_->Unbind(worker_id);
    return absl::UnavailableError(absl::StrCat("cannot start a task worker: ", started.status().message()));
  }
  worker.pid = started->pid;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.start_timeout_ms);
  while (worker.address.empty() && !worker.exited && !stopping_) {
    if (WaitUntil(changed_, mu_, deadline)) break;
  }
  worker.starting = false;
  if (!worker.address.empty() && !worker.exited) return &worker;
  const bool exited = worker.exited;
  mu_.Unlock();
  if (!exited) workers_->Stop(worker_id, 0).IgnoreError();
  std::string tail;
  if (auto log = workers_->ReadLog(worker_id, 0, 1 << 20); log.ok()) {
    tail = log->data.size() > 2000 ? log->data.substr(log->data.size() - 2000) : log->data;
  }
  mu_.Lock();
  workers_by_id_.erase(worker_id);
  return absl::UnavailableError(absl::StrCat(
      "the task worker ", exited ? "exited before it started" : "did not start within ",
      exited ? "" : absl::StrCat(options_.start_timeout_ms, " ms"), tail.empty() ? "" : "; its output ends:\n", tail));
}

absl::Status WorkerLeases::Return(const std::string& lease_id, bool kill_worker) {
  {
    absl::MutexLock lock(&mu_);
    if (!leases_.contains(lease_id)) return absl::NotFoundError(absl::StrCat("no lease ", lease_id));
    EndLeaseLocked(lease_id, kill_worker, kill_worker ? "returned (its worker stopped)" : "returned");
  }
  if (on_ledger_change_) on_ledger_change_();
  return absl::OkStatus();
}

void WorkerLeases::EndLeaseLocked(const std::string& lease_id_ref, bool kill_worker, const std::string& how) {
  const std::string lease_id = lease_id_ref;  // may point into a map this erases from
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) return;
  ended_[lease_id] = how;
  ended_order_.push_back(lease_id);
  if (ended_order_.size() > 1000) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
  const Lease lease = std::move(it->second);
  leases_.erase(it);
  worker_lease_.erase(lease.info.worker_id);
  // A device worker is bound to the bundle: the bundle stays held until it has exited. A lease inside a placement
  // group's bundle gives its share back; the bundle is the head's.
  BundleLedger::Released released;
  if (lease.bundle.first.empty()) {
    released = ledger_->Release(kLeaseGroupPrefix + lease_id, {});
  } else {
    UnuseLocked(lease.bundle, lease.info.resources, lease.info.chips, lease.info.gpus);
  }
  auto w = workers_by_id_.find(lease.info.worker_id);
  const bool pool = w != workers_by_id_.end() && !w->second.exited && !kill_worker && !lease.pool_key.empty() &&
                    static_cast<int>(idle_[lease.pool_key].size()) < options_.max_idle_workers;
  if (pool) {
    w->second.idle_since_ms = SteadyMs();
    idle_[lease.pool_key].push_back(lease.info.worker_id);
  } else if (w != workers_by_id_.end() && !w->second.exited) {
    workers_->Stop(lease.info.worker_id, kill_worker ? 0 : kStopGraceMicros).IgnoreError();
  }
  for (const std::string& other : released.workers) {
    if (other != lease.info.worker_id) workers_->Stop(other, kStopGraceMicros).IgnoreError();
  }
  changed_.SignalAll();
}

void WorkerLeases::UnuseLocked(const std::pair<std::string, int>& bundle, const ResourceSet& resources,
                               const std::vector<int>& chips, const std::vector<int>& gpus) {
  auto it = bundle_use_.find(bundle);
  if (it == bundle_use_.end()) return;
  it->second.used.Subtract(resources);
  for (int c : chips) it->second.chips.erase(c);
  for (int g : gpus) it->second.gpus.erase(g);
  if (it->second.used.empty() && it->second.chips.empty() && it->second.gpus.empty()) bundle_use_.erase(it);
}

void WorkerLeases::LedgerChanged() {
  absl::MutexLock lock(&mu_);
  changed_.SignalAll();
}

absl::Status WorkerLeases::Announce(const std::string& worker_id, int port, pid_t pid) {
  if (port <= 0 || port > 65535) return absl::InvalidArgumentError(absl::StrCat("port ", port, " is not a port"));
  absl::MutexLock lock(&mu_);
  auto it = workers_by_id_.find(worker_id);
  if (it == workers_by_id_.end() || it->second.exited) {
    return absl::NotFoundError(absl::StrCat("no task worker ", worker_id, " is starting here"));
  }
  it->second.address = absl::StrCat(options_.node_ip, ":", port);
  changed_.SignalAll();
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> WorkerLeases::WaitEnd(const std::string& lease_id, int64_t wait_ms) {
  absl::MutexLock lock(&mu_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(wait_ms, 0));
  while (true) {
    if (auto e = ended_.find(lease_id); e != ended_.end()) return std::optional<std::string>(e->second);
    if (!leases_.contains(lease_id)) return absl::NotFoundError(absl::StrCat("no lease ", lease_id));
    if (stopping_) return std::optional<std::string>("the agent is stopping");
    if (WaitUntil(changed_, mu_, deadline)) {
      if (auto e = ended_.find(lease_id); e != ended_.end()) return std::optional<std::string>(e->second);
      return std::optional<std::string>();
    }
  }
}

void WorkerLeases::OnWorkerExited(const std::string& worker_id, const std::string& how) {
  bool ended = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_by_id_.find(worker_id);
    if (it == workers_by_id_.end()) return;
    it->second.exited = true;
    if (auto lease = worker_lease_.find(worker_id); lease != worker_lease_.end()) {
      const std::string lease_id = lease->second;  // EndLeaseLocked erases the entry
      EndLeaseLocked(lease_id, true, absl::StrCat("its worker ", how));
      ended = true;
    }
    for (auto& [key, ids] : idle_) std::erase(ids, worker_id);
    // A worker still starting is dropped by its starter, which is waiting on it.
    if (!it->second.starting) workers_by_id_.erase(it);
    changed_.SignalAll();
  }
  if (ended && on_ledger_change_) on_ledger_change_();
}

void WorkerLeases::Sweep() {
  std::vector<std::string> gone;
  std::vector<std::string> stop;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, lease] : leases_) {
      if (!lease.holder_boot_id.empty() && lease.holder_boot_id == boot_id_ && !HolderAlive(lease.info.holder_pid)) {
        gone.push_back(id);
      }
    }
    for (const std::string& id : gone) {
      spdlog::info("lease {}: its holder (pid {}) is gone; returned, worker stopped", id,
                   leases_.at(id).info.holder_pid);
      EndLeaseLocked(id, true, "its holder exited");
    }
    const int64_t now = SteadyMs();
    for (auto& [key, ids] : idle_) {
      std::erase_if(ids, [&](const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        auto w = workers_by_id_.find(id);
        if (w == workers_by_id_.end() || w->second.exited) return true;
        if (now - w->second.idle_since_ms < options_.idle_worker_ms) return false;
        stop.push_back(id);
        return true;
      });
    }
  }
  for (const std::string& id : stop) workers_->Stop(id, kStopGraceMicros).IgnoreError();
  if (!gone.empty() && on_ledger_change_) on_ledger_change_();
}

void WorkerLeases::WatchLoop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    changed_.WaitWithTimeout(&mu_, absl::Milliseconds(250));
    if (stopping_) break;
    mu_.Unlock();
    Sweep();
    mu_.Lock();
  }
}

std::vector<LeaseInfo> WorkerLeases::Leases() const {
  absl::MutexLock lock(&mu_);
  std::vector<LeaseInfo> out;
  for (const auto& [id, lease] : leases_) out.push_back(lease.info);
  return out;
}

std::vector<AgentSample> WorkerLeases::Samples() const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, int> per_job;
  for (const auto& [id, lease] : leases_) ++per_job[lease.info.job_id];
  std::vector<AgentSample> out;
  for (const auto& [job, n] : per_job) {
    out.push_back({.name = "torus_node_task_leases", .value = static_cast<double>(n), .labels = {{"job_id", job}}});
  }
  int idle = 0;
  for (const auto& [key, ids] : idle_) idle += static_cast<int>(ids.size());
  out.push_back({.name = "torus_node_task_workers",
                 .value = static_cast<double>(leases_.size()),
                 .labels = {{"state", "leased"}}});
  out.push_back(
      {.name = "torus_node_task_workers", .value = static_cast<double>(idle), .labels = {{"state", "idle"}}});
  out.push_back({.name = "torus_node_task_lease_requests_waiting", .value = static_cast<double>(waiting_)});
  return out;
}

int WorkerLeases::IdleWorkers() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [key, ids] : idle_) n += static_cast<int>(ids.size());
  return n;
}

int WorkerLeases::WaitingRequests() const {
  absl::MutexLock lock(&mu_);
  return waiting_;
}

}  // namespace torus::node
