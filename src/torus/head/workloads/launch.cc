// WorkloadDriver: starting a job's worker and a run's attempt (on the driver's executor).
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"
#include "torus/common/status.h"
#include "torus/common/well_known_labels.h"
#include "torus/head/workloads/job_machine.h"
#include "torus/head/workloads/run_machine.h"
#include "torus/head/workloads/workload_driver.h"
#include "torus/sched/slices.h"
#include "torus/train/env_builder.h"

namespace torus::head {
namespace {

// What the agents answered, recorded: the pid of each started worker, or why it did not start.
void RecordStarts(Txn& txn, const std::vector<WorkerId>& workers, const std::vector<absl::StatusOr<int64_t>>& started,
                  int64_t wall) {
  for (size_t i = 0; i < workers.size(); ++i) {
    const Worker* w = txn.state().FindWorker(workers[i]);
    if (w == nullptr) continue;
    if (started[i].ok()) {
      txn.Apply(WorkerStarted{workers[i], *started[i], wall}).IgnoreError();
    } else if (w->phase != WorkerPhase::kExited) {
      WorkerExit exit{.start_failed = true, .reason = std::string(started[i].status().message()), .wall_ms = wall};
      txn.Apply(WorkerExited{workers[i], exit}).IgnoreError();
    }
  }
}

// Where a worker runs and what it imports: a package URI becomes a package the agent fetches; a path on the node is
// used as it is (working_dir as the cwd, py_modules first on PYTHONPATH).
void SetLocations(const ClusterState& state, const std::string& working_dir,
                  const std::vector<std::string>& py_modules, WorkerLaunch& spec) {
  const Package* wd = PackageNameOf(working_dir) ? state.FindPackage(*PackageNameOf(working_dir)) : nullptr;
  if (wd != nullptr) {
    spec.working_dir_package = *wd;
  } else {
    spec.cwd = working_dir;  // a path, or a package gone since submission: the agent's error names it
  }
  std::vector<std::string> paths;
  for (const std::string& m : py_modules) {
    auto name = PackageNameOf(m);
    const Package* p = name ? state.FindPackage(*name) : nullptr;
    if (p != nullptr) {
      spec.py_module_packages.push_back(*p);
    } else {
      paths.push_back(m);
    }
  }
  if (paths.empty()) return;
  auto existing = spec.env_set.find("PYTHONPATH");
  if (existing != spec.env_set.end() && !existing->second.empty()) paths.push_back(existing->second);
  spec.env_set["PYTHONPATH"] = absl::StrJoin(paths, ":");
}

// OK when every package URI among `working_dir` and `py_modules` names a package the head holds.
absl::Status CheckLocationsStored(const ClusterState& state, const std::string& working_dir,
                                  const std::vector<std::string>& py_modules) {
  TORUS_RETURN_IF_ERROR(state.CheckPackageStored("working_dir", working_dir));
  for (size_t i = 0; i < py_modules.size(); ++i) {
    TORUS_RETURN_IF_ERROR(state.CheckPackageStored(absl::StrCat("py_modules[", i, "]"), py_modules[i]));
  }
  return absl::OkStatus();
}

// The start an agent is asked for: the worker's launch, on its bundle. A job's worker also gets the cluster token
// (TORUS_TOKEN), which is not journaled with the launch.
StartSpec SpecOf(const Worker& w, const std::string& token) {
  StartSpec spec;
  spec.id = w.id;
  spec.ledger_group = w.ledger_group;
  spec.bundle = w.bundle;
  if (!w.launch) return spec;
  const WorkerLaunch& l = *w.launch;
  spec.owner = l.owner_tag;
  spec.argv = l.argv;
  spec.env_set = l.env_set;
  spec.env_unset = l.env_unset;
  spec.cwd = l.cwd;
  spec.working_dir_package = l.working_dir_package;
  spec.py_module_packages = l.py_module_packages;
  if (w.owner.kind == OwnerKind::kJob) spec.env_set["TORUS_TOKEN"] = token;
  return spec;
}

std::string GenerationOf(const Node& node) {
  auto type = node.info.labels.find(std::string(kLabelAcceleratorType));
  return type == node.info.labels.end() ? "" : type->second;
}

}  // namespace

void WorkloadDriver::LaunchJob(const JobId& id) {
  const Key key{OwnerKind::kJob, id.str()};
  Options options;
  {
    absl::MutexLock lock(&mu_);
    options = options_;
  }
  auto confirmed = [this](const NodeId& node) { return liveness_->Confirmed(node); };
  struct Plan {
    std::string target;
    StartSpec spec;
  };
  std::optional<Plan> plan = store_->Update([&](Txn& txn) -> std::optional<Plan> {
    const Job* job = txn.state().FindJob(id);
    if (job == nullptr || !job->worker.empty()) return std::nullopt;
    const JobStep step = DecideJob(JobFactsOf(txn.state(), *job), clock_->WallMillis());
    if (!step.start) return std::nullopt;
    Worker w;
    w.id = WorkerId("job-" + id.str());
    w.owner = Owner::Job(id);
    if (!job->group.empty()) {
      const Group* g = txn.state().FindGroup(job->group);
      if (g == nullptr || g->bundles.empty()) return std::nullopt;
      const HeldBundle& b = g->bundles.front();
      if (!confirmed(b.node)) {
        Park(key);  // its node has not registered with this head yet
        return std::nullopt;
      }
      w.node = b.node;
      w.group = g->id;
      w.ledger_group = b.ledger_group;
      w.bundle = b.ledger_index;
      w.chips = b.chips;
      w.gpus = b.gpus;
    } else {
      std::optional<NodeId> node = PickNodeForJob(txn.state(), *job, options.head_host, confirmed);
      if (!node) {
        Park(key);
        return std::nullopt;
      }
      w.node = *node;
    }
    const Node* node = txn.state().FindNode(w.node);
    WorkerLaunch launch;
    launch.owner_tag = "job:" + id.str();
    launch.argv = {"/bin/sh", "-c", job->request.entrypoint};
    launch.env_set = job->request.env_vars;
    SetLocations(txn.state(), job->request.working_dir, job->request.py_modules, launch);
    const absl::Status stored = CheckLocationsStored(txn.state(), job->request.working_dir, job->request.py_modules);
    // Set after the job's own variables: the job id tags the job's metrics and logs, and cannot be claimed.
    launch.env_set["TORUS_JOB_ID"] = id.str();
    launch.env_set["TORUS_ADDRESS"] = options.head_address;
    launch.env_set.erase("TORUS_TOKEN");  // SpecOf sets it
    launch.env_set.erase("TORUS_RUN_ID");
    launch.env_set.erase("TORUS_RANK");
    w.launch = std::move(launch);
    Plan p;
    p.target = node->target();
    p.spec = SpecOf(w, options.token);
    const WorkerId worker = w.id;
    if (!txn.Apply(WorkerStarting{std::move(w)}).ok()) return std::nullopt;
    if (!stored.ok()) {
      // Its package is gone from the head since the job was submitted: it fails with the reason, never starts.
      txn.Apply(WorkerExited{worker, WorkerExit{.start_failed = true, .reason = std::string(stored.message()),
                                                .wall_ms = clock_->WallMillis()}})
          .IgnoreError();
      return std::nullopt;
    }
    // Known as starting before anyone sees the record: a stop waits for the start's answer.
    absl::MutexLock lock(&mu_);
    starting_.insert(p.spec.id);
    return p;
  });
  if (plan) {
    auto started = agents_->StartWorkers({{plan->target, plan->spec}});
    if (started[0].ok()) spdlog::info("job {} started on {} (pid {})", id.str(), plan->target, *started[0]);
    store_->Update([&](Txn& txn) {
      RecordStarts(txn, {plan->spec.id}, started, clock_->WallMillis());
      absl::MutexLock lock(&mu_);
      starting_.erase(plan->spec.id);
    });
  }
  Done(key);
}

void WorkloadDriver::LaunchAttempt(const RunId& id) {
  const Key key{OwnerKind::kRun, id.str()};
  Options options;
  {
    absl::MutexLock lock(&mu_);
    options = options_;
  }
  // Where each rank goes, read from the state as it is now.
  struct Prep {
    uint64_t group_changes = 0;
    int attempt = 0;
    std::vector<HeldBundle> bundles;
    std::vector<std::string> targets;
    train::GangEnvInput input;
    train::RunSpec spec;
    std::string service;  // a service replica's: rank 0 gets a port to serve on
  };
  std::optional<Prep> prep = store_->Read([&](const ClusterState& s) -> std::optional<Prep> {
    const Run* run = s.FindRun(id);
    if (run == nullptr || !DecideRun(RunFactsOf(s, *run), clock_->WallMillis()).start_attempt) return std::nullopt;
    const Group* g = s.FindGroup(run->group);
    Prep p;
    p.group_changes = g->changes;
    p.attempt = static_cast<int>(run->attempts.size()) + 1;
    p.spec = run->spec;
    p.service = run->service;
    p.bundles = g->bundles;
    train::GangEnvInput& in = p.input;
    in.run_id = id.str();
    in.run_name = run->spec.run.name;
    in.attempt = p.attempt;
    in.storage_path = run->storage();
    in.checkpoint_dir = run->committed.empty() ? "" : run->committed.back().second;
    std::vector<std::string> report_urls;
    for (absl::string_view base : absl::StrSplit(options.report_base_url, ',', absl::SkipEmpty())) {
      report_urls.push_back(absl::StrCat(base, "/api/v0/runs/", id.str(), "/report"));
    }
    in.report_url = absl::StrJoin(report_urls, ",");
    in.run_token = run->token;
    in.use_gpu = run->spec.scaling.use_gpu;
    in.user_env = run->spec.env;
    for (const HeldBundle& b : g->bundles) {
      const Node* n = s.FindNode(b.node);
      if (n == nullptr || !n->alive()) return std::nullopt;  // the group is rescheduled; its CREATED brings us back
      if (!liveness_->Confirmed(b.node)) {
        Park(key);
        return std::nullopt;
      }
      train::RankPlacement r;
      r.node_id = b.node.str();
      r.address = n->info.address;
      r.slice_name = b.slice_name;
      r.gpus = b.gpus;
      if (!b.slice_name.empty()) {
        r.slice_index = static_cast<int>(std::find(g->slices.begin(), g->slices.end(), b.slice_name) -
                                         g->slices.begin());
        r.tpu_worker_id = b.worker_id;
        r.chips = b.chips;
        r.host_chips = static_cast<int>(n->info.total.GetFixed(kResourceTpu) / kResourceScale);
        if (auto gen = ParseAcceleratorType(GenerationOf(*n)); gen.ok()) in.tpu_generation = *gen;
      }
      in.ranks.push_back(std::move(r));
      p.targets.push_back(n->target());
    }
    if (in.tpu_generation) {
      std::map<std::string, std::vector<std::string>> hosts_of_slice;
      std::map<std::string, std::string> topology_of_slice;
      for (const sched::Slice& slice : sched::BuildSlices(s.NodeSnapshots(/*include_dead=*/false))) {
        topology_of_slice[slice.name] = slice.topology;
        for (const sched::SliceHost& h : slice.hosts) {
          if (h.worker_id >= 0) hosts_of_slice[slice.name].push_back(h.address);
        }
      }
      for (const std::string& slice : g->slices) {
        in.slice_hosts.push_back(hosts_of_slice[slice]);
        in.slice_topologies.push_back(topology_of_slice[slice]);
      }
    }
    if (in.ranks.empty()) return std::nullopt;
    return p;
  });
  if (!prep) {
    Done(key);
    return;
  }

  // Two free ports on rank 0's host: torch's rendezvous and JAX's coordinator.
  std::string port_error;
  auto master = agents_->FreePort(prep->targets[0]);
  auto jax = agents_->FreePort(prep->targets[0]);
  for (int i = 0; jax.ok() && master.ok() && *jax == *master && i < 5; ++i) jax = agents_->FreePort(prep->targets[0]);
  if (!master.ok() || !jax.ok()) {
    port_error = absl::StrCat("cannot get a free port on rank 0's host: ",
                              (!master.ok() ? master.status() : jax.status()).message());
  } else {
    prep->input.master_port = *master;
    prep->input.jax_port = *jax;
  }
  // A service replica's rank 0 serves HTTP on a third.
  int serve_port = 0;
  if (!prep->service.empty() && port_error.empty()) {
    auto serve = agents_->FreePort(prep->targets[0]);
    for (int i = 0; serve.ok() && (*serve == *master || *serve == *jax) && i < 5; ++i) {
      serve = agents_->FreePort(prep->targets[0]);
    }
    if (!serve.ok()) {
      port_error = absl::StrCat("cannot get a free port on rank 0's host: ", serve.status().message());
    } else {
      serve_port = *serve;
    }
  }
  auto envs = port_error.empty() ? train::BuildGangEnv(prep->input)
                                 : absl::StatusOr<std::vector<EnvChange>>(std::vector<EnvChange>());

  // The attempt and its workers are recorded before any agent is asked.
  const std::string owner = absl::StrCat("run:", id.str(), ":a", prep->attempt);
  std::vector<std::pair<std::string, StartSpec>> starts;
  std::vector<WorkerId> workers;
  const bool recorded = store_->Update([&](Txn& txn) {
    const Run* run = txn.state().FindRun(id);
    const int64_t wall = clock_->WallMillis();
    if (run == nullptr || !DecideRun(RunFactsOf(txn.state(), *run), wall).start_attempt ||
        static_cast<int>(run->attempts.size()) + 1 != prep->attempt ||
        txn.state().FindGroup(run->group)->changes != prep->group_changes) {
      return false;  // something changed meanwhile: decided again from the new state
    }
    if (!envs.ok()) {
      txn.Apply(RunFinished{id, RunStatus::kFailed,
                            absl::StrCat("cannot build the workers' environment: ", envs.status().message()), wall})
          .IgnoreError();
      return false;
    }
    RunAttempt attempt;
    attempt.number = prep->attempt;
    attempt.start_time_ms = wall;
    attempt.checkpoint_dir = prep->input.checkpoint_dir;
    attempt.serve_port = serve_port;
    std::vector<Worker> planned;
    // Why no rank can start: no port for the rendezvous, or a package gone from the head since submission.
    std::string start_error = port_error;
    if (start_error.empty()) {
      absl::Status stored = CheckLocationsStored(txn.state(), prep->spec.working_dir, prep->spec.py_modules);
      if (!stored.ok()) start_error = std::string(stored.message());
    }
    for (size_t r = 0; r < prep->bundles.size(); ++r) {
      const HeldBundle& b = prep->bundles[r];
      Worker w;
      w.id = WorkerId(absl::StrCat(id.str(), "-a", prep->attempt, "-r", r));
      w.owner = Owner::Run(id);
      w.attempt = prep->attempt;
      w.rank = static_cast<int>(r);
      w.node = b.node;
      w.group = run->group;
      w.ledger_group = b.ledger_group;
      w.bundle = b.ledger_index;
      w.chips = b.chips;
      w.gpus = b.gpus;
      attempt.ranks.push_back(RankState{static_cast<int>(r), w.id, b.node, prep->input.ranks[r].address,
                                        b.slice_name, b.chips, b.gpus});
      if (start_error.empty()) {
        WorkerLaunch launch;
        launch.owner_tag = owner;
        launch.argv = prep->spec.entrypoint;
        launch.env_set = (*envs)[r].set;
        launch.env_unset = (*envs)[r].unset;
        if (!prep->service.empty()) {
          launch.env_set["TORUS_SERVICE"] = prep->service;
          launch.env_set["TORUS_SERVE_PORT"] = std::to_string(serve_port);
        }
        if (!options.python_path.empty()) {
          auto user = prep->spec.env.find("PYTHONPATH");
          launch.env_set["PYTHONPATH"] = user == prep->spec.env.end()
                                             ? options.python_path
                                             : absl::StrCat(options.python_path, ":", user->second);
        }
        SetLocations(txn.state(), prep->spec.working_dir, prep->spec.py_modules, launch);
        w.launch = std::move(launch);
        starts.emplace_back(prep->targets[r], SpecOf(w, options.token));
      }
      workers.push_back(w.id);
      planned.push_back(std::move(w));
    }
    txn.Apply(AttemptStarted{id, std::move(attempt)}).IgnoreError();
    for (Worker& w : planned) txn.Apply(WorkerStarting{std::move(w)}).IgnoreError();
    if (!start_error.empty()) {
      for (const WorkerId& w : workers) {
        txn.Apply(WorkerExited{w, WorkerExit{.start_failed = true, .reason = start_error, .wall_ms = wall}})
            .IgnoreError();
      }
    } else {
      // Known as starting before anyone sees the records: a stop waits for the start's answer.
      absl::MutexLock lock(&mu_);
      starting_.insert(workers.begin(), workers.end());
    }
    return true;
  });
  if (recorded && !starts.empty()) {
    auto started = agents_->StartWorkers(starts);
    size_t ok = std::count_if(started.begin(), started.end(), [](const auto& s) { return s.ok(); });
    spdlog::info("run {} attempt {}: started {} of {} workers", id.str(), prep->attempt, ok, started.size());
    store_->Update([&](Txn& txn) {
      RecordStarts(txn, workers, started, clock_->WallMillis());
      absl::MutexLock lock(&mu_);
      for (const WorkerId& w : workers) starting_.erase(w);
    });
  }
  Done(key);
}

void WorkloadDriver::RedeliverStarts(const NodeId& node) {
  std::string target;
  std::vector<std::pair<std::string, StartSpec>> starts;
  std::vector<WorkerId> workers;
  std::vector<Key> owners;
  std::string token;
  {
    absl::MutexLock lock(&mu_);
    token = options_.token;
  }
  store_->Update([&](Txn& txn) {
    const ClusterState& s = txn.state();
    const Node* n = s.FindNode(node);
    if (n == nullptr || !n->alive()) return;
    target = n->target();
    std::vector<WorkerId> stopped;
    absl::MutexLock lock(&mu_);
    for (const Worker* w : s.LiveWorkersOn(node)) {
      if (w->phase != WorkerPhase::kStarting || !w->launch || starting_.contains(w->id)) continue;
      if (stops_sent_.contains(w->id)) {
        stopped.push_back(w->id);  // its workload stopped it before it was sent again (that stop found nothing)
        continue;
      }
      starting_.insert(w->id);
      starts.emplace_back(target, SpecOf(*w, token));
      starts.back().second.only_if_new = true;
      workers.push_back(w->id);
      owners.push_back({w->owner.kind, w->owner.id});
    }
    for (const WorkerId& id : stopped) {
      txn.Apply(WorkerExited{id, WorkerExit{.start_failed = true,
                                            .reason = "stopped before its start was sent again after a failover",
                                            .wall_ms = clock_->WallMillis(),
                                            .stopped = true}})
          .IgnoreError();
    }
  });
  if (starts.empty()) return;
  spdlog::info("node {} registered without {} worker(s) this head found starting there: sending their starts again",
               node.str(), starts.size());
  std::vector<absl::StatusOr<int64_t>> started = agents_->StartWorkers(starts);
  store_->Update([&](Txn& txn) {
    std::vector<WorkerId> answered;
    std::vector<absl::StatusOr<int64_t>> answers;
    for (size_t i = 0; i < workers.size(); ++i) {
      // The first start did arrive: the worker runs or ran, and its exit report records it.
      if (started[i].status().code() == absl::StatusCode::kAlreadyExists) continue;
      answered.push_back(workers[i]);
      answers.push_back(started[i]);
    }
    RecordStarts(txn, answered, answers, clock_->WallMillis());
    absl::MutexLock lock(&mu_);
    for (const WorkerId& w : workers) starting_.erase(w);
  });
  Enqueue(owners);  // a stop that waited for the start's answer goes now
}

}  // namespace torus::head
