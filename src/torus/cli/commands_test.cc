// The `torus` subcommands (commands.h) as far as they go without a head: their checks of flags and files, with the
// exact message and exit code, and the commands that only read and change a session directory. Each test runs in a
// TORUS_TEMP_DIR of its own, with none of the TORUS_* variables that point at a head.
#include "torus/cli/commands.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <thread>

#include "torus/cli/daemons.h"
#include "torus/cli/session_dir.h"
#include "torus/cli/test_util.h"

namespace torus::cli {
namespace commands_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test_util::Child;
using test_util::ScopedEnv;
using test_util::TempDir;
using test_util::WriteFile;

struct Output {
  int code;
  std::string out;
  std::string err;
};

Output Invoke(const std::function<int()>& command) {
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const int code = command();
  std::string out = testing::internal::GetCapturedStdout();
  return {code, out, testing::internal::GetCapturedStderr()};
}

// A temp root of its own (TORUS_TEMP_DIR) and nothing in the environment that names a head.
class CommandsTest : public testing::Test {
 protected:
  const std::string& root() const { return root_.path(); }
  // A session under root() that session_latest points at.
  std::string NewSession() {
    auto session = CreateSession(root());
    EXPECT_TRUE(session.ok()) << session.status();
    return session.value_or("");
  }
  // The "no session" part of the messages that resolve a head from the latest session.
  std::string NoSession() const {
    return "no torus session under " + root() + " (No such file or directory)";
  }
  // A running process named `name` (a torus process when it starts with "torus"), stopped at the end of the test.
  pid_t Running(const std::string& name) {
    children_.push_back(std::make_unique<Child>(
        std::vector<std::string>{test_util::SleepBinaryNamed(bin_.path(), name), "30"}));
    const pid_t pid = children_.back()->pid();
    for (int i = 0; i < 250 && test_util::ReadFile("/proc/" + std::to_string(pid) + "/comm") != name + "\n"; ++i) {
      std::this_thread::sleep_for(20ms);
    }
    return pid;
  }

 private:
  TempDir root_;
  TempDir bin_;
  ScopedEnv temp_{"TORUS_TEMP_DIR", root_.path()};
  ScopedEnv token_{"TORUS_TOKEN", std::nullopt};
  ScopedEnv address_{"TORUS_ADDRESS", std::nullopt};
  ScopedEnv dashboard_{"TORUS_DASHBOARD_ADDRESS", std::nullopt};
  ScopedEnv ca_{"TORUS_TLS_CA", std::nullopt};
  std::vector<std::unique_ptr<Child>> children_;
};

// --- torus job submit (cmd_jobs.cc) ---

TEST_F(CommandsTest, JobSubmitChecksItsFlagsBeforeLookingForAHead) {
  struct Case {
    JobSubmitFlags flags;
    std::string err;
  };
  for (const Case& c : std::vector<Case>{
           {{}, "torus job submit: give the command after --\n"},
           {{.command = {"true"}, .env = {"A=1", "B"}}, "torus job submit: --env \"B\": expected KEY=VALUE\n"},
           {{.command = {"true"}, .resources = "[1]"},
            "torus job submit: --resources: must be a JSON object, e.g. '{\"CPU\": 1}'\n"},
           {{.command = {"true"}, .resources = "{"},
            "torus job submit: --resources: must be a JSON object, e.g. '{\"CPU\": 1}'\n"},
           {{.command = {"true"}, .resources = R"({"CPU": "1"})"},
            "torus job submit: --resources: \"CPU\" must be a number, e.g. '{\"CPU\": 1}'\n"},
       }) {
    Output o = Invoke([&] { return CmdJobSubmit({}, c.flags); });
    EXPECT_EQ(o.code, 2) << c.err;
    EXPECT_EQ(o.err, c.err);
    EXPECT_EQ(o.out, "");
  }
}

TEST_F(CommandsTest, JobSubmitWithGoodFlagsAndNoHeadSaysHowToFindOne) {
  Output o = Invoke([&] {
    return CmdJobSubmit({}, {.command = {"python", "x.py"}, .resources = R"({"CPU": 1})", .env = {"A=1"}});
  });
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "torus job submit: cannot find the head's HTTP address: no --dashboard-address or "
                   "TORUS_DASHBOARD_ADDRESS and " + NoSession() + "\n");
}

// --- torus train (cmd_train.cc) ---

TEST_F(CommandsTest, TrainChecksItsFlagsBeforeLookingForAHead) {
  struct Case {
    TrainFlags flags;
    std::string err;
  };
  for (const Case& c : std::vector<Case>{
           {{}, "torus train: give the command after --\n"},
           {{.command = {"x"}, .resources_per_worker = "[]"},
            "torus train: --resources-per-worker: must be a JSON object, e.g. '{\"TPU\": 1}'\n"},
           {{.command = {"x"}, .resources_per_worker = R"({"TPU": true})"},
            "torus train: --resources-per-worker: \"TPU\" must be a non-negative number\n"},
           {{.command = {"x"}, .fallbacks = {"TPU-V6E"}},
            "torus train: --fallback \"TPU-V6E\": expected ACCELERATOR_TYPE:TOPOLOGY[:NUM_SLICES], e.g. "
            "TPU-V5LITEPOD:4x4:2\n"},
           {{.command = {"x"}, .resources_per_worker = R"({"TPU": -1})"}, "torus train: --resources-per-worker: \"TPU\": resource amount -1 is negative\n"},
           {{.command = {"x"}, .resources_per_worker = R"({"bad name": 1})"}, "torus train: --resources-per-worker: resource name \"bad name\" is invalid: it contains ' '; a resource "
            "name is 1-128 characters of letters, digits, '_', '-', '.', '/' or ':', starting with a letter or '_'\n"},
           {{.command = {"x"}, .label_selector = "[1]"}, "torus train: --label-selector: must be an object of label key to expression, e.g. "
            "{\"torus.io/market-type\": \"spot\"}\n"},
           {{.command = {"x"}, .env = {"=1"}}, "torus train: --env \"=1\": expected KEY=VALUE\n"},
       }) {
    Output o = Invoke([&] { return CmdTrain({}, c.flags); });
    EXPECT_EQ(o.code, 2) << c.err;
    EXPECT_EQ(o.err, c.err);
  }
}

TEST_F(CommandsTest, TrainWithGoodFlagsAndNoHeadSaysHowToFindOne) {
  Output o = Invoke([&] {
    return CmdTrain({}, {.command = {"python", "t.py"},
                         .accelerator_type = "TPU-V6E",
                         .topology = "4x4",
                         .resources_per_worker = R"({"TPU": 4, "CPU": 0.5})",
                         .label_selector = R"({"zone": "a"})",
                         .fallbacks = {"TPU-V5LITEPOD:2x4:2"}});
  });
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "torus train: cannot find the head's HTTP address: no --dashboard-address or "
                   "TORUS_DASHBOARD_ADDRESS and " + NoSession() + "\n");
}

// --- torus pg create, torus slice reserve (cmd_pg.cc) ---

TEST_F(CommandsTest, PgCreateChecksItsFlagsBeforeLookingForAHead) {
  struct Case {
    PgCreateFlags flags;
    std::string err;
  };
  for (const Case& c : std::vector<Case>{
           {{.bundles = "[]"}, "torus pg create: --bundles: must be a non-empty JSON list of bundles, e.g. '[{\"CPU\": 1}, {\"CPU\": 1, "
            "\"TPU\": 4}]'\n"},
           {{.bundles = R"([{"CPU": 1}, {"CPU": 1}])", .bundle_label_selector = R"([{"a": "b"}])"},
            "torus pg create: --bundle-label-selector: has 1 selectors for 2 bundles; give one per bundle, or one "
            "object for all\n"},
           {{.bundles = R"([{"CPU": 1}])", .fallbacks = {R"({"bundle": []})"}}, "torus pg create: --fallback: must be an object with \"bundles\" (and optionally "
            "\"bundle_label_selector\")\n"},
       }) {
    Output o = Invoke([&] { return CmdPgCreate({}, c.flags); });
    EXPECT_EQ(o.code, 2) << c.err;
    EXPECT_EQ(o.err, c.err);
  }
}

TEST_F(CommandsTest, PgCreateWithGoodFlagsAndNoHeadSaysHowToFindOne) {
  Output o = Invoke([&] { return CmdPgCreate({}, {.bundles = R"([{"CPU": 1}])"}); });
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "torus pg create: cannot find a running head: no --address/TORUS_ADDRESS and " + NoSession() +
                       "; start one with `torus start --head` or `torus up SPEC.yaml`\n");
}

TEST_F(CommandsTest, SliceReserveChecksItsFlagsBeforeLookingForAHead) {
  struct Case {
    SliceReserveFlags flags;
    std::string err;
  };
  const SliceReserveFlags base{.accelerator_type = "TPU-V6E", .topology = "4x4"};
  std::vector<Case> cases;
  cases.push_back({base, ""});
  cases.back().flags.label_selector = "[]";
  cases.back().err = "torus slice reserve: --label-selector: must be an object of label key to expression, e.g. "
                     "{\"torus.io/market-type\": \"spot\"}\n";
  cases.push_back({base, "torus slice reserve: --fallback \"TPU-V6E:4x4:0\": expected ACCELERATOR_TYPE:TOPOLOGY[:NUM_SLICES], "
                     "e.g. TPU-V5LITEPOD:4x4:2\n"});
  cases.back().flags.fallbacks = {"TPU-V6E:4x4:0"};
  cases.push_back({base, "torus slice reserve: --resources-per-bundle[0]: \"CPU\" must be a number\n"});
  cases.back().flags.resources_per_bundle = R"({"CPU": "x"})";
  for (const Case& c : cases) {
    Output o = Invoke([&] { return CmdSliceReserve({}, c.flags); });
    EXPECT_EQ(o.code, 2) << c.err;
    EXPECT_EQ(o.err, c.err);
  }
}

// --- torus start | stop (cmd_start.cc) ---

TEST_F(CommandsTest, StartNeedsHeadOrAddressButNotBoth) {
  for (const StartFlags& flags : {StartFlags{}, StartFlags{.head = true, .address = "h:1"}}) {
    Output o = Invoke([&] { return CmdStart(flags); });
    EXPECT_EQ(o.code, 2);
    EXPECT_EQ(o.err, "torus start: give either --head (start a cluster) or --address HOST:PORT (join one)\n");
  }
  EXPECT_TRUE(fs::is_empty(root()));  // nothing was created
}

TEST_F(CommandsTest, StartChecksTheAgentFlagsBeforeAnythingStarts) {
  TempDir dir;
  const std::string missing = dir.path() + "/labels.yaml";
  struct Case {
    AgentFlags agent;
    std::string err;
  };
  for (const Case& c : std::vector<Case>{
           {{.labels = "novalue"}, "torus start: --labels: invalid --labels item \"novalue\": expected key=value\n"},
           {{.labels_file = missing}, "torus start: --labels-file: cannot read " + missing + "\n"},
           {{.resources = "{"}, "torus start: --resources: invalid JSON: parse error at line 1, column 2: syntax error while "
            "parsing object key - unexpected end of input; expected string literal\n"},
           {{.memory = "16Q"}, "torus start: --memory: \"16Q\" is not a byte size; use an integer with an optional Ki, Mi, Gi, "
            "Ti, K, M, G or T suffix, e.g. 16Gi\n"},
           {{.object_store_memory = "-1"}, "torus start: --object-store-memory: \"-1\" is not a byte size; use an integer with an optional "
            "Ki, Mi, Gi, Ti, K, M, G or T suffix, e.g. 16Gi\n"},
       }) {
    Output o = Invoke([&] { return CmdStart({.head = true, .agent = c.agent}); });
    EXPECT_EQ(o.code, 2) << c.err;
    EXPECT_EQ(o.err, c.err);
  }
  EXPECT_TRUE(fs::is_empty(root()));
}

TEST_F(CommandsTest, JoiningWithoutATokenCreatesNothing) {
  Output o = Invoke([&] { return CmdStart({.address = "127.0.0.1:9"}); });
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err, "torus start: joining needs the cluster token: --token, --token-file or TORUS_TOKEN\n");
  TempDir dir;
  o = Invoke([&] { return CmdStart({.address = "127.0.0.1:9", .token_file = dir.path() + "/token"}); });
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err, "torus start: cannot read token file " + dir.path() + "/token: No such file or directory\n");
  EXPECT_TRUE(fs::is_empty(root()));  // the latest session is left as it was
}

TEST_F(CommandsTest, StopStopsTheTorusProcessesOfEverySession) {
  Output none = Invoke([] { return CmdStop(); });
  EXPECT_EQ(none.code, 0);
  EXPECT_EQ(none.out, "stopped 0 torus processes\n");
  const std::string first = NewSession();
  std::this_thread::sleep_for(2ms);
  const std::string second = NewSession();
  const pid_t a = Running("torus-a");
  const pid_t other = Running("other");
  ASSERT_TRUE(RecordProcess(first, {"node", "a", a}).ok());
  ASSERT_TRUE(RecordProcess(second, {"node", "b", other}).ok());
  Output o = Invoke([] { return CmdStop(); });
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.out, "stopped 1 torus process\n");
  EXPECT_FALSE(ProcessAlive(a));
  EXPECT_TRUE(ProcessAlive(other));
}

// --- torus up | down | dashboard | node restart | node cut (cmd_up.cc) ---

TEST_F(CommandsTest, UpChecksItsSpecBeforeAnythingStarts) {
  TempDir dir;
  const std::string spec = dir.path() + "/spec.yaml";
  Output missing = Invoke([&] { return CmdUp({.spec_path = spec}); });
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(missing.err, "torus up: cannot read " + spec + "\n");
  WriteFile(spec, "node_groups: [{name: cpu, count: x}]\n");
  Output bad = Invoke([&] { return CmdUp({.spec_path = spec}); });
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err, "torus up: " + spec + ": node_groups[0].count: must be an integer from 1 to 1000\n");
  WriteFile(spec, "node_types: [{name: v6e, tpu: {pod_type: v6e-16, topology: 4x4}, max_slices: 1}]\n");
  Output netns = Invoke([&] { return CmdUp({.spec_path = spec, .netns = true}); });
  EXPECT_EQ(netns.code, 2);
  EXPECT_EQ(netns.err, "torus up: node_types (autoscaled slices) cannot be used with --netns yet\n");
  EXPECT_TRUE(fs::is_empty(root()));
}

TEST_F(CommandsTest, UpRefusesWhileTheLatestSessionRuns) {
  TempDir dir;
  const std::string spec = dir.path() + "/spec.yaml";
  WriteFile(spec, "node_groups: [{name: cpu, count: 1}]\n");
  const std::string session = NewSession();
  ASSERT_TRUE(RecordProcess(session, {"head", "head", Running("torus-head")}).ok());
  Output o = Invoke([&] { return CmdUp({.spec_path = spec}); });
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "torus up: a cluster is already running in " + session + "; run `torus down` first\n");
  EXPECT_EQ(AllSessions(root()).size(), 1u);
}

TEST_F(CommandsTest, DownStopsTheLatestSession) {
  Output none = Invoke([] { return CmdDown(); });
  EXPECT_EQ(none.code, 0);
  EXPECT_EQ(none.out, "no torus session to stop\n");
  const std::string session = NewSession();
  const pid_t a = Running("torus-a");
  const pid_t b = Running("torus-b");
  ASSERT_TRUE(RecordProcess(session, {"node", "a", a}).ok());
  ASSERT_TRUE(RecordProcess(session, {"head", "head", b}).ok());
  Output o = Invoke([] { return CmdDown(); });
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.out, "stopped 2 torus processes of " + session + "\n");
  EXPECT_FALSE(ProcessAlive(a));
  EXPECT_FALSE(ProcessAlive(b));
}

TEST_F(CommandsTest, DashboardPrintsTheLatestSessionsLoginUrl) {
  Output none = Invoke([] { return CmdDashboard(); });
  EXPECT_EQ(none.code, 1);
  EXPECT_EQ(none.err, "torus dashboard: " + NoSession() + "\n");
  const std::string session = NewSession();
  Output no_head = Invoke([] { return CmdDashboard(); });
  EXPECT_EQ(no_head.code, 1);
  EXPECT_EQ(no_head.err, "torus dashboard: no head in " + session + " (no dashboard_address)\n");
  WriteFile(session + "/dashboard_address", "127.0.0.1:8265\n");
  WriteFile(session + "/token", "tok\n");
  Output o = Invoke([] { return CmdDashboard(); });
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.out, "http://127.0.0.1:8265/?token=tok\n");
}

TEST_F(CommandsTest, NodeRestartRefusesARunningAgentOrAnUnknownOne) {
  Output none = Invoke([] { return CmdNodeRestart("cpu-0"); });
  EXPECT_EQ(none.code, 1);
  EXPECT_EQ(none.err, "torus node restart: " + NoSession() + "\n");
  const std::string session = NewSession();
  const pid_t agent = Running("torus-node");
  ASSERT_TRUE(RecordProcess(session, {"node", "cpu-0", agent}).ok());
  Output running = Invoke([] { return CmdNodeRestart("cpu-0"); });
  EXPECT_EQ(running.code, 1);
  EXPECT_EQ(running.err, "torus node restart: agent cpu-0 is running (pid " + std::to_string(agent) + ")\n");
  Output unknown = Invoke([] { return CmdNodeRestart("cpu-1"); });
  EXPECT_EQ(unknown.code, 2);
  EXPECT_EQ(unknown.err, "torus node restart: no agent named \"cpu-1\" in session " + session + "\n");
}

TEST_F(CommandsTest, NodeCutOfAHostWithoutNamespaceIsBadInput) {
  Output none = Invoke([] { return CmdNodeLink("cpu-0", false); });
  EXPECT_EQ(none.code, 1);
  EXPECT_EQ(none.err, "torus node cut: " + NoSession() + "\n");
  const std::string session = NewSession();
  Output o = Invoke([] { return CmdNodeLink("cpu-0", true); });
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err, "torus node heal: host cpu-0 of " + session +
                       " has no network namespace (only `torus up --netns` makes them)\n");
}

// --- torus head restart (cmd_head.cc) ---

TEST_F(CommandsTest, HeadRestartWithoutAHeadToRestart) {
  Output none = Invoke([] { return CmdHeadRestart(); });
  EXPECT_EQ(none.code, 1);
  EXPECT_EQ(none.err, "torus head restart: " + NoSession() + "\n");
  const std::string session = NewSession();
  Output no_head = Invoke([] { return CmdHeadRestart(); });
  EXPECT_EQ(no_head.code, 2);
  EXPECT_EQ(no_head.err, "torus head restart: no head was started in " + session + " (no head.json)\n");
}

TEST_F(CommandsTest, HeadRestartOfAPairThatRuns) {
  const std::string session = NewSession();
  ASSERT_TRUE(RecordProcess(session, {"head", "head-a", Running("torus-head-a")}).ok());
  ASSERT_TRUE(RecordProcess(session, {"head", "head-b", Running("torus-head-b")}).ok());
  Output o = Invoke([] { return CmdHeadRestart(); });
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.out, "every head of " + session + " is running; nothing to restart\n");
}

// --- torus autoscaler check, torus node add-slice | remove-slice (cmd_slices.cc) ---

std::string Autoscaler(const std::string& session) {
  return "provider: {type: local, session: " + session + "}\n" + R"(
node_types:
  - name: v6e
    tpu: {pod_type: v6e-16, topology: 4x4}
    max_slices: 2
    capacity_classes:
      - {class: spot, provisioning_timeout_s: 10}
      - {class: flex-start, provisioning_timeout_s: 120}
  - name: v5e
    tpu: {accelerator_type: TPU-V5LITEPOD, topology: 2x4}
    min_slices: 1
    max_slices: 1
)";
}

TEST_F(CommandsTest, AutoscalerCheckPrintsTheNodeTypes) {
  TempDir dir;
  const std::string path = dir.path() + "/autoscaler.yaml";
  WriteFile(path, Autoscaler("/s"));
  Output o = Invoke([&] { return CmdAutoscalerCheck(path); });
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "provider local, 2 node types\n"
            "  v6e: v6e-16 4x4, 4 hosts of 4 chips, 0-2 slices, classes spot (10 s) > flex-start (120 s)\n"
            "  v5e: v5litepod-8 2x4, 1 host of 8 chips, 1-1 slices, classes on-demand (600 s)\n");
}

TEST_F(CommandsTest, AutoscalerCheckErrors) {
  TempDir dir;
  const std::string path = dir.path() + "/autoscaler.yaml";
  Output missing = Invoke([&] { return CmdAutoscalerCheck(path); });
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(missing.err, "torus autoscaler check: cannot read " + path + "\n");
  WriteFile(path, "provider: {type: local, session: /s}\n"
                 "node_types: [{name: v6e, tpu: {pod_type: v6e-16, topology: 4x4}, max_slices: x}]\n");
  Output bad = Invoke([&] { return CmdAutoscalerCheck(path); });
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.err, "torus autoscaler check: " + path + ": node_types[0].max_slices: must be an integer from 0 to 1000\n");
}

TEST_F(CommandsTest, AddSliceChecksTheSessionsNodeTypes) {
  const std::string session = NewSession();
  Output no_config = Invoke([&] { return CmdNodeAddSlice({.slice = "v6e-abcde", .node_type = "v6e"}); });
  EXPECT_EQ(no_config.code, 2);
  EXPECT_EQ(no_config.err, "torus node add-slice: cannot read " + session +
                               "/autoscaler.yaml (a session's node types come from the node_types of its `torus up` "
                               "spec)\n");
  WriteFile(session + "/autoscaler.yaml", Autoscaler(session));
  struct Case {
    AddSliceFlags flags;
    std::string err;
  };
  for (const Case& c : std::vector<Case>{
           {{.slice = "v4-abcde", .node_type = "v4"},
            "torus node add-slice: --node-type \"v4\" is not a node type of this session; known: v6e, v5e\n"},
           {{.slice = "v6e-abcde", .node_type = "v6e", .capacity_class = "cheap"}, "torus node add-slice: --capacity-class: capacity class \"cheap\" is not known; accepted: spot, "
            "flex-start, reserved, on-demand\n"},
           {{.slice = "v5e-abcde", .node_type = "v6e"},
            "torus node add-slice: slice name \"v5e-abcde\" must start with \"v6e-\" and be 1-40 of a-z, 0-9 and "
            "'-'\n"},
           {{.slice = "v6e-ABC", .node_type = "v6e"},
            "torus node add-slice: slice name \"v6e-ABC\" must start with \"v6e-\" and be 1-40 of a-z, 0-9 and "
            "'-'\n"},
       }) {
    Output o = Invoke([&] { return CmdNodeAddSlice(c.flags); });
    EXPECT_EQ(o.code, 2) << c.err;
    EXPECT_EQ(o.err, c.err);
  }
  EXPECT_TRUE(ReadProcesses(session).empty());  // no launch was recorded
}

TEST_F(CommandsTest, AddSliceRefusesASliceThatRuns) {
  const std::string session = NewSession();
  WriteFile(session + "/autoscaler.yaml", Autoscaler(session));
  const pid_t host = Running("torus-node");
  ASSERT_TRUE(RecordProcess(session, {"node", "v6e-abcde-w3", host}).ok());
  Output o = Invoke([&] { return CmdNodeAddSlice({.slice = "v6e-abcde", .node_type = "v6e", .session = session}); });
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "torus node add-slice: slice v6e-abcde runs already (host v6e-abcde-w3, pid " +
                       std::to_string(host) + ")\n");
}

TEST_F(CommandsTest, AddSliceRecordsItsLaunchThenNeedsAHead) {
  TempDir session;  // given by --session, not the latest
  WriteFile(session.path() + "/autoscaler.yaml", Autoscaler(session.path()));
  Output o = Invoke([&] {
    return CmdNodeAddSlice(
        {.slice = "v6e-abcde", .node_type = "v6e", .capacity_class = "spot", .session = session.path()});
  });
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "torus node add-slice: cannot read " + session.path() +
                       "/head_address (no head in this session?)\n");
  const std::vector<ProcessRecord> records = ReadProcesses(session.path());
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].role, "launch");
  EXPECT_EQ(records[0].name, "v6e-abcde");
  EXPECT_EQ(records[0].pid, getpid());
}

TEST_F(CommandsTest, RemoveSliceStopsOnlyThatSlicesHosts) {
  const std::string session = NewSession();
  const pid_t w0 = Running("torus-w0");
  const pid_t sim0 = Running("torus-sim0");
  const pid_t not_a_host = Running("torus-w1x");
  const pid_t other_slice = Running("torus-other");
  for (const ProcessRecord& r : std::vector<ProcessRecord>{{"node", "v6e-abcde-w0", w0},
                                                          {"sim", "v6e-abcde-w0", sim0},
                                                          {"node", "v6e-abcde-w1x", not_a_host},
                                                          {"node", "v6e-abcdef-w0", other_slice}}) {
    ASSERT_TRUE(RecordProcess(session, r).ok());
  }
  Output o = Invoke([] { return CmdNodeRemoveSlice("v6e-abcde", ""); });
  EXPECT_EQ(o.code, 0);
  EXPECT_EQ(o.out, "slice v6e-abcde: stopped 2 processes\n");
  EXPECT_FALSE(ProcessAlive(w0));
  EXPECT_FALSE(ProcessAlive(sim0));
  EXPECT_TRUE(ProcessAlive(not_a_host));
  EXPECT_TRUE(ProcessAlive(other_slice));
  Output again = Invoke([] { return CmdNodeRemoveSlice("v6e-abcde", ""); });
  EXPECT_EQ(again.out, "slice v6e-abcde: stopped 0 processes\n");
}

// --- torus tls init (cmd_tls.cc) ---

TEST_F(CommandsTest, TlsInitWritesOnceAndNeverReplaces) {
  TempDir dir;
  const std::string d = dir.path() + "/tls";
  Output o = Invoke([&] { return CmdTlsInit(d); });
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "wrote " + d + "/ca.crt, " + d + "/ca.key (keep it private) and " + d + "/join_token\n" +
                       "heads:  torus-head --tls-ca " + d + "/ca.crt --tls-ca-key " + d + "/ca.key --join-token-file " +
                       d + "/join_token ...\n" + "agents: torus-node --tls-ca " + d + "/ca.crt --join-token-file " +
                       d + "/join_token ...\n" +
                       "GKE:    kubectl -n torus create secret generic torus-tls --from-file=" + d +
                       "/ca.crt --from-file=" + d + "/ca.key --from-file=" + d + "/join_token\n");
  const std::string key = test_util::ReadFile(d + "/ca.key");
  Output again = Invoke([&] { return CmdTlsInit(d); });
  EXPECT_EQ(again.code, 1);
  EXPECT_EQ(again.out, "");
  EXPECT_EQ(again.err.rfind("torus tls init: ", 0), 0u) << again.err;
  EXPECT_EQ(test_util::ReadFile(d + "/ca.key"), key);
}

// --- torus status (cmd_status.cc), torus serve deploy (cmd_serve.cc), torus list (cmd_list.cc) ---

TEST_F(CommandsTest, StatusWithoutAHeadSaysHowToStartOne) {
  Output o = Invoke([] { return CmdStatus({}, false); });
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "torus: cannot find a running head: no --address/TORUS_ADDRESS and " + NoSession() +
                       "; start one with `torus start --head` or `torus up SPEC.yaml`\n");
}

TEST_F(CommandsTest, ServeDeployOfAnUnreadableFileIsBadInput) {
  TempDir dir;
  Output o = Invoke([&] { return CmdServeDeploy({}, dir.path() + "/missing.yaml", false, 10); });
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.err, "torus serve deploy: cannot read " + dir.path() + "/missing.yaml\n");
}

TEST_F(CommandsTest, ListTasksWithoutAHead) {
  Output o = Invoke([] { return CmdListTasks({}, {}); });
  EXPECT_EQ(o.code, 1);
  EXPECT_EQ(o.err, "torus list tasks: cannot find the head's HTTP address: no --dashboard-address or "
                   "TORUS_DASHBOARD_ADDRESS and " + NoSession() + "\n");
}

}  // namespace commands_test
}  // namespace torus::cli
