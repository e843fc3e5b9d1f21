#include "torus/head/services/service_controller.h"

#include <httplib.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace torus::head {
namespace {

constexpr int kUnhealthyAfter = 3;         // failed checks in a row
constexpr int64_t kStartingProbeMs = 200;  // at most this long between checks while a replica starts
constexpr size_t kMaxEvents = 20;

// A replica as the state has it.
struct ReplicaFact {
  RunId run;
  std::string name;
  std::string service;
  int64_t version = 0;
  bool running = false;
  int attempt = 0;
  int64_t since_ms = 0;  // its attempt's start
  int64_t created_ms = 0;
  bool placed = false;   // it has started an attempt (its reservation is held)
  std::string host;
  int port = 0;
};

struct Snapshot {
  std::map<std::string, Service> services;
  std::vector<ReplicaFact> replicas;  // not ended
  std::map<RunId, std::pair<std::string, std::string>> ended;  // run -> (service, message), of remembered runs
};

std::string StatusOf(const ServiceView& v) {
  bool old = false;
  for (const ReplicaView& r : v.replicas) old = old || r.version != v.service.version;
  if (v.ready >= v.target && !old) return "RUNNING";
  if (old) return "UPDATING";
  bool was_ready = false;
  for (const ReplicaView& r : v.replicas) was_ready = was_ready || r.ready_ms > 0;
  if (v.ready == 0 && v.target > 0 && was_ready) return "UNHEALTHY";
  return "DEPLOYING";
}

}  // namespace

ServiceController::ServiceController(StateStore* store, RunService* runs, IdGenerator* ids, serve::RouteTable* routes,
                                     const Clock* clock, Options options)
    : store_(store),
      runs_(runs),
      ids_(ids),
      routes_(routes),
      clock_(clock),
      options_(options),
      probes_(options.probe_threads) {}

ServiceController::~ServiceController() { Stop(); }

void ServiceController::Start() { thread_ = std::thread([this] { Loop(); }); }

void ServiceController::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  probes_.Stop();
}

void ServiceController::OnRecords(const std::vector<Record>& records) {
  bool relevant = false;
  for (const Record& r : records) {
    relevant = relevant || std::holds_alternative<ServiceDeployed>(r) || std::holds_alternative<ServiceDeleted>(r) ||
               std::holds_alternative<RunFinished>(r) || std::holds_alternative<AttemptStarted>(r) ||
               std::holds_alternative<AttemptEnded>(r);
  }
  if (!relevant) return;
  absl::MutexLock lock(&mu_);
  wake_ = true;
  cv_.SignalAll();
}

void ServiceController::WaitTick() {
  absl::MutexLock lock(&mu_);
  const uint64_t until = ticks_ + 2;  // one that started after this call
  wake_ = true;
  cv_.SignalAll();
  while (ticks_ < until && !stopping_) cv_.Wait(&mu_);
}

void ServiceController::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (!wake_ && !stopping_) cv_.WaitWithTimeout(&mu_, absl::Milliseconds(options_.tick_ms));
      if (stopping_) return;
      wake_ = false;
    }
    Tick();
    absl::MutexLock lock(&mu_);
    ++ticks_;
    cv_.SignalAll();
  }
}

void ServiceController::Tick() {
  const int64_t now = clock_->WallMillis();
  Snapshot snap = store_->Read([&](const ClusterState& s) {
    Snapshot out;
    for (const auto& [name, svc] : s.services()) out.services[name] = svc;
    for (const auto& [id, run] : s.runs()) {
      if (run.service.empty()) continue;
      if (run.Terminal()) {
        out.ended[id] = {run.service, run.message};
        continue;
      }
      ReplicaFact f;
      f.run = id;
      f.name = run.spec.run.name;
      f.service = run.service;
      f.version = run.service_version;
      f.created_ms = run.created_time_ms;
      const RunAttempt* a = run.current();
      f.placed = a != nullptr;
      f.running = run.status == RunStatus::kRunning && a != nullptr && !a->ranks.empty() && a->serve_port > 0;
      if (f.running) {
        f.attempt = a->number;
        f.since_ms = a->start_time_ms;
        f.host = a->ranks[0].address;
        f.port = a->serve_port;
      }
      out.replicas.push_back(std::move(f));
    }
    return out;
  });
  struct Submit {
    std::string service;
    int64_t version = 0;
    train::RunSpec spec;
  };
  std::vector<Submit> submits;
  std::vector<ReplicaStop> stops;
  std::vector<Probe> probes;
  std::vector<serve::ServiceRoute> routes;
  {
    absl::MutexLock lock(&mu_);
    const std::map<std::string, serve::ServiceLoad> load = LoadLocked(clock_->NowMicros() / 1000);
    // Replicas that ended: forgotten, with an event unless the controller stopped them.
    for (auto it = replicas_.begin(); it != replicas_.end();) {
      auto ended = snap.ended.find(it->first);
      const bool live = std::any_of(snap.replicas.begin(), snap.replicas.end(),
                                    [&](const ReplicaFact& f) { return f.run == it->first; });
      if (live) {
        ++it;
        continue;
      }
      if (ended != snap.ended.end() && !it->second.stopping) {
        AddEvent(ended->second.first,
                 absl::StrCat("replica ", it->first.str(), " ended: ", ended->second.second, "; replacing it"));
      }
      it = replicas_.erase(it);
    }
    // Group the replicas by service; start probing the running ones.
    std::map<std::string, std::vector<const ReplicaFact*>> by_service;
    for (const ReplicaFact& f : snap.replicas) {
      by_service[f.service].push_back(&f);
      Memory& m = replicas_[f.run];
      if (!f.running) continue;
      const std::string endpoint = absl::StrCat(f.host, ":", f.port);
      if (m.attempt != f.attempt || m.endpoint != endpoint) {
        const bool draining = m.draining, stopping = m.stopping;
        const int64_t since = m.draining_since_ms;
        m = Memory();
        m.draining = draining;
        m.stopping = stopping;
        m.draining_since_ms = since;
        m.attempt = f.attempt;
        m.endpoint = endpoint;
      }
      auto svc = snap.services.find(f.service);
      if (svc == snap.services.end() || m.probing || m.stopping || now < m.next_probe_ms) continue;
      m.probing = true;
      probes.push_back(Probe{f.run, f.service, f.host, f.port, svc->second.spec.health_path,
                             svc->second.spec.health_check_timeout_ms, svc->second.spec.health_check_period_ms});
    }
    for (const auto& [name, svc] : snap.services) by_service.try_emplace(name);

    for (const auto& [name, replicas] : by_service) {
      auto svc_it = snap.services.find(name);
      const Service* svc = svc_it == snap.services.end() ? nullptr : &svc_it->second;
      const serve::ServiceLoad* l = load.contains(name) ? &load.at(name) : nullptr;
      // How many replicas are wanted now.
      int target = 0;
      if (svc != nullptr && svc->spec.autoscaling) {
        const train::AutoscalingConfig& config = *svc->spec.autoscaling;
        auto state = autoscale_.find(name);
        if (state == autoscale_.end()) {
          int current = 0;
          for (const ReplicaFact* f : replicas) current += f->version == svc->version ? 1 : 0;
          AutoscaleState initial;
          initial.target = current > 0 ? current : config.initial_replicas;
          state = autoscale_.emplace(name, initial).first;
        }
        const double ongoing = l == nullptr ? 0 : l->in_flight + l->queued;
        const AutoscaleState next = Autoscale(config, state->second, ongoing, now);
        if (next.target != state->second.target) {
          AddEvent(name, absl::StrCat("autoscaling from ", state->second.target, " to ", next.target,
                                      " replicas (", ongoing, " requests ongoing, target_ongoing_requests ",
                                      config.target_ongoing_requests, ")"));
        }
        state->second = next;
        target = next.target;
      } else if (svc != nullptr) {
        target = svc->spec.num_replicas;
        autoscale_.erase(name);
      }
      if (svc == nullptr) autoscale_.erase(name);
      targets_[name] = target;

      ServiceFacts facts;
      facts.version = svc == nullptr ? 0 : svc->version;
      facts.target = target;
      facts.readiness_timeout_ms = svc == nullptr ? 0 : svc->spec.readiness_timeout_ms;
      facts.graceful_shutdown_timeout_ms = svc == nullptr ? 0 : svc->spec.graceful_shutdown_timeout_ms;
      for (const ReplicaFact* f : replicas) {
        const Memory& m = replicas_[f->run];
        if (m.stopping) continue;
        ReplicaFacts r;
        r.run = f->run;
        r.version = svc == nullptr ? -1 : f->version;
        r.running = f->running;
        r.running_since_ms = f->since_ms;
        r.placed = f->placed;
        r.submitted_ms = f->created_ms;
        r.ready = m.ready && !m.draining;
        r.unhealthy = m.unhealthy;
        r.draining = m.draining;
        r.draining_since_ms = m.draining_since_ms;
        if (l != nullptr) {
          auto n = l->replicas.find(f->run.str());
          r.in_flight = n == l->replicas.end() ? 0 : n->second;
        }
        facts.replicas.push_back(r);
      }
      const ServiceStep step = DecideService(facts, now);
      for (int i = 0; i < step.submit && svc != nullptr; ++i) {
        submits.push_back(
            {name, svc->version, train::ReplicaRunSpec(svc->spec, absl::StrCat(name, "-", ids_->Suffix(5)))});
      }
      for (const RunId& run : step.drain) {
        Memory& m = replicas_[run];
        m.draining = true;
        m.draining_since_ms = now;
        AddEvent(name, absl::StrCat("replica ", run.str(), " draining"));
      }
      for (const ReplicaStop& stop : step.stop) {
        replicas_[stop.run].stopping = true;
        AddEvent(name, absl::StrCat("replica ", stop.run.str(), " stopping: ", stop.reason));
        stops.push_back(stop);
      }
      if (svc == nullptr) continue;
      serve::ServiceRoute route;
      route.name = name;
      route.prefix = svc->spec.route_prefix;
      route.request_timeout_ms = svc->spec.request_timeout_ms;
      route.max_request_bytes = svc->spec.max_request_bytes;
      route.max_queued_requests = svc->spec.max_queued_requests;
      route.queue_timeout_ms = svc->spec.queue_timeout_ms;
      for (const ReplicaFact* f : replicas) {
        const Memory& m = replicas_[f->run];
        if (f->running && m.ready && !m.draining && !m.stopping && !m.unhealthy) {
          route.ready.push_back({f->run.str(), f->host, f->port});
        }
      }
      routes.push_back(std::move(route));
    }
    for (auto it = targets_.begin(); it != targets_.end();) {
      it = by_service.contains(it->first) ? std::next(it) : targets_.erase(it);
    }
  }
  routes_->Set(std::move(routes));
  for (Submit& s : submits) {
    auto id = runs_->Submit(std::move(s.spec), s.service, s.version);
    absl::MutexLock lock(&mu_);
    if (id.ok()) {
      AddEvent(s.service, absl::StrCat("replica ", id->str(), " submitted (version ", s.version, ")"));
    } else {
      AddEvent(s.service, absl::StrCat("cannot submit a replica: ", id.status().message()));
    }
  }
  for (const ReplicaStop& stop : stops) {
    auto stopped = runs_->Stop(stop.run.str());
    if (!stopped.ok()) spdlog::warn("service replica {}: {}", stop.run.str(), std::string(stopped.status().message()));
  }
  for (Probe& p : probes) probes_.Post([this, p] { RunProbe(p); });
}

void ServiceController::RunProbe(const Probe& probe) {
  httplib::Client client(probe.host, probe.port);
  const auto timeout = std::chrono::milliseconds(probe.timeout_ms);
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  client.set_write_timeout(timeout);
  httplib::Result res = client.Get(probe.path);
  const bool healthy = res && res->status == 200;
  const int64_t now = clock_->WallMillis();
  absl::MutexLock lock(&mu_);
  auto it = replicas_.find(probe.run);
  if (it == replicas_.end()) return;
  Memory& m = it->second;
  m.probing = false;
  const int64_t period = probe.period_ms;
  const std::string& service = probe.service;
  bool changed = false;
  if (healthy) {
    if (!m.ready) {
      m.ready = true;
      m.ready_ms = now;
      changed = true;
      AddEvent(service, absl::StrCat("replica ", probe.run.str(), " READY at ", probe.host, ":", probe.port));
    }
    m.failures = 0;
  } else if (m.ready && ++m.failures >= kUnhealthyAfter && !m.unhealthy) {
    m.unhealthy = true;
    changed = true;
    AddEvent(service, absl::StrCat("replica ", probe.run.str(), " failed ", kUnhealthyAfter, " health checks: ",
                                   res ? absl::StrCat("status ", res->status) : httplib::to_string(res.error())));
  }
  m.next_probe_ms = now + (m.ready ? period : std::min(period, kStartingProbeMs));
  if (changed) {
    wake_ = true;
    cv_.SignalAll();
  }
}

void ServiceController::ReportLoad(serve::IngressLoad load) {
  absl::MutexLock lock(&mu_);
  const int64_t now_ms = clock_->NowMicros() / 1000;
  for (auto it = remote_.begin(); it != remote_.end();) {  // ingresses gone for a minute are forgotten
    it = now_ms - it->second.at_ms > 60'000 ? remote_.erase(it) : std::next(it);
  }
  const std::string ingress = load.ingress;
  remote_[ingress] = RemoteLoad{std::move(load), now_ms};
}

std::map<std::string, serve::ServiceLoad> ServiceController::LoadLocked(int64_t now_ms) const {
  constexpr int64_t kFreshMs = 3000;
  std::map<std::string, serve::ServiceLoad> out = routes_->Load();
  for (const auto& [ingress, remote] : remote_) {
    if (now_ms - remote.at_ms > kFreshMs) continue;
    for (const auto& [name, l] : remote.load.services) {
      serve::ServiceLoad& total = out[name];
      total.in_flight += l.in_flight;
      total.queued += l.queued;
      for (const auto& [id, n] : l.replicas) total.replicas[id] += n;
    }
  }
  return out;
}

void ServiceController::AddEvent(const std::string& service, const std::string& text) {
  if (service.empty()) return;
  spdlog::info("service {}: {}", service, text);
  std::vector<std::string>& events = events_[service];
  events.push_back(text);
  if (events.size() > kMaxEvents) events.erase(events.begin());
}

absl::StatusOr<ServiceController::Deployed> ServiceController::Deploy(absl::string_view spec_text) {
  auto spec = train::ParseServiceSpec(spec_text);
  if (!spec.ok()) return spec.status();
  const std::string json = train::ServiceSpecToJson(*spec);
  if (absl::Status w = store_->Writable(); !w.ok()) return w;
  const int64_t wall = clock_->WallMillis();
  return store_->Update([&](Txn& txn) -> absl::StatusOr<Deployed> {
    for (const auto& [name, other] : txn.state().services()) {
      if (name != spec->name && other.spec.route_prefix == spec->route_prefix) {
        return absl::AlreadyExistsError(absl::StrCat("route_prefix ", spec->route_prefix, " is taken by service ",
                                                     name, "; give this one another"));
      }
    }
    if (absl::Status s = txn.state().CheckPackageStored("working_dir", spec->replica.working_dir); !s.ok()) return s;
    for (size_t i = 0; i < spec->replica.py_modules.size(); ++i) {
      absl::Status s = txn.state().CheckPackageStored(absl::StrCat("py_modules[", i, "]"), spec->replica.py_modules[i]);
      if (!s.ok()) return s;
    }
    const Service* current = txn.state().FindService(spec->name);
    if (current != nullptr && current->spec_json == json) return Deployed{spec->name, current->version, false};
    const int64_t version = current == nullptr ? 1 : current->version + 1;
    absl::Status s = txn.Apply(ServiceDeployed{spec->name, json, version, wall});
    if (!s.ok()) return s;
    return Deployed{spec->name, version, true};
  });
}

absl::Status ServiceController::Delete(const std::string& name) {
  if (absl::Status w = store_->Writable(); !w.ok()) return w;
  const int64_t wall = clock_->WallMillis();
  return store_->Update([&](Txn& txn) -> absl::Status {
    if (txn.state().FindService(name) == nullptr) {
      return absl::NotFoundError(absl::StrCat("service ", name, " does not exist"));
    }
    return txn.Apply(ServiceDeleted{name, wall});
  });
}

ServiceView ServiceController::ViewOf(const ClusterState& s, const Service& service) const {
  ServiceView v;
  v.service = service;
  auto target = targets_.find(service.name);
  v.target = target == targets_.end() ? train::InitialReplicas(service.spec) : target->second;
  const std::map<std::string, serve::ServiceLoad> load = LoadLocked(clock_->NowMicros() / 1000);
  const serve::ServiceLoad* l = load.contains(service.name) ? &load.at(service.name) : nullptr;
  if (l != nullptr) v.queued = l->queued;
  for (const auto& [id, run] : s.runs()) {
    if (run.service != service.name || run.Terminal()) continue;
    ReplicaView r;
    r.run_id = id.str();
    r.name = run.spec.run.name;
    r.version = run.service_version;
    r.created_ms = run.created_time_ms;
    r.message = run.message;
    const RunAttempt* a = run.current();
    if (run.status == RunStatus::kRunning && a != nullptr && !a->ranks.empty()) {
      r.address = absl::StrCat(a->ranks[0].address, ":", a->serve_port);
    }
    auto m = replicas_.find(id);
    if (m != replicas_.end() && m->second.stopping) {
      r.state = "STOPPING";
    } else if (m != replicas_.end() && m->second.draining) {
      r.state = "DRAINING";
    } else if (m != replicas_.end() && m->second.ready && !m->second.unhealthy) {
      r.state = "READY";
      if (r.version == service.version) ++v.ready;
    } else if (run.status == RunStatus::kRunning) {
      r.state = "STARTING";
    } else {
      r.state = "PENDING";
    }
    if (m != replicas_.end()) r.ready_ms = m->second.ready_ms;
    if (l != nullptr) {
      if (auto n = l->replicas.find(r.run_id); n != l->replicas.end()) r.in_flight = n->second;
      if (auto n = l->served.find(r.run_id); n != l->served.end()) r.requests = n->second;
    }
    v.replicas.push_back(std::move(r));
  }
  std::sort(v.replicas.begin(), v.replicas.end(),
            [](const ReplicaView& a, const ReplicaView& b) { return a.created_ms < b.created_ms; });
  if (auto e = events_.find(service.name); e != events_.end()) v.events = e->second;
  v.status = StatusOf(v);
  return v;
}

absl::StatusOr<ServiceView> ServiceController::Get(const std::string& name) const {
  return store_->Read([&](const ClusterState& s) -> absl::StatusOr<ServiceView> {
    const Service* svc = s.FindService(name);
    if (svc == nullptr) return absl::NotFoundError(absl::StrCat("service ", name, " does not exist"));
    absl::MutexLock lock(&mu_);
    return ViewOf(s, *svc);
  });
}

std::vector<ServiceView> ServiceController::List() const {
  return store_->Read([&](const ClusterState& s) {
    absl::MutexLock lock(&mu_);
    std::vector<ServiceView> out;
    for (const auto& [name, svc] : s.services()) out.push_back(ViewOf(s, svc));
    return out;
  });
}

}  // namespace torus::head
