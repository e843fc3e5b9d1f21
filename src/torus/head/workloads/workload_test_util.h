// Test helpers for the head's workloads: a whole head in one process — a StateStore on a memory journal, Liveness,
// the PlacementScheduler (its real thread), the WorkloadDriver, Membership and the job and run services — wired as
// main.cc wires them, against a FakeAgentPool and a FakeClock; nodes join through Membership::Register, exits come
// back through Membership::ReportWorkerExit. A second head may be opened on the same journal, agents and clock
// (a "restart"). Also a temp dir that removes itself.
//
// Waiting: WaitFor() blocks until a predicate over the state holds, after letting every committed record reach
// the subscribers (StateStore::WaitDelivered) and the driver go idle (WorkloadDriver::WaitIdle); it polls only
// because the scheduler's thread is not covered by either, and gives up after a bound.
//
// Thread-safety: TestHead is used from the test's thread; the head's own threads run inside it.
#pragma once

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "torus/common/clock.h"
#include "torus/head/agents/fake_agent_pool.h"
#include "torus/head/nodes/membership.h"
#include "torus/head/placement/placement_scheduler.h"
#include "torus/head/state/ids.h"
#include "torus/head/state/journal.h"
#include "torus/head/state/journal_test_util.h"
#include "torus/head/state/liveness.h"
#include "torus/head/state/state_store.h"
#include "torus/head/workloads/job_service.h"
#include "torus/head/workloads/run_service.h"
#include "torus/head/workloads/workload_driver.h"

namespace torus::head::testutil {

inline constexpr int kAgentPort = 7000;
inline constexpr char kHeadHost[] = "10.0.0.1";
inline constexpr char kHeadAddress[] = "10.0.0.1:6380";
inline constexpr char kClusterToken[] = "cluster-token";

// "address:7000": where the head calls the agent of a node registered by AgentReportFor.
inline std::string TargetOf(const std::string& address) { return address + ":" + std::to_string(kAgentPort); }


// What the agent of node `id` at `address` reports when it first registers: `cpus` CPUs, nothing held.
inline AgentReport AgentReportFor(const std::string& id, const std::string& address, double cpus,
                                  Labels labels = {}) {
  AgentReport r;
  r.info.node_id = id;
  r.info.address = address;
  r.info.hostname = id;
  r.info.total.Set("CPU", cpus);
  r.info.labels = std::move(labels);
  r.info.pid = 4242;
  r.info.start_time_ms = 1'700'000'000'000;
  r.info.agent_port = kAgentPort;
  r.available = r.info.total;
  return r;
}

inline WorkloadDriver::Options DefaultDriverOptions() {
  WorkloadDriver::Options o;
  o.head_host = kHeadHost;
  o.head_address = kHeadAddress;
  o.token = kClusterToken;
  o.report_base_url = "http://10.0.0.1:8265";
  o.executor_threads = 4;
  return o;
}

// Everything outside the head that survives its restart: the journal, the agents, time.
struct World {
  std::unique_ptr<Journal> journal = NewMemoryJournal();
  FakeAgentPool agents;
  FakeClock clock;
};

class TestHead {
 public:
  struct Options {
    WorkloadDriver::Options driver = DefaultDriverOptions();
    // Runs first on the dispatch thread, before the scheduler and the driver see a batch.
    StateStore::Subscriber first_subscriber;
  };

  explicit TestHead(World* world) : TestHead(world, Options()) {}
  TestHead(World* world, Options options)
      : world(world),
        store(std::make_unique<SharedJournal>(world->journal.get()), world->clock.WallMillis(), {}),
        liveness(&world->clock),
        scheduler(&store, &liveness, &world->agents, &world->clock, {}),
        membership(&store, &liveness, &scheduler, &world->clock, /*node_timeout_micros=*/10'000'000),
        driver(&store, &liveness, &scheduler, &world->agents, &world->clock, options.driver),
        jobs(&store, &scheduler, &world->agents, &ids, &world->clock),
        runs(&store, &scheduler, &world->agents, &ids, &world->clock) {
    open_status = store.Open().status();
    membership.RestoreLiveness();
    if (options.first_subscriber) store.Subscribe(options.first_subscriber);
    store.Subscribe([this](const std::vector<Record>& records) { scheduler.OnRecords(records); });
    store.Subscribe([this](const std::vector<Record>& records) { driver.OnRecords(records); });
    store.StartDispatch();
    scheduler.Start();
    driver.Start();
  }
  ~TestHead() { Shutdown(); }

  // Stops the head's threads (as a head process that ends); the journal and agents stay.
  void Shutdown() {
    driver.Stop();
    scheduler.Stop();
    store.StopDispatch();
  }

  // Adds the node's agent to the fake and registers it.
  absl::StatusOr<Registered> AddNode(const std::string& id, const std::string& address, double cpus,
                                     Labels labels = {}) {
    world->agents.AddAgent(TargetOf(address));
    return membership.Register(AgentReportFor(id, address, cpus, std::move(labels)));
  }

  // Every record delivered and the driver idle.
  void Settle() {
    store.WaitDelivered();
    driver.WaitIdle();
  }

  // True once `pred(state)` holds (checked after Settle), false after `timeout`.
  bool WaitFor(const std::function<bool(const ClusterState&)>& pred,
               std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      Settle();
      if (store.Read([&](const ClusterState& s) { return pred(s); })) return true;
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  bool WaitForJob(const std::string& id, JobStatus status,
                  std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    return WaitFor(
        [&](const ClusterState& s) {
          const Job* j = s.FindJob(JobId(id));
          return j != nullptr && j->status == status;
        },
        timeout);
  }

  Job JobOf(const std::string& id) {
    return store.Read([&](const ClusterState& s) {
      const Job* j = s.FindJob(JobId(id));
      return j == nullptr ? Job() : *j;
    });
  }
  Group GroupOf(const GroupId& id) {
    return store.Read([&](const ClusterState& s) {
      const Group* g = s.FindGroup(id);
      return g == nullptr ? Group() : *g;
    });
  }
  Run RunOf(const RunId& id) {
    return store.Read([&](const ClusterState& s) {
      const Run* r = s.FindRun(id);
      return r == nullptr ? Run() : *r;
    });
  }

  // The worker's agent saw it end with `exit_code` / `signal`, and reports it (as stopped when the head had asked
  // its agent to stop it, as a real agent does).
  absl::Status ExitWorker(const std::string& node, const std::string& address, const WorkerId& worker,
                          int exit_code, int signal = 0) {
    const auto workers = world->agents.Workers(TargetOf(address));
    const auto it = workers.find(worker);
    const bool stopped = signal != 0 && it != workers.end() && it->second.stop_requested;
    world->agents.EndWorker(TargetOf(address), worker);
    return membership.ReportWorkerExit(
        NodeId(node), worker,
        WorkerExit{.exit_code = exit_code, .signal = signal, .wall_ms = world->clock.WallMillis(), .stopped = stopped});
  }

  World* const world;
  absl::Status open_status;  // of store.Open()
  SequentialIdGenerator ids;
  StateStore store;
  Liveness liveness;
  PlacementScheduler scheduler;
  Membership membership;
  WorkloadDriver driver;
  JobService jobs;
  RunService runs;
};

// Polls `pred` (about things outside the state, such as what the fake agents saw) for up to `timeout`.
inline bool Eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace torus::head::testutil
