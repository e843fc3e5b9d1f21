#include "torus/node/worker_leases.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace torus::node {
namespace worker_leases_test {

// A host with 8 CPUs and 4 TPU chips (v6e), whose task workers are `sh -c SCRIPT`; a thread plays the workers'
// part of announcing themselves (port 40000 + n) once they run.
class WorkerLeasesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / absl::StrCat("worker_leases_test_", getpid(), "_", counter_++);
    std::filesystem::create_directories(dir_);
    ResourceSet total;
    total.Set(kResourceCpu, 8);
    total.Set(kResourceTpu, 4);
    ledger_ = std::make_unique<BundleLedger>(&clock_, total, 4, 0);
    supervisor_ = std::make_unique<WorkerSupervisor>(&clock_, (dir_ / "logs").string(), EnvMap{{"PATH", "/bin:/usr/bin"}},
                                                     [this](const WorkerExit& e) {
                                                       ledger_->Unbind(e.worker_id);
                                                       if (leases_) leases_->OnWorkerExited(e.worker_id);
                                                     });
  }
  void TearDown() override {
    stop_announcer_ = true;
    if (announcer_.joinable()) announcer_.join();
    if (leases_) leases_->Shutdown();
    supervisor_->StopAll(0);
    leases_.reset();
    supervisor_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Make(std::string script, bool announce = true, WorkerLeasesOptions options = {}) {
    options.worker_argv = {"/bin/sh", "-c", std::move(script)};
    if (options.start_timeout_ms == 60'000) options.start_timeout_ms = 5'000;
    HostDevices devices{.tpu_generation = TpuGeneration::kV6e, .chips = 4, .base_env = {{"PATH", "/bin:/usr/bin"}}};
    leases_ = std::make_unique<WorkerLeases>(ledger_.get(), supervisor_.get(), devices, options, [] {});
    if (!announce) return;
    announcer_ = std::thread([this] {
      std::set<std::string> done;
      while (!stop_announcer_) {
        for (const RunningWorker& w : supervisor_->Running()) {
          if (done.insert(w.worker_id).second) {
            leases_->Announce(w.worker_id, 40000 + static_cast<int>(done.size()), w.pid).IgnoreError();
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  LeaseAsk Ask(double cpus, double tpus = 0) {
    LeaseAsk ask{.job_id = "job-1", .wait_ms = 0};
    ask.resources.Set(kResourceCpu, cpus);
    if (tpus > 0) ask.resources.Set(kResourceTpu, tpus);
    return ask;
  }
  std::string EnvOf(const std::string& worker_id, const std::string& name) {
    for (const RunningWorker& w : supervisor_->Running()) {
      if (w.worker_id == worker_id) {
        auto it = w.env_set.find(name);
        return it == w.env_set.end() ? "<unset>" : it->second;
      }
    }
    return "<not running>";
  }
  bool WaitFor(const std::function<bool()>& cond) {
    for (int i = 0; i < 500; ++i) {
      if (cond()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return cond();
  }

  static inline int counter_ = 0;
  RealClock clock_;
  std::filesystem::path dir_;
  std::unique_ptr<BundleLedger> ledger_;
  std::unique_ptr<WorkerSupervisor> supervisor_;
  std::unique_ptr<WorkerLeases> leases_;
  std::thread announcer_;
  std::atomic<bool> stop_announcer_{false};
};

TEST_F(WorkerLeasesTest, GrantsAnAnnouncedWorkerAndHoldsItsResources) {
  Make("sleep 30");
  auto grant = leases_->Request(Ask(2));
  ASSERT_TRUE(grant.ok()) << grant.status();
  EXPECT_EQ(grant->worker_address, "127.0.0.1:40001");
  EXPECT_GT(grant->worker_pid, 0);
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 6 * kResourceScale);
  EXPECT_EQ(EnvOf(grant->worker_id, "TORUS_JOB_ID"), "job-1");
  ASSERT_EQ(leases_->Leases().size(), 1u);
  EXPECT_EQ(leases_->Leases()[0].lease_id, grant->lease_id);
}

TEST_F(WorkerLeasesTest, AReturnedWorkerIsPooledAndReusedForTheSameJob) {
  Make("sleep 30");
  auto first = leases_->Request(Ask(1));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(leases_->Return(first->lease_id, false).ok());
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 8 * kResourceScale);
  EXPECT_EQ(leases_->IdleWorkers(), 1);
  auto second = leases_->Request(Ask(1));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->worker_id, first->worker_id);
  EXPECT_NE(second->lease_id, first->lease_id);
  // Another job gets its own worker.
  LeaseAsk other = Ask(1);
  other.job_id = "job-2";
  auto third = leases_->Request(other);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_NE(third->worker_id, first->worker_id);
  EXPECT_TRUE(absl::IsNotFound(leases_->Return(first->lease_id, false)));
}

TEST_F(WorkerLeasesTest, ATpuLeaseGetsAnAlignedChipBlockAndItsWorkerStopsOnReturn) {
  Make("sleep 30");
  auto one = leases_->Request(Ask(1, 1));
  ASSERT_TRUE(one.ok()) << one.status();
  auto two = leases_->Request(Ask(1, 2));
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(one->chips, (std::vector<int>{0}));
  EXPECT_EQ(two->chips, (std::vector<int>{2, 3}));
  EXPECT_EQ(EnvOf(one->worker_id, "TPU_VISIBLE_CHIPS"), "0");
  EXPECT_EQ(EnvOf(two->worker_id, "TPU_VISIBLE_CHIPS"), "2,3");
  ASSERT_TRUE(leases_->Return(two->lease_id, false).ok());
  // Device workers are never pooled; their chips are free once they have exited.
  EXPECT_EQ(leases_->IdleWorkers(), 0);
  EXPECT_TRUE(WaitFor([&] { return ledger_->BusyChips() == std::vector<int>{0}; }));
}

TEST_F(WorkerLeasesTest, AShapeTheHostCanNeverHoldIsRefusedAtOnce) {
  Make("sleep 30");
  auto grant = leases_->Request(Ask(1, 8));
  ASSERT_EQ(grant.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(grant.status().message(), "this node has 4 TPU in all; the lease asks for 8");
  auto half = leases_->Request(Ask(1, 0.5));
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  LeaseAsk bad = Ask(1);
  bad.job_id = "a b";
  EXPECT_EQ(leases_->Request(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(WorkerLeasesTest, ABusyHostWaitsThenSaysWhatIsShort) {
  Make("sleep 30");
  auto all = leases_->Request(Ask(8));
  ASSERT_TRUE(all.ok()) << all.status();
  LeaseAsk ask = Ask(1);
  ask.wait_ms = 50;
  auto busy = leases_->Request(ask);
  ASSERT_EQ(busy.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(busy.status().message().find("waited 50 ms"), std::string::npos) << busy.status();
  // A return during the wait grants it.
  ask.wait_ms = 5000;
  std::thread returner([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    leases_->Return(all->lease_id, false).IgnoreError();
  });
  auto granted = leases_->Request(ask);
  returner.join();
  EXPECT_TRUE(granted.ok()) << granted.status();
}

TEST_F(WorkerLeasesTest, AWorkerThatExitsBeforeAnnouncingFailsTheLeaseWithItsOutput) {
  Make("echo cannot import torus >&2; exit 3", /*announce=*/false);
  auto grant = leases_->Request(Ask(1));
  ASSERT_EQ(grant.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(grant.status().message().find("exited before it started"), std::string::npos) << grant.status();
  EXPECT_NE(grant.status().message().find("cannot import torus"), std::string::npos) << grant.status();
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 8 * kResourceScale);
}

TEST_F(WorkerLeasesTest, ALeaseEndsWhenItsWorkerExits) {
  Make("sleep 30");
  auto grant = leases_->Request(Ask(3));
  ASSERT_TRUE(grant.ok()) << grant.status();
  ASSERT_TRUE(supervisor_->Stop(grant->worker_id, 0).ok());
  EXPECT_TRUE(WaitFor([&] { return leases_->Leases().empty(); }));
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 8 * kResourceScale);
}

TEST_F(WorkerLeasesTest, ALeaseEndsWhenItsHolderOnThisMachineIsGone) {
  Make("sleep 30");
  pid_t holder = fork();
  if (holder == 0) _exit(0);
  waitpid(holder, nullptr, 0);  // a pid that is gone
  LeaseAsk ask = Ask(2);
  ask.holder_pid = holder;
  ask.holder_boot_id = ReadBootId();
  auto grant = leases_->Request(ask);
  ASSERT_TRUE(grant.ok()) << grant.status();
  LeaseAsk alive = Ask(1);
  alive.holder_pid = getpid();
  alive.holder_boot_id = ReadBootId();
  ASSERT_TRUE(leases_->Request(alive).ok());
  leases_->Sweep();
  ASSERT_EQ(leases_->Leases().size(), 1u);
  EXPECT_EQ(leases_->Leases()[0].holder_pid, getpid());
}

TEST_F(WorkerLeasesTest, IdlePooledWorkersAreStoppedAfterTheirTime) {
  Make("sleep 30", true, {.idle_worker_ms = 0});
  auto grant = leases_->Request(Ask(1));
  ASSERT_TRUE(grant.ok()) << grant.status();
  ASSERT_TRUE(leases_->Return(grant->lease_id, false).ok());
  leases_->Sweep();
  EXPECT_EQ(leases_->IdleWorkers(), 0);
  EXPECT_TRUE(WaitFor([&] { return supervisor_->RunningCount() == 0; }));
}

TEST_F(WorkerLeasesTest, LeasesInsideAPlacementGroupBundleShareItsChipsAndEndWithIt) {
  Make("sleep 30");
  ResourceSet bundle;
  bundle.Set(kResourceCpu, 2);
  bundle.Set(kResourceTpu, 4);
  ASSERT_TRUE(ledger_->Prepare("pg-1", 1, {{.index = 0, .resources = bundle, .chips = {0, 1, 2, 3}}}, 60'000'000).ok());
  ASSERT_TRUE(ledger_->Commit("pg-1", 1).ok());
  LeaseAsk in = Ask(1, 1);
  in.group_id = "pg-1";
  in.bundle_index = 0;
  auto first = leases_->Request(in);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = leases_->Request(in);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first->chips, (std::vector<int>{0}));
  EXPECT_EQ(second->chips, (std::vector<int>{1}));
  EXPECT_EQ(EnvOf(second->worker_id, "TPU_VISIBLE_CHIPS"), "1");
  // The bundle's two CPUs are taken: a third waits, then says what is left.
  in.wait_ms = 20;
  auto third = leases_->Request(in);
  ASSERT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("bundle 0 of group pg-1 has {\"TPU\": 2} left"), std::string::npos)
      << third.status();
  // The host's own availability is the bundle's business: the ledger did not change.
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 6 * kResourceScale);
  LeaseAsk elsewhere = in;
  elsewhere.bundle_index = 5;
  EXPECT_EQ(leases_->Request(elsewhere).status().message(), "bundle 5 of group pg-1 is not held on this node");
  LeaseAsk too_big = Ask(1, 8);
  too_big.group_id = "pg-1";
  too_big.bundle_index = 0;
  EXPECT_EQ(leases_->Request(too_big).status().code(), absl::StatusCode::kFailedPrecondition);
  // Releasing the bundle stops its lease workers; their leases end.
  BundleLedger::Released released = ledger_->Release("pg-1", {});
  EXPECT_EQ(released.workers.size(), 2u);
  for (const std::string& w : released.workers) ASSERT_TRUE(supervisor_->Stop(w, 0).ok());
  EXPECT_TRUE(WaitFor([&] { return leases_->Leases().empty(); }));
  EXPECT_TRUE(WaitFor([&] { return ledger_->BusyChips().empty(); }));
}

TEST_F(WorkerLeasesTest, ABlockedWorkerLendsOnlyItsCpuUntilItRunsAgain) {
  Make("sleep 30");
  auto parent = leases_->Request(Ask(6, 1));
  ASSERT_TRUE(parent.ok()) << parent.status();
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 2 * kResourceScale);
  // A child that does not fit waits; the parent blocking in get lends it its 6 CPUs.
  LeaseAsk child = Ask(4);
  child.wait_ms = 5000;
  absl::StatusOr<LeaseGrant> granted = absl::UnknownError("not asked");
  std::thread asker([&] { granted = leases_->Request(child); });
  EXPECT_TRUE(WaitFor([&] { return leases_->WaitingRequests() == 1; }));
  ASSERT_TRUE(leases_->SetWorkerBlocked(parent->worker_id, true).ok());
  asker.join();
  ASSERT_TRUE(granted.ok()) << granted.status();
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 4 * kResourceScale);
  // Its TPU chip stays held, and the listing says what it lends.
  EXPECT_EQ(ledger_->BusyChips(), (std::vector<int>{0}));
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceTpu), 3 * kResourceScale);
  for (const LeaseInfo& l : leases_->Leases()) {
    const bool is_parent = l.lease_id == parent->lease_id;
    EXPECT_EQ(l.blocked, is_parent);
    EXPECT_EQ(l.lent.GetFixed(kResourceCpu), is_parent ? 6 * kResourceScale : 0);
    EXPECT_EQ(l.lent.GetFixed(kResourceTpu), 0);
  }
  // Blocked again (a second wait): nothing changes.
  ASSERT_TRUE(leases_->SetWorkerBlocked(parent->worker_id, true).ok());
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 4 * kResourceScale);
  // Running again, it takes its CPUs back although only 4 are free: the host is over-subscribed (6 + 4 of 8), and
  // nothing new fits until enough is returned.
  ASSERT_TRUE(leases_->SetWorkerBlocked(parent->worker_id, false).ok());
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 0);
  EXPECT_EQ(leases_->Request(Ask(1)).status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(leases_->Return(granted->lease_id, false).ok());
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 2 * kResourceScale);
  EXPECT_FALSE(leases_->Leases()[0].blocked);
}

TEST_F(WorkerLeasesTest, ALeaseReturnedWhileBlockedFreesItsResourcesAndItsWorkerUnblocksNothing) {
  Make("sleep 30");
  auto first = leases_->Request(Ask(3));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(leases_->SetWorkerBlocked(first->worker_id, true).ok());
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 8 * kResourceScale);
  ASSERT_TRUE(leases_->Return(first->lease_id, false).ok());
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 8 * kResourceScale);
  // The pooled worker holds no lease: its late "running again" takes nothing.
  EXPECT_TRUE(absl::IsNotFound(leases_->SetWorkerBlocked(first->worker_id, false)));
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 8 * kResourceScale);
  // Leased again, the worker starts unblocked: a stale report of the old task is a no-op.
  auto second = leases_->Request(Ask(2));
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->worker_id, first->worker_id);
  ASSERT_TRUE(leases_->SetWorkerBlocked(second->worker_id, false).ok());
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 6 * kResourceScale);
  EXPECT_FALSE(leases_->Leases()[0].blocked);
}

TEST_F(WorkerLeasesTest, AWorkerThatDiesWhileBlockedEndsItsLeaseAndFreesItsResources) {
  Make("sleep 30");
  auto grant = leases_->Request(Ask(5, 2));
  ASSERT_TRUE(grant.ok()) << grant.status();
  ASSERT_TRUE(leases_->SetWorkerBlocked(grant->worker_id, true).ok());
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 8 * kResourceScale);
  EXPECT_EQ(ledger_->BusyChips(), (std::vector<int>{0, 1}));
  ASSERT_EQ(kill(grant->worker_pid, SIGKILL), 0);
  EXPECT_TRUE(WaitFor([&] { return leases_->Leases().empty(); }));
  EXPECT_TRUE(WaitFor([&] { return ledger_->BusyChips().empty(); }));
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 8 * kResourceScale);
  EXPECT_TRUE(absl::IsNotFound(leases_->SetWorkerBlocked(grant->worker_id, false)));
  auto end = leases_->WaitEnd(grant->lease_id, 0);
  ASSERT_TRUE(end.ok() && end->has_value()) << end.status();
  EXPECT_EQ(**end, "its worker exited");
}

TEST_F(WorkerLeasesTest, ALeaseInsideAPlacementGroupBundleLendsNothingWhileBlocked) {
  Make("sleep 30");
  ResourceSet bundle;
  bundle.Set(kResourceCpu, 2);
  ASSERT_TRUE(ledger_->Prepare("pg-1", 1, {{.index = 0, .resources = bundle}}, 60'000'000).ok());
  ASSERT_TRUE(ledger_->Commit("pg-1", 1).ok());
  LeaseAsk in = Ask(2);
  in.group_id = "pg-1";
  in.bundle_index = 0;
  auto grant = leases_->Request(in);
  ASSERT_TRUE(grant.ok()) << grant.status();
  ASSERT_TRUE(leases_->SetWorkerBlocked(grant->worker_id, true).ok());
  EXPECT_EQ(ledger_->Available().GetFixed(kResourceCpu), 6 * kResourceScale);
  EXPECT_TRUE(leases_->Leases()[0].blocked);
  EXPECT_TRUE(leases_->Leases()[0].lent.empty());
  // Nor does another lease of the bundle get its CPUs.
  EXPECT_EQ(leases_->Request(in).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(leases_->SetWorkerBlocked(grant->worker_id, false).ok());
}

TEST(LeaseNamesTest, LeaseGroupsAndOwnersAreRecognised) {
  EXPECT_TRUE(IsLeaseGroup("lease:00ab"));
  EXPECT_FALSE(IsLeaseGroup("pg-lease:1"));
  EXPECT_TRUE(IsLeaseOwner("tasks:job-1"));
  EXPECT_FALSE(IsLeaseOwner("job-1"));
}

}  // namespace worker_leases_test
}  // namespace torus::node
