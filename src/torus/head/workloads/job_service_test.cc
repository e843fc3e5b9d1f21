#include "torus/head/workloads/job_service.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "torus/head/workloads/workload_test_util.h"

namespace torus::head {
namespace job_service_test {

using ::testing::ElementsAre;
using ::testing::StartsWith;
using testutil::TargetOf;
using testutil::TestHead;
using testutil::World;

JobRequest Request(const std::string& id, double cpus = 0) {
  JobRequest r;
  r.submission_id = id;
  r.entrypoint = "python3 main.py";
  if (cpus > 0) r.resources.Set("CPU", cpus);
  return r;
}

// ---- ValidateJobRequest ----

TEST(ValidateJobRequestTest, Table) {
  struct Row {
    std::string name;
    std::function<void(JobRequest&)> change;
    std::string want;  // "" = OK
  };
  const std::string long_id(101, 'a');
  const std::vector<Row> rows = {
      {"minimal", [](JobRequest&) {}, ""},
      {"no entrypoint", [](JobRequest& r) { r.entrypoint.clear(); }, "entrypoint: required, a shell command"},
      {"generated id", [](JobRequest& r) { r.submission_id.clear(); }, ""},
      {"id of every allowed character", [](JobRequest& r) { r.submission_id = "Ab9_-.x"; }, ""},
      {"id of 100 characters", [](JobRequest& r) { r.submission_id = std::string(100, 'z'); }, ""},
      {"id with a space",
       [](JobRequest& r) { r.submission_id = "my job"; },
       "submission_id \"my job\" is invalid; use 1-100 letters, digits, '_', '-' or '.'"},
      {"id with a slash",
       [](JobRequest& r) { r.submission_id = "a/b"; },
       "submission_id \"a/b\" is invalid; use 1-100 letters, digits, '_', '-' or '.'"},
      {"id of 101 characters (quoted cut to 100)",
       [&](JobRequest& r) { r.submission_id = long_id; },
       "submission_id \"" + std::string(100, 'a') + "\" is invalid; use 1-100 letters, digits, '_', '-' or '.'"},
      {"TPU 3",
       [](JobRequest& r) { r.resources.Set("TPU", 3); },
       "entrypoint_resources: TPU request of 3 chips is not supported; use 1, 2, 4 or 8 chips, or a whole host"},
      {"TPU 16",
       [](JobRequest& r) { r.resources.Set("TPU", 16); },
       "entrypoint_resources: TPU request of 16 chips is not supported; a host has at most 8 chips; use a slice "
       "group"},
      {"TPU 1", [](JobRequest& r) { r.resources.Set("TPU", 1); }, ""},
      {"TPU 4", [](JobRequest& r) { r.resources.Set("TPU", 4); }, ""},
      {"TPU 8", [](JobRequest& r) { r.resources.Set("TPU", 8); }, ""},
      {"bad resource name",
       [](JobRequest& r) { r.resources.Set("9lives", 1); },
       "entrypoint_resources: resource name \"9lives\" is invalid: it does not start with a letter or '_'; a "
       "resource name is 1-128 characters of letters, digits, '_', '-', '.', '/' or ':', starting with a letter or "
       "'_'"},
      {"env name with '='",
       [](JobRequest& r) { r.env_vars = {{"A=B", "1"}}; },
       "runtime_env.env_vars: invalid name \"A=B\""},
      {"empty env name", [](JobRequest& r) { r.env_vars = {{"", "1"}}; }, "runtime_env.env_vars: invalid name \"\""},
      {"selector", [](JobRequest& r) { r.label_selector = {{"pool", "in(a,b)"}}; }, ""},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    JobRequest r = Request("job-1");
    row.change(r);
    absl::Status s = ValidateJobRequest(r);
    if (row.want.empty()) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(s.message(), row.want);
    }
  }
}

TEST(ValidateJobRequestTest, BadSelectorNamesTheField) {
  JobRequest r = Request("job-1");
  r.label_selector = {{"pool", "in()"}};
  absl::Status s = ValidateJobRequest(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), StartsWith("entrypoint_label_selector: label selector for \"pool\""));
}

// ---- JobService ----

class JobServiceTest : public ::testing::Test {
 protected:
  JobServiceTest() {
    TestHead::Options options;
    // Every committed transaction, as record names.
    options.first_subscriber = [this](const std::vector<Record>& records) {
      std::vector<std::string> names;
      for (const Record& r : records) names.emplace_back(RecordName(r));
      absl::MutexLock lock(&mu_);
      batches_.push_back(std::move(names));
    };
    head_ = std::make_unique<TestHead>(&world_, options);
  }
  std::vector<std::vector<std::string>> Batches() {
    head_->store.WaitDelivered();
    absl::MutexLock lock(&mu_);
    return batches_;
  }
  size_t Count(std::function<size_t(const ClusterState&)> f) { return head_->store.Read(f); }

  absl::Mutex mu_;
  std::vector<std::vector<std::string>> batches_;
  World world_;
  std::unique_ptr<TestHead> head_;
};

TEST_F(JobServiceTest, SubmitRecordsTheJobWithItsGroupInOneTransaction) {
  JobRequest request = Request("job-1", 2);
  request.label_selector = {{"pool", "gpu"}};
  auto id = head_->jobs.Submit(request);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->str(), "job-1");
  std::vector<std::string> submitted;
  for (const auto& batch : Batches()) {
    if (std::find(batch.begin(), batch.end(), "JobSubmitted") != batch.end()) submitted = batch;
  }
  EXPECT_THAT(submitted, ElementsAre("GroupSubmitted", "JobSubmitted"));

  const Job job = head_->JobOf("job-1");
  EXPECT_EQ(JobStatusName(job.status), "PENDING");
  EXPECT_EQ(job.message, "Job is waiting to be scheduled.");
  EXPECT_EQ(job.request, request);
  EXPECT_EQ(job.submit_time_ms, world_.clock.WallMillis());
  const Group group = head_->GroupOf(job.group);
  EXPECT_EQ(group.name, "job:job-1");
  EXPECT_EQ(group.owner, Owner::Job(JobId("job-1")));
  ASSERT_EQ(group.bundle_request.primary.bundles.size(), 1u);
  EXPECT_EQ(group.bundle_request.primary.bundles[0].Get("CPU"), 2);
  EXPECT_EQ(group.bundle_request.primary.bundle_selectors.size(), 1u);

  // While it waits, the view says why: its group's reason, once the scheduler gave one.
  ASSERT_TRUE(head_->WaitFor(
      [&](const ClusterState& s) { return s.FindGroup(job.group)->reason != "waiting to be scheduled"; }));
  const std::string reason = head_->GroupOf(job.group).reason;
  EXPECT_FALSE(reason.empty());
  EXPECT_EQ(head_->jobs.Get("job-1")->message, "Job is waiting for resources: " + reason);
  EXPECT_EQ(head_->JobOf("job-1").message, "Job is waiting to be scheduled.");
}

TEST_F(JobServiceTest, GeneratedIdsAreRaysubmitAndSixteenCharacters) {
  JobRequest no_id = Request("");
  auto first = head_->jobs.Submit(no_id);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->str(), "raysubmit_0000000000000001");
  no_id.resources.Set("CPU", 1);
  auto second = head_->jobs.Submit(no_id);  // its group takes the next suffix
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->str(), "raysubmit_0000000000000002");
  EXPECT_EQ(head_->JobOf(second->str()).group, GroupId("pg-0000000003"));
  auto third = head_->jobs.Submit(Request(""));
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->str(), "raysubmit_0000000000000004");
  EXPECT_EQ(third->str().size(), std::string("raysubmit_").size() + 16);
  EXPECT_EQ(head_->JobOf(third->str()).request.submission_id, third->str());
}

TEST_F(JobServiceTest, ADuplicateIdIsRefusedWithKubeRaysText) {
  ASSERT_TRUE(head_->jobs.Submit(Request("job-1", 1)).ok());
  auto again = head_->jobs.Submit(Request("job-1", 1));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(again.status().message(),
            "Job with submission_id job-1 already exists. Please use a different submission_id.");
  EXPECT_EQ(Count([](const ClusterState& s) { return s.jobs().size(); }), 1u);
  EXPECT_EQ(Count([](const ClusterState& s) { return s.groups().size(); }), 1u);

  // Still refused once the first has ended.
  ASSERT_TRUE(*head_->jobs.Stop("job-1"));
  EXPECT_EQ(head_->jobs.Submit(Request("job-1")).status().code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(JobServiceTest, AnInvalidRequestRecordsNothing) {
  JobRequest bad = Request("job-1");
  bad.resources.Set("TPU", 3);
  auto id = head_->jobs.Submit(bad);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(id.status().message(),
            "entrypoint_resources: TPU request of 3 chips is not supported; use 1, 2, 4 or 8 chips, or a whole host");
  EXPECT_EQ(Count([](const ClusterState& s) { return s.jobs().size() + s.groups().size(); }), 0u);
}

TEST_F(JobServiceTest, UnknownJobsAreNotFound) {
  const std::string want = "Job nope does not exist";
  EXPECT_EQ(head_->jobs.Get("nope").status().message(), want);
  EXPECT_EQ(head_->jobs.Stop("nope").status().message(), want);
  EXPECT_EQ(head_->jobs.Delete("nope").message(), want);
  EXPECT_EQ(head_->jobs.ReadLog("nope", 0, 100).status().message(), want);
  EXPECT_EQ(head_->jobs.Get("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(head_->jobs.Delete("nope").code(), absl::StatusCode::kNotFound);
}

TEST_F(JobServiceTest, DeleteIsRefusedUntilTheJobEnded) {
  ASSERT_TRUE(head_->AddNode("n1", "10.0.0.7", 8).ok());
  ASSERT_TRUE(head_->jobs.Submit(Request("job-1", 1)).ok());
  absl::Status pending = head_->jobs.Delete("job-1");
  // It may already run: either way it is refused with its status.
  EXPECT_EQ(pending.code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(head_->WaitForJob("job-1", JobStatus::kRunning));
  absl::Status running = head_->jobs.Delete("job-1");
  EXPECT_EQ(running.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(running.message(), "Job job-1 is RUNNING; stop it before deleting it");

  ASSERT_TRUE(head_->ExitWorker("n1", "10.0.0.7", WorkerId("job-job-1"), 0).ok());
  ASSERT_TRUE(head_->WaitForJob("job-1", JobStatus::kSucceeded));
  EXPECT_TRUE(head_->jobs.Delete("job-1").ok());
  EXPECT_EQ(head_->jobs.Get("job-1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(head_->jobs.List().empty());
  EXPECT_EQ(Count([](const ClusterState& s) { return s.workers().size(); }), 0u);
}

TEST_F(JobServiceTest, DeleteOfAPendingJobIsRefused) {
  ASSERT_TRUE(head_->jobs.Submit(Request("job-1", 1)).ok());  // no node: it waits
  absl::Status s = head_->jobs.Delete("job-1");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "Job job-1 is PENDING; stop it before deleting it");
}

TEST_F(JobServiceTest, ReadLog) {
  ASSERT_TRUE(head_->jobs.Submit(Request("job-1", 1)).ok());
  // Not started yet: empty, not finished, the offset kept.
  auto before = head_->jobs.ReadLog("job-1", 7, 100);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->data, "");
  EXPECT_EQ(before->next_offset, 7);
  EXPECT_FALSE(before->finished);

  // Liveness is told before the node's record is committed, so that the scheduler's pass that the record wakes finds
  // the node placeable (see the known bug in workload_driver_test.cc).
  head_->liveness.Registered(NodeId("n1"), 1, {});
  ASSERT_TRUE(head_->AddNode("n1", "10.0.0.7", 8).ok());
  ASSERT_TRUE(head_->WaitForJob("job-1", JobStatus::kRunning));
  auto running = head_->jobs.ReadLog("job-1", 0, 100);
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_EQ(running->data, "log of job-job-1\n");  // what the fake agent holds
  EXPECT_FALSE(running->finished);

  ASSERT_TRUE(head_->ExitWorker("n1", "10.0.0.7", WorkerId("job-job-1"), 0).ok());
  ASSERT_TRUE(head_->WaitForJob("job-1", JobStatus::kSucceeded));
  EXPECT_TRUE(head_->jobs.ReadLog("job-1", 0, 100)->finished);
  // A finished job whose agent is gone reads as empty and finished.
  world_.agents.SetReachable(TargetOf("10.0.0.7"), false);
  auto gone = head_->jobs.ReadLog("job-1", 3, 100);
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(gone->data, "");
  EXPECT_EQ(gone->next_offset, 3);
  EXPECT_TRUE(gone->finished);

  // A job stopped before it started never has a log.
  ASSERT_TRUE(head_->jobs.Submit(Request("never", 64)).ok());
  ASSERT_TRUE(*head_->jobs.Stop("never"));
  auto never = head_->jobs.ReadLog("never", 0, 100);
  ASSERT_TRUE(never.ok());
  EXPECT_EQ(never->data, "");
  EXPECT_TRUE(never->finished);
}

TEST_F(JobServiceTest, StopCountAndList) {
  auto counts = head_->jobs.CountByStatus();
  EXPECT_EQ(counts, (std::map<std::string, int>{
                        {"PENDING", 0}, {"RUNNING", 0}, {"STOPPED", 0}, {"SUCCEEDED", 0}, {"FAILED", 0}}));

  ASSERT_TRUE(head_->AddNode("n1", "10.0.0.7", 8).ok());
  ASSERT_TRUE(head_->jobs.Submit(Request("a-done", 1)).ok());
  ASSERT_TRUE(head_->jobs.Submit(Request("b-running", 1)).ok());
  ASSERT_TRUE(head_->jobs.Submit(Request("c-stopped", 64)).ok());  // never fits
  ASSERT_TRUE(head_->jobs.Submit(Request("d-pending", 64)).ok());
  JobRequest unmatched = Request("e-unmatched");
  unmatched.label_selector = {{"pool", "a"}};
  ASSERT_TRUE(head_->jobs.Submit(unmatched).ok());  // no node matches: it waits
  ASSERT_TRUE(head_->WaitForJob("a-done", JobStatus::kRunning));
  ASSERT_TRUE(head_->WaitForJob("b-running", JobStatus::kRunning));
  ASSERT_TRUE(head_->ExitWorker("n1", "10.0.0.7", WorkerId("job-a-done"), 0).ok());
  ASSERT_TRUE(head_->WaitForJob("a-done", JobStatus::kSucceeded));

  auto stopped = head_->jobs.Stop("c-stopped");
  ASSERT_TRUE(stopped.ok());
  EXPECT_TRUE(*stopped);
  EXPECT_FALSE(*head_->jobs.Stop("c-stopped"));
  EXPECT_FALSE(*head_->jobs.Stop("a-done"));
  EXPECT_EQ(head_->jobs.Get("e-unmatched")->message, "Job is waiting for a node that matches its label selector.");

  counts = head_->jobs.CountByStatus();
  EXPECT_EQ(counts, (std::map<std::string, int>{
                        {"PENDING", 2}, {"RUNNING", 1}, {"STOPPED", 1}, {"SUCCEEDED", 1}, {"FAILED", 0}}));
  std::vector<std::string> ids;
  for (const JobView& v : head_->jobs.List()) ids.push_back(v.job.id.str());
  EXPECT_THAT(ids, ElementsAre("a-done", "b-running", "c-stopped", "d-pending", "e-unmatched"));
}

// ---- Packages ----

TEST_F(JobServiceTest, APackageTheHeadDoesNotHoldIsRefusedAndNothingIsRecorded) {
  JobRequest r = Request("job-pkg");
  r.working_dir = "gcs://_ray_pkg_missing.zip";
  auto id = head_->jobs.Submit(r);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(id.status().message(),
            "runtime_env.working_dir: package gcs://_ray_pkg_missing.zip is not on the head; upload it first "
            "(PUT /api/packages/gcs/_ray_pkg_missing.zip)");
  r.working_dir.clear();
  r.py_modules = {"/opt/mods", "gcs://_ray_pkg_mod.zip"};
  EXPECT_EQ(head_->jobs.Submit(r).status().message(),
            "runtime_env.py_modules[1]: package gcs://_ray_pkg_mod.zip is not on the head; upload it first "
            "(PUT /api/packages/gcs/_ray_pkg_mod.zip)");
  EXPECT_EQ(Count([](const ClusterState& s) { return s.jobs().size(); }), 0u);
}

TEST_F(JobServiceTest, AJobInAPackageIsStartedWithThePackagesForTheAgentToFetch) {
  ASSERT_TRUE(head_->AddNode("n1", "10.0.0.7", 8).ok());
  const Package wd{"_ray_pkg_wd.zip", std::string(64, 'a'), 123, 1};
  const Package mod{"_ray_pkg_mod.zip", std::string(64, 'b'), 45, 1};
  head_->store.Update([&](Txn& txn) {
    ASSERT_TRUE(txn.Apply(PackageStored{wd}).ok());
    ASSERT_TRUE(txn.Apply(PackageStored{mod}).ok());
  });
  JobRequest r = Request("job-pkg", 1);
  r.working_dir = "gcs://_ray_pkg_wd.zip";
  r.py_modules = {"gcs://_ray_pkg_mod.zip", "/opt/mods"};
  r.env_vars["PYTHONPATH"] = "/user/lib";
  ASSERT_TRUE(head_->jobs.Submit(r).ok());
  ASSERT_TRUE(head_->WaitForJob("job-pkg", JobStatus::kRunning));
  const StartSpec spec = world_.agents.Workers(TargetOf("10.0.0.7")).at(WorkerId("job-job-pkg")).spec;
  ASSERT_TRUE(spec.working_dir_package.has_value());
  EXPECT_EQ(*spec.working_dir_package, wd);
  EXPECT_EQ(spec.cwd, "");
  ASSERT_EQ(spec.py_module_packages.size(), 1u);
  EXPECT_EQ(spec.py_module_packages[0], mod);
  // Paths on the node go first on PYTHONPATH here; the agent puts the packages' directories before them.
  EXPECT_EQ(spec.env_set.at("PYTHONPATH"), "/opt/mods:/user/lib");
}

TEST_F(JobServiceTest, AJobWhosePackageIsGoneFailsWithTheReasonAndNeverStarts) {
  const Package wd{"_ray_pkg_lost.zip", std::string(64, 'a'), 123, 1};
  head_->store.Update([&](Txn& txn) { ASSERT_TRUE(txn.Apply(PackageStored{wd}).ok()); });
  JobRequest r = Request("job-lost", 1);
  r.working_dir = "gcs://_ray_pkg_lost.zip";
  ASSERT_TRUE(head_->jobs.Submit(r).ok());
  // Its file was lost (the head found the record without it), before any node could run the job.
  head_->store.Update([&](Txn& txn) { ASSERT_TRUE(txn.Apply(PackageRemoved{"_ray_pkg_lost.zip", 2}).ok()); });
  ASSERT_TRUE(head_->AddNode("n1", "10.0.0.7", 8).ok());
  ASSERT_TRUE(head_->WaitForJob("job-lost", JobStatus::kFailed));
  auto view = head_->jobs.Get("job-lost");
  ASSERT_TRUE(view.ok());
  EXPECT_NE(view->message.find("working_dir: package gcs://_ray_pkg_lost.zip is not on the head"), std::string::npos)
      << view->message;
  EXPECT_TRUE(world_.agents.Workers(TargetOf("10.0.0.7")).empty());
}

}  // namespace job_service_test
}  // namespace torus::head
