#include "torus/head/state/codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "torus/train/run_spec.h"

namespace torus::head {
namespace codec_test {

using ::testing::HasSubstr;
using ::testing::StartsWith;

ResourceSet Res(double cpu, double gpu = 0) {
  ResourceSet r;
  r.Set("CPU", cpu);
  r.Set("GPU", gpu);
  return r;
}

std::string CpuRunSpecJson(const std::string& name = "r") {
  train::RunSpec spec;
  spec.scaling.num_workers = 2;
  spec.entrypoint = {"python3", "x.py"};
  spec.run.name = name;
  spec.run.storage_path = "/tmp/x";
  return train::RunSpecToJson(spec);
}

NodeRegistered Reg(const std::string& id, uint64_t incarnation, int64_t wall_ms) {
  NodeRegistered r;
  r.info = {.node_id = id,
            .address = "10.0.0." + id,
            .hostname = "host-" + id,
            .total = Res(8, 4),
            .labels = {{"zone", "z1"}, {"torus.io/pool", "p\"1"}},
            .pid = 4242,
            .start_time_ms = wall_ms - 5,
            .agent_port = 7000};
  r.incarnation = incarnation;
  r.wall_ms = wall_ms;
  return r;
}

HeldBundle Bundle(int index, const std::string& node, std::vector<int> gpus, std::vector<int> chips = {},
                  const std::string& slice = "") {
  HeldBundle b;
  b.index = index;
  b.ledger_index = index;
  b.node = NodeId(node);
  b.ledger_group = slice.empty() ? "pg" : "pg/" + slice;
  b.attempt = (uint64_t{1} << 32) | 7;
  b.slice_name = slice;
  b.worker_id = slice.empty() ? -1 : index;
  b.gpus = std::move(gpus);
  b.chips = std::move(chips);
  b.resources = Res(1, static_cast<double>(b.gpus.size()));
  return b;
}

Group BundleGroup(const std::string& id, const std::string& name, uint64_t seq) {
  Group g;
  g.id = GroupId(id);
  g.name = name;
  g.seq = seq;
  g.bundle_request.primary.bundles = {Res(1, 1), Res(2, 0)};
  g.bundle_request.fallbacks = {{.bundles = {Res(3, 0)}}};
  g.bundle_request.strategy = sched::Strategy::kStrictSpread;
  g.request_text = R"({"bundles":[{"CPU":1,"GPU":1},{"CPU":2}]})";
  g.owner = Owner::Job(JobId("j-" + id));
  g.created_wall_ms = 100;
  g.timeout_s = 2.5;
  return g;
}

Group SliceGroup(const std::string& id, uint64_t seq) {
  Group g;
  g.id = GroupId(id);
  g.kind = PgKind::kSlices;
  g.seq = seq;
  g.slice_request.primary.generation = TpuGeneration::kV6e;
  g.slice_request.primary.topology.dims = {4, 4};
  g.slice_request.primary.num_slices = 2;
  g.slice_request.unit = sched::BundleUnit::kChip;
  g.slice_request.keep_slices = {"s1"};
  g.owner = Owner::Run(RunId("r1"));
  return g;
}

Worker MakeWorker(const std::string& id, Owner owner, const std::string& node, int rank) {
  Worker w;
  w.id = WorkerId(id);
  w.owner = std::move(owner);
  w.attempt = 1;
  w.rank = rank;
  w.node = NodeId(node);
  w.group = GroupId("pg-1");
  w.ledger_group = "pg-1";
  w.bundle = rank;
  w.gpus = {rank};
  return w;
}

// A worker with every field set (phase and exit included, as a snapshot holds them).
Worker RichWorker() {
  Worker w = MakeWorker("w-1", Owner::Run(RunId("r1")), "a", 1);
  w.chips = {4, 5};
  w.phase = WorkerPhase::kExited;
  w.pid = 99;
  w.start_wall_ms = 12;
  w.exit = WorkerExit{.exit_code = 3, .reason = "r", .wall_ms = 13};
  return w;
}

// A worker whose start is in flight, with everything its start carries.
Worker StartingWorker() {
  Worker w = MakeWorker("w-2", Owner::Job(JobId("j1")), "a", 0);
  w.launch = WorkerLaunch{.owner_tag = "job:j1",
                          .argv = {"/bin/sh", "-c", "echo ✓"},
                          .env_set = {{"A", "1"}, {"TORUS_JOB_ID", "j1"}},
                          .env_unset = {"B"},
                          .cwd = "/srv",
                          .working_dir_package = Package{"_ray_pkg_w.zip", "ab12", 10, 5},
                          .py_module_packages = {Package{"_ray_pkg_m.zip", "cd34", 20, 6}}};
  return w;
}

Job MakeJob(const std::string& id) {
  Job j;
  j.id = JobId(id);
  j.request = {.entrypoint = "python3 -c 'print(\"hi ✓\")'",
               .submission_id = id,
               .env_vars = {{"A", "1"}},
               .working_dir = "gcs://_ray_pkg_w.zip",
               .py_modules = {"gcs://_ray_pkg_m.zip", "/opt/m"},
               .metadata = {{"owner", "me"}},
               .resources = Res(1, 1),
               .label_selector = {{"zone", "z1"}},
               .runtime_env_json = R"({"pip":["x"]})"};
  j.submit_time_ms = 50;
  j.group = GroupId("pg-" + id);
  return j;
}

RunAttempt Attempt(int number, const std::string& checkpoint = "") {
  RunAttempt a;
  a.number = number;
  a.start_time_ms = 1000 * number;
  a.checkpoint_dir = checkpoint;
  for (int i = 0; i < 2; ++i) {
    a.ranks.push_back(
        {i, WorkerId(absl::StrCat("r1-a", number, "-", i)), NodeId(i == 0 ? "a" : "b"), "10.0.0.x", "", {}, {i}});
  }
  return a;
}

// One record of every type, with every field set away from its default where it has one.
std::vector<Record> OneOfEach() {
  return {
      HeadStarted{3, 1733050000000},
      Reg("a", 7, 1000),
      NodeDied{NodeId("a"), 7, "no heartbeat for 30s", 2000},
      NodeRemoved{NodeId("a"), "its slice was removed by the autoscaler", 2001},
      NodeRevoked{NodeId("a"), "host stolen", 2002},
      GroupSubmitted{BundleGroup("pg-1", "train", 4)},
      GroupPlaced{GroupId("pg-1"), 1, {Bundle(0, "a", {0, 1}), Bundle(1, "b", {})}, {}, "placed", 3000},
      GroupWaiting{GroupId("pg-1"), "no node has 4 GPU", 3100},
      GroupBundlesLost{GroupId("pg-s"), {1, 3}, {"s1"}, "host h2 died", 3200},
      GroupEnded{GroupId("pg-1"), PgState::kFailed, "timed out", 3300},
      WorkerStarting{RichWorker()},
      WorkerStarting{StartingWorker()},
      WorkerStarted{WorkerId("w-1"), 31337, 3400},
      WorkerExited{WorkerId("w-1"),
                   {.exit_code = 0, .signal = 9, .lost = true, .reason = "host gone", .wall_ms = 3500, .stopped = true,
                    .oom_killed = true, .peak_rss_bytes = 1 << 30, .output_tail = "a\nb", .accelerator_error = "E1201 x",
                    .host_loss = HostLoss::kSilent, .host_last_seen_ms = 3400}},
      JobSubmitted{MakeJob("j1")},
      JobUpdated{JobId("j1"), JobStatus::kFailed, "exited with code 2", "ENTRYPOINT_FAILED", 2, 3600},
      JobStopRequested{JobId("j1")},
      JobDeleted{JobId("j1")},
      RunSubmitted{RunId("r1"), CpuRunSpecJson(), "tok-1", GroupId("pg-r1"), {{5, "/tmp/x/r/checkpoint_5"}}, 3700},
      AttemptStarted{RunId("r1"), Attempt(2, "/tmp/x/r/checkpoint_5")},
      AttemptEnded{RunId("r1"), 2, "rank 1 exited with code 1", 3800, "exit_code", "Traceback"},
      AttemptExplained{RunId("r1"), 2, "host_lost", "host h lost", "", "failed 1 time", 3850},
      RunFinished{RunId("r1"), RunStatus::kStopped, "stopped by user", 3900},
      RunStopRequested{RunId("r1")},
      RunReported{RunId("r1"), 2, 1, 40, "{\"loss\":0.25}", "/stage/40/1", 4000},
      CheckpointCommitted{RunId("r1"), 40, "/tmp/x/r/checkpoint_40", {{5, "/a"}, {40, "/b"}}, 4050},
      PackageStored{Package{"_ray_pkg_a.zip", std::string(64, 'c'), 1234, 4100}},
      PackageRemoved{"_ray_pkg_a.zip", 4200},
      ActorRegistered{Actor{.id = ActorId("a1f0"), .name = "learner", .ns = "rl", .class_name = "Learner",
                            .methods = {"step"}, .job_id = "driver-1", .owner_address = "127.0.0.1:5000",
                            .resources = {{"TPU", 10000}}, .max_restarts = -1, .max_task_retries = 2,
                            .create_time_ms = 4300}},
      ActorUpdated{ActorId("a1f0"), ActorState::kDead, NodeId("a"), 4321, "", 2, "its owner is gone", 4400},
      ServiceDeployed{"echo", train::ServiceSpecToJson(*train::ParseServiceSpec("name: echo\nentrypoint: x\n")), 1,
                      4500},
      ServiceDeleted{"echo", 4600},
  };
}

// Equal text after a round trip would miss a field the codec drops both ways: where the model compares, compare.
void ExpectSamePayload(const Record& original, const Record& decoded) {
  std::visit(
      [&](const auto& r) {
        using T = std::decay_t<decltype(r)>;
        const T& d = std::get<T>(decoded);
        if constexpr (std::is_same_v<T, NodeRegistered>) {
          EXPECT_EQ(d.info, r.info);
        } else if constexpr (std::is_same_v<T, GroupSubmitted>) {
          EXPECT_EQ(d.group.id, r.group.id);
          EXPECT_EQ(d.group.name, r.group.name);
          EXPECT_EQ(d.group.kind, r.group.kind);
          EXPECT_EQ(d.group.owner, r.group.owner);
          EXPECT_EQ(d.group.seq, r.group.seq);
          EXPECT_EQ(d.group.request_text, r.group.request_text);
          EXPECT_EQ(d.group.timeout_s, r.group.timeout_s);
          EXPECT_EQ(d.group.bundle_request.strategy, r.group.bundle_request.strategy);
          EXPECT_EQ(d.group.bundle_request.primary.bundles, r.group.bundle_request.primary.bundles);
          EXPECT_EQ(d.group.slice_request.primary.generation, r.group.slice_request.primary.generation);
          EXPECT_EQ(d.group.slice_request.primary.topology.dims, r.group.slice_request.primary.topology.dims);
          EXPECT_EQ(d.group.slice_request.unit, r.group.slice_request.unit);
          EXPECT_EQ(d.group.slice_request.keep_slices, r.group.slice_request.keep_slices);
        } else if constexpr (std::is_same_v<T, GroupPlaced>) {
          EXPECT_EQ(d.bundles, r.bundles);
        } else if constexpr (std::is_same_v<T, WorkerStarting>) {
          EXPECT_EQ(d.worker, r.worker);
        } else if constexpr (std::is_same_v<T, WorkerExited>) {
          EXPECT_EQ(d.exit, r.exit);
        } else if constexpr (std::is_same_v<T, JobSubmitted>) {
          EXPECT_EQ(d.job, r.job);
        } else if constexpr (std::is_same_v<T, JobUpdated>) {
          EXPECT_EQ(d.exit_code, r.exit_code);
        } else if constexpr (std::is_same_v<T, AttemptStarted>) {
          EXPECT_EQ(d.attempt, r.attempt);
        } else if constexpr (std::is_same_v<T, RunReported>) {
          EXPECT_EQ(d.metrics_json, r.metrics_json);
        } else if constexpr (std::is_same_v<T, ActorRegistered>) {
          EXPECT_EQ(d.actor, r.actor);
        } else if constexpr (std::is_same_v<T, NodeRemoved>) {
          EXPECT_EQ(d.node, r.node);
          EXPECT_EQ(d.reason, r.reason);
        } else if constexpr (std::is_same_v<T, NodeRevoked>) {
          EXPECT_EQ(d.node, r.node);
          EXPECT_EQ(d.reason, r.reason);
        } else if constexpr (std::is_same_v<T, RunSubmitted>) {
          EXPECT_EQ(d.service, r.service);
          EXPECT_EQ(d.service_version, r.service_version);
        } else if constexpr (std::is_same_v<T, ServiceDeployed>) {
          EXPECT_EQ(d.spec_json, r.spec_json);
          EXPECT_EQ(d.version, r.version);
        }
      },
      original);
}

TEST(StateCodecTest, EveryRecordTypeRoundTrips) {
  std::vector<Record> records = OneOfEach();
  records.push_back(GroupSubmitted{SliceGroup("pg-s", 9)});
  records.push_back(RunSubmitted{RunId("r2"), CpuRunSpecJson(), "tok-2", GroupId("pg-r2"), {}, 3701, "echo", 3});
  records.push_back(WorkerExited{WorkerId("w-2"), {.start_failed = true, .reason = "no such file", .wall_ms = 1}});
  // Optional fields absent, too.
  records.push_back(RunReported{RunId("r1"), 2, 0, 41, std::nullopt, "", 4100});
  records.push_back(JobUpdated{.job = JobId("j1"), .status = JobStatus::kRunning, .wall_ms = 4200});
  records.push_back(WorkerStarting{MakeWorker("w-3", Owner(), "a", 0)});
  std::set<size_t> kinds;
  for (const Record& record : records) {
    const std::string text = StateCodec::EncodeRecord(record);
    SCOPED_TRACE(text);
    EXPECT_EQ(nlohmann::json::parse(text).at("type"), std::string(RecordName(record)));
    auto decoded = StateCodec::DecodeRecord(text);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->index(), record.index());
    EXPECT_EQ(StateCodec::EncodeRecord(*decoded), text);
    ExpectSamePayload(record, *decoded);
    kinds.insert(record.index());
  }
  EXPECT_EQ(kinds.size(), std::variant_size_v<Record>);
}

TEST(StateCodecTest, EncodingIsTheDocumentedJsonWithSortedKeys) {
  const Record r = GroupEnded{GroupId("pg-4k1x0q9z2a"), PgState::kRemoved, "removed", 1733050000000};
  const std::string text = StateCodec::EncodeRecord(r);
  EXPECT_EQ(text, R"({"group":"pg-4k1x0q9z2a","message":"removed","state":"REMOVED","type":"GroupEnded",)"
                  R"("wall_ms":1733050000000})");
  // The header's example, keys in another order, reads back to the same record.
  auto decoded = StateCodec::DecodeRecord(
      R"({"type":"GroupEnded","group":"pg-4k1x0q9z2a","state":"REMOVED","message":"removed","wall_ms":1733050000000})");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_TRUE(std::holds_alternative<GroupEnded>(*decoded));
  const auto& ended = std::get<GroupEnded>(*decoded);
  EXPECT_EQ(ended.group, GroupId("pg-4k1x0q9z2a"));
  EXPECT_EQ(ended.state, PgState::kRemoved);
  EXPECT_EQ(ended.message, "removed");
  EXPECT_EQ(ended.wall_ms, 1733050000000);
}

TEST(StateCodecTest, DecodeErrorsNameTheRecordAndTheProblem) {
  struct Case {
    std::string text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", "record: not a JSON object"},
      {"{\"type\":", "record: not a JSON object"},
      {"[1, 2]", "record: not a JSON object"},
      {"\"GroupEnded\"", "record: not a JSON object"},
      {"{}", "record: no \"type\""},
      {"{\"type\": 3}", "record: no \"type\""},
      {"{\"type\": \"Nope\"}", "record: unknown type \"Nope\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto decoded = StateCodec::DecodeRecord(c.text);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(decoded.status().message(), c.message);
  }
  for (const std::string text : {R"({"type":"GroupEnded","group":5,"state":"REMOVED"})",
                                 R"({"type":"GroupEnded","group":"pg-1","wall_ms":"soon"})",
                                 R"({"type":"GroupEnded","group":"pg-1","message":["x"]})"}) {
    SCOPED_TRACE(text);
    auto decoded = StateCodec::DecodeRecord(text);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(decoded.status().message()), StartsWith("record GroupEnded: "));
  }
}

// codec.h promises InvalidArgument "naming the record type and the problem (unknown type, missing or mistyped
// field)" and that decoding "names the record and field that do not fit".
// A missing field, a mistyped one and an unknown enum name are errors that name the field.
TEST(StateCodecTest, MissingAndMistypedFieldsAreNamed) {
  struct Case {
    std::string type;
    std::string text;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"GroupEnded", R"({"type":"GroupEnded","state":"REMOVED","message":"removed","wall_ms":1})", "group"},
      {"JobUpdated", R"({"type":"JobUpdated","job":"j1","message":"","error_type":"","exit_code":null,"wall_ms":1})",
       "status"},
      {"GroupEnded", R"({"type":"GroupEnded","group":5,"state":"REMOVED","message":"removed","wall_ms":1})", "group"},
      // An unknown enum name decodes as the enum's first value (PENDING).
      {"JobUpdated",
       R"({"type":"JobUpdated","job":"j1","status":"DONE","message":"","error_type":"","exit_code":null,"wall_ms":1})",
       "status"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto decoded = StateCodec::DecodeRecord(c.text);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(decoded.status().message()), StartsWith("record " + c.type + ": "));
    EXPECT_THAT(std::string(decoded.status().message()), HasSubstr(c.field));
  }
}

// JSON text is UTF-8: a record with other bytes has no exact text, and is written with U+FFFD for each bad byte
// (StateStore then applies it as written; state_store_test checks that a replay finds the same job).
TEST(StateCodecTest, AJobRecordedBeforePyModulesDecodesWithNone) {
  nlohmann::json j = nlohmann::json::parse(StateCodec::EncodeRecord(JobSubmitted{MakeJob("old")}));
  j["job"]["request"].erase("py_modules");
  auto record = StateCodec::DecodeRecord(j.dump());
  ASSERT_TRUE(record.ok()) << record.status();
  const Job& job = std::get<JobSubmitted>(*record).job;
  EXPECT_TRUE(job.request.py_modules.empty());
  EXPECT_EQ(job.request.working_dir, "gcs://_ray_pkg_w.zip");
}

TEST(StateCodecTest, TextThatIsNotUtf8IsWrittenWithReplacementCharacters) {
  Job job = MakeJob("j\xff");
  job.message = "bad \xfe byte";
  EXPECT_FALSE(StateCodec::EncodeRecordExact(JobSubmitted{job}).has_value());
  auto decoded = StateCodec::DecodeRecord(StateCodec::EncodeRecord(JobSubmitted{job}));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(std::get<JobSubmitted>(*decoded).job.id.str(), "j\xEF\xBF\xBD");
  EXPECT_EQ(std::get<JobSubmitted>(*decoded).job.message, "bad \xEF\xBF\xBD byte");
  Job valid = MakeJob("j-\xC3\xA9");  // UTF-8 passes through as it is
  EXPECT_EQ(StateCodec::EncodeRecordExact(JobSubmitted{valid}), StateCodec::EncodeRecord(JobSubmitted{valid}));
}

// A long, valid history touching every record type: nodes come and go, groups are placed, lose bundles and end,
// jobs and runs go through their lives.
std::vector<Record> MixedHistory() {
  std::vector<Record> out;
  int64_t t = 1'000;
  uint64_t incarnation = 0;
  out.push_back(HeadStarted{1, t});
  for (int i = 0; i < 12; ++i) out.push_back(Reg(absl::StrCat("n", i), ++incarnation, ++t));
  for (int i = 0; i < 12; ++i) {
    const std::string pg = absl::StrCat("pg-", i);
    const std::string job = absl::StrCat("j", i);
    const std::string node = absl::StrCat("n", i);
    const std::string next = absl::StrCat("n", (i + 1) % 12);
    Group g = BundleGroup(pg, absl::StrCat("name-", i % 4), static_cast<uint64_t>(i + 1));
    if (i >= 4) g.name.clear();  // the named ones stay live below
    out.push_back(GroupSubmitted{g});
    out.push_back(GroupWaiting{GroupId(pg), "no node fits", ++t});
    out.push_back(GroupWaiting{GroupId(pg), "no node fits", ++t});
    out.push_back(GroupPlaced{GroupId(pg), i % 2, {Bundle(0, node, {i % 4}), Bundle(1, next, {})}, {}, "placed", ++t});
    out.push_back(JobSubmitted{MakeJob(job)});
    out.push_back(WorkerStarting{MakeWorker("w-" + job, Owner::Job(JobId(job)), node, 0)});
    out.push_back(WorkerStarted{WorkerId("w-" + job), 100 + i, ++t});
    out.push_back(JobUpdated{JobId(job), JobStatus::kRunning, "running", "", std::nullopt, ++t});
    if (i % 3 == 0) out.push_back(JobStopRequested{JobId(job)});
    if (i % 2 == 0) {
      out.push_back(WorkerExited{WorkerId("w-" + job), {.exit_code = i % 4, .wall_ms = ++t}});
      out.push_back(
          JobUpdated{JobId(job), i % 4 == 0 ? JobStatus::kSucceeded : JobStatus::kFailed, "ended", "", i % 4, ++t});
    }
    if (i % 4 == 0) out.push_back(JobDeleted{JobId(job)});
  }
  // Node n3 dies: its workers are lost and the groups on it lose their bundles.
  out.push_back(NodeDied{NodeId("n3"), 4, "no heartbeat", ++t});
  out.push_back(WorkerExited{WorkerId("w-j3"), {.lost = true, .reason = "node n3 died", .wall_ms = t}});
  out.push_back(GroupBundlesLost{GroupId("pg-2"), {1}, {}, "node n3 died", t});
  out.push_back(GroupBundlesLost{GroupId("pg-3"), {0}, {}, "node n3 died", t});
  out.push_back(GroupEnded{GroupId("pg-5"), PgState::kRemoved, "removed", ++t});
  out.push_back(GroupEnded{GroupId("pg-6"), PgState::kFailed, "timed out", ++t});
  out.push_back(Reg("n3", ++incarnation, ++t));
  // A slice group.
  out.push_back(GroupSubmitted{SliceGroup("pg-s", 20)});
  out.push_back(GroupPlaced{GroupId("pg-s"),
                            0,
                            {Bundle(0, "n8", {}, {0, 1}, "s1"), Bundle(1, "n9", {}, {0, 1}, "s1"),
                             Bundle(2, "n10", {}, {2, 3}, "s2"), Bundle(3, "n11", {}, {2, 3}, "s2")},
                            {"s1", "s2"},
                            "placed",
                            ++t});
  out.push_back(GroupBundlesLost{GroupId("pg-s"), {}, {"s2"}, "slice s2 is degraded", ++t});
  // Two runs of one name: one succeeds after a restart, one is stopped.
  for (const std::string run : {"r1", "r2"}) {
    out.push_back(RunSubmitted{RunId(run), CpuRunSpecJson(), "tok-" + run, GroupId("pg-" + run), {}, ++t});
    out.push_back(RunStopRequested{RunId(run)});
    out.push_back(AttemptStarted{RunId(run), Attempt(1)});
    out.push_back(WorkerStarting{MakeWorker(run + "-a1-0", Owner::Run(RunId(run)), "n0", 0)});
    out.push_back(RunReported{RunId(run), 1, 0, 1, "{\"loss\":1}", "", ++t});
    out.push_back(RunReported{RunId(run), 1, 1, 1, std::nullopt, "", ++t});
    out.push_back(RunReported{RunId(run), 1, 0, 2, "{\"loss\":0.5}", "/stage/2/0", ++t});
    out.push_back(RunReported{RunId(run), 1, 1, 2, std::nullopt, "/stage/2/1", ++t});
    out.push_back(CheckpointCommitted{RunId(run), 2, "/tmp/x/r/checkpoint_2", {{2, "/tmp/x/r/checkpoint_2"}}});
    out.push_back(RunReported{RunId(run), 1, 0, 3, "{\"loss\":0.4}", "/stage/3/0", ++t});
    out.push_back(AttemptEnded{RunId(run), 1, "rank 1 exited with code 1", ++t});
    out.push_back(AttemptStarted{RunId(run), Attempt(2, "/tmp/x/r/checkpoint_2")});
    out.push_back(RunReported{RunId(run), 2, 1, 4, std::nullopt, "", ++t});
  }
  out.push_back(RunFinished{RunId("r1"), RunStatus::kSucceeded, "all ranks exited 0", ++t});
  out.push_back(RunFinished{RunId("r2"), RunStatus::kStopped, "stopped by user", ++t});
  // Actors: one named and alive, one restarted then dead (its name free again), one pending.
  for (const std::string id : {"ac1", "ac2", "ac3"}) {
    out.push_back(ActorRegistered{Actor{.id = ActorId(id), .name = id == "ac3" ? "" : "learner", .ns = "rl",
                                        .class_name = "Learner", .owner_address = "127.0.0.1:5000",
                                        .create_time_ms = ++t}});
    if (id == "ac3") break;
    out.push_back(ActorUpdated{ActorId(id), ActorState::kAlive, NodeId("n1"), 77, "127.0.0.1:6000", 0, "", ++t});
    if (id == "ac1") {
      out.push_back(ActorUpdated{ActorId(id), ActorState::kRestarting, {}, 0, "", 1, "", ++t});
      out.push_back(ActorUpdated{ActorId(id), ActorState::kDead, {}, 0, "", 1, "killed", ++t});
    }
  }
  // Services: one updated, one deleted, and a replica (a run of a service).
  auto spec = [](const std::string& text) { return train::ServiceSpecToJson(*train::ParseServiceSpec(text)); };
  out.push_back(ServiceDeployed{"web", spec("name: web\nentrypoint: a\n"), 1, ++t});
  out.push_back(ServiceDeployed{"web", spec("name: web\nentrypoint: b\nnum_replicas: 2\n"), 2, ++t});
  out.push_back(ServiceDeployed{"gone", spec("name: gone\nentrypoint: a\n"), 1, ++t});
  out.push_back(ServiceDeleted{"gone", ++t});
  out.push_back(GroupSubmitted{BundleGroup("pg-web", "run:run-web", 1)});
  out.push_back(RunSubmitted{RunId("run-web"), CpuRunSpecJson(), "tok", GroupId("pg-web"), {}, ++t, "web", 2});
  out.push_back(NodeRevoked{NodeId("n-stolen"), "host stolen", ++t});
  return out;
}

TEST(StateCodecTest, ReplayingEncodedRecordsRebuildsTheLiveState) {
  ClusterState live;
  std::vector<std::string> journal;
  for (const Record& record : MixedHistory()) {
    const absl::Status applied = live.Apply(record);
    ASSERT_TRUE(applied.ok()) << applied << " " << StateCodec::EncodeRecord(record);
    journal.push_back(StateCodec::EncodeRecord(record));
  }
  ASSERT_GT(journal.size(), 150u);
  ClusterState replayed;
  for (const std::string& text : journal) {
    auto record = StateCodec::DecodeRecord(text);
    ASSERT_TRUE(record.ok()) << record.status() << " " << text;
    ASSERT_TRUE(replayed.Apply(*record).ok()) << text;
  }
  EXPECT_EQ(StateCodec::EncodeState(replayed), StateCodec::EncodeState(live));
  EXPECT_EQ(replayed.alive_nodes(), live.alive_nodes());
  EXPECT_EQ(replayed.epoch(), 1u);
  EXPECT_EQ(replayed.last_incarnation(), 13u);
}

TEST(StateCodecTest, SnapshotRoundTripsAndKeepsApplyingTheSame) {
  const std::vector<Record> history = MixedHistory();
  ClusterState live;
  for (const Record& record : history) ASSERT_TRUE(live.Apply(record).ok()) << RecordName(record);
  const std::string snapshot = StateCodec::EncodeState(live);
  auto restored = StateCodec::DecodeState(snapshot);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(StateCodec::EncodeState(*restored), snapshot);
  EXPECT_EQ(restored->alive_nodes(), live.alive_nodes());
  EXPECT_EQ(restored->alive_nodes(), 12u);
  EXPECT_EQ(restored->next_group_seq(), live.next_group_seq());
  EXPECT_EQ(restored->FindGroup("name-1"), restored->FindGroup(GroupId("pg-1")));
  EXPECT_TRUE(restored->IsRevoked(NodeId("n-stolen")));
  EXPECT_EQ(restored->revoked_nodes().at(NodeId("n-stolen")).reason, "host stolen");
  ASSERT_NE(restored->FindRun("r"), nullptr);
  EXPECT_EQ(restored->FindRun("r")->plan.num_workers, 2);

  // Records after the snapshot apply (or are refused) the same on both: the derived members (alive count, live
  // names, seq) were restored too.
  const std::vector<Record> more = {
      HeadStarted{2, 90'000},
      NodeDied{NodeId("n0"), 1, "gone", 90'001},
      GroupSubmitted{BundleGroup("pg-dup", "name-2", 3)},  // refused: name-2 is live
      GroupEnded{GroupId("pg-2"), PgState::kRemoved, "removed", 90'002},
      GroupSubmitted{BundleGroup("pg-new", "name-2", 0)},
      GroupWaiting{GroupId("pg-new"), "no node fits", 90'003},
      WorkerExited{WorkerId("w-j1"), {.signal = 15, .wall_ms = 90'004}},
      JobUpdated{JobId("j1"), JobStatus::kStopped, "stopped", "", std::nullopt, 90'005},
      JobUpdated{JobId("j2"), JobStatus::kRunning, "", "", std::nullopt, 90'006},  // refused: j2 ended
      Reg("n0", 50, 90'007),
  };
  for (const Record& record : more) {
    SCOPED_TRACE(StateCodec::EncodeRecord(record));
    const absl::Status a = live.Apply(record);
    const absl::Status b = restored->Apply(record);
    EXPECT_EQ(a, b);
  }
  EXPECT_EQ(StateCodec::EncodeState(*restored), StateCodec::EncodeState(live));
  EXPECT_EQ(restored->alive_nodes(), live.alive_nodes());
  EXPECT_EQ(restored->next_group_seq(), 21u);
  EXPECT_EQ(restored->FindGroup("name-2"), restored->FindGroup(GroupId("pg-new")));
}

TEST(StateCodecTest, DecodeStateErrors) {
  EXPECT_EQ(StateCodec::DecodeState("nope").status().message(), "snapshot: not a JSON object");
  auto format = StateCodec::DecodeState(R"({"format":1})");
  EXPECT_EQ(format.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(format.status().message(), "snapshot: format 1 is not 2");
  auto bad_line = StateCodec::DecodeState(
      "{\"format\":2,\"epoch\":1,\"next_group_seq\":1,\"last_incarnation\":0}\n{\"job\":{\"id\":5}}\n");
  EXPECT_EQ(bad_line.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_line.status().message()), StartsWith("snapshot: line 2: job: id: "));
  auto missing = StateCodec::DecodeState(R"({"format":2,"epoch":1})");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(missing.status().message()), StartsWith("snapshot: "));
}

}  // namespace codec_test
}  // namespace torus::head

namespace torus::head {
namespace codec_test {

// Journals written before a worker's exit carried its cause, and before attempts had causes and report times.
TEST(StateCodecTest, RecordsWithoutTheLaterFieldsDecodeWithDefaults) {
  auto exited = StateCodec::DecodeRecord(
      R"({"type":"WorkerExited","worker":"w-1","exit":{"exit_code":3,"signal":0,"lost":false,"start_failed":false,)"
      R"("reason":"","wall_ms":5}})");
  ASSERT_TRUE(exited.ok()) << exited.status();
  const WorkerExit& exit = std::get<WorkerExited>(*exited).exit;
  EXPECT_EQ(exit.exit_code, 3);
  EXPECT_FALSE(exit.stopped);
  EXPECT_EQ(exit.output_tail, "");
  EXPECT_EQ(exit.host_loss, HostLoss::kNone);

  auto ended = StateCodec::DecodeRecord(R"({"type":"AttemptEnded","run":"r1","number":1,"reason":"x","wall_ms":7})");
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(std::get<AttemptEnded>(*ended).cause, "");

  auto committed = StateCodec::DecodeRecord(
      R"({"type":"CheckpointCommitted","run":"r1","step":2,"dir":"/c","committed":[[2,"/c"]]})");
  ASSERT_TRUE(committed.ok()) << committed.status();
  EXPECT_EQ(std::get<CheckpointCommitted>(*committed).wall_ms, 0);

  // An actor registered before handles learned its max_task_retries.
  auto actor = StateCodec::DecodeRecord(
      R"({"type":"ActorRegistered","actor":{"id":"a1","name":"","ns":"n","class_name":"C","methods":[],)"
      R"("job_id":"driver-1","owner_address":"h:1","state":"PENDING_CREATION","node":"","pid":0,)"
      R"("worker_address":"","resources":{},"restarts":0,"max_restarts":1,"death_cause":"",)"
      R"("create_time_ms":1,"start_time_ms":0,"end_time_ms":0}})");
  ASSERT_TRUE(actor.ok()) << actor.status();
  EXPECT_EQ(std::get<ActorRegistered>(*actor).actor.max_restarts, 1);
  EXPECT_EQ(std::get<ActorRegistered>(*actor).actor.max_task_retries, 0);

  // A worker's start recorded before launches were kept.
  auto starting = StateCodec::DecodeRecord(
      R"({"type":"WorkerStarting","worker":{"id":"w-1","owner":{"kind":"job","id":"j1"},"attempt":0,"rank":0,)"
      R"("node":"a","group":"","ledger_group":"","bundle":-1,"chips":[],"gpus":[],"phase":"STARTING","pid":0,)"
      R"("start_wall_ms":0,"exit":null}})");
  ASSERT_TRUE(starting.ok()) << starting.status();
  EXPECT_EQ(std::get<WorkerStarting>(*starting).worker.launch, std::nullopt);

  // A field that is there must still be of its type.
  auto bad = StateCodec::DecodeRecord(
      R"({"type":"AttemptEnded","run":"r1","number":1,"reason":"x","wall_ms":7,"cause":5})");
  EXPECT_FALSE(bad.ok());
}

}  // namespace codec_test
}  // namespace torus::head
