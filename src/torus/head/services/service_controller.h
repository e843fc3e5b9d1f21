// ServiceController: deployed services and their replicas (DESIGN.md §9). Users deploy, update and delete services
// (journal records ServiceDeployed / ServiceDeleted); the controller keeps each one's replicas — gang runs of the
// service (RunService) — as service_machine.h decides, probes their health, scales them on the ingress's load and
// tells the ingress (RouteTable) which replicas are READY.
//
// Replica states, as users see them:
//   PENDING   its gang waits for resources (a slice)
//   STARTING  its gang runs; its health path has not answered 200 yet
//   READY     it gets requests
//   DRAINING  it gets no new requests; it stops once those in flight end (or graceful_shutdown_timeout passes)
//   STOPPING  it was asked to stop
// Health: each replica's rank 0 is sent GET <health_path> every health_check_period (every 0.2 s at most while it
// starts); READY at the first 200; a READY one failing 3 checks in a row is unhealthy and replaced. Its gang losing
// a host ends the run (replicas are never restarted in place), and a new replica takes its place.
//
// What the controller knows of health, draining and autoscaling targets is not journaled: a new head probes every
// replica again, and starts autoscaled services at the replicas they have.
//
// Thread-safety: thread-safe. One thread decides; probes run on a few threads of their own. Locks: the store's, then
// the controller's, never the other way.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "torus/common/clock.h"
#include "torus/head/services/service_machine.h"
#include "torus/head/state/ids.h"
#include "torus/head/state/state_store.h"
#include "torus/head/workloads/executor.h"
#include "torus/head/workloads/run_service.h"
#include "torus/serve/remote_routes.h"
#include "torus/serve/route_table.h"

namespace torus::head {

struct ReplicaView {
  std::string run_id;
  std::string name;
  int64_t version = 0;
  std::string state;     // PENDING, STARTING, READY, DRAINING, STOPPING
  std::string address;   // rank 0's host:port once its gang runs
  int in_flight = 0;
  int64_t requests = 0;  // sent to it by the ingress
  int64_t created_ms = 0;
  int64_t ready_ms = 0;  // when it became READY (0: not yet)
  std::string message;   // the run's message
};

struct ServiceView {
  Service service;
  std::string status;    // DEPLOYING, RUNNING, UPDATING (older replicas are being replaced), UNHEALTHY (none READY)
  int target = 0;        // replicas wanted now
  int ready = 0;         // READY replicas of the current version
  int queued = 0;        // requests waiting for a READY replica
  std::vector<ReplicaView> replicas;
  std::vector<std::string> events;  // the latest replica events, oldest first
};

class ServiceController {
 public:
  struct Options {
    int64_t tick_ms = 200;
    int probe_threads = 4;
  };

  ServiceController(StateStore* store, RunService* runs, IdGenerator* ids, serve::RouteTable* routes,
                    const Clock* clock, Options options);
  ~ServiceController();  // stops

  void Start();
  void Stop();
  // The store's subscriber: a replica's run changing, a service deployed or deleted, wake the controller.
  void OnRecords(const std::vector<Record>& records);

  // Deploys a spec (YAML or JSON text): a new service, or a new version of one whose spec changed (its replicas
  // roll). Returns the service and whether anything changed. InvalidArgument names the field; AlreadyExists when
  // another service has the route prefix.
  struct Deployed {
    std::string name;
    int64_t version = 0;
    bool changed = false;
  };
  absl::StatusOr<Deployed> Deploy(absl::string_view spec_text);
  // NotFound for an unknown service.
  absl::Status Delete(const std::string& name);
  absl::StatusOr<ServiceView> Get(const std::string& name) const;
  std::vector<ServiceView> List() const;

  // The load an ingress running apart from the head carries (`torus serve ingress`, POST /api/v0/services/load):
  // added to the head's own ingress's for autoscaling and draining while it is fresh (reported within 3 s).
  void ReportLoad(serve::IngressLoad load);

  // Blocks until one decision pass has run after this call (for tests).
  void WaitTick();

 private:
  struct Memory {
    int attempt = 0;
    std::string endpoint;  // host:port probed
    bool ready = false;
    int64_t ready_ms = 0;
    int failures = 0;
    bool unhealthy = false;
    bool draining = false;
    int64_t draining_since_ms = 0;
    bool stopping = false;
    bool probing = false;
    int64_t next_probe_ms = 0;
  };
  struct Probe {
    RunId run;
    std::string service;
    std::string host;
    int port = 0;
    std::string path;
    int64_t timeout_ms = 0;
    int64_t period_ms = 0;
  };

  void Loop();
  void Tick();
  void RunProbe(const Probe& probe);
  void AddEvent(const std::string& service, const std::string& text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ServiceView ViewOf(const ClusterState& s, const Service& service) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The head's ingress's load plus the fresh reports of the others.
  std::map<std::string, serve::ServiceLoad> LoadLocked(int64_t now_ms) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  StateStore* store_;
  RunService* runs_;
  IdGenerator* ids_;
  serve::RouteTable* routes_;
  const Clock* clock_;
  Options options_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t ticks_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<RunId, Memory> replicas_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, AutoscaleState> autoscale_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> targets_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<std::string>> events_ ABSL_GUARDED_BY(mu_);
  struct RemoteLoad {
    serve::IngressLoad load;
    int64_t at_ms = 0;  // clock_->NowMicros() / 1000 when reported
  };
  std::map<std::string, RemoteLoad> remote_ ABSL_GUARDED_BY(mu_);  // by ingress
  Executor probes_;
  std::thread thread_;
};

}  // namespace torus::head
