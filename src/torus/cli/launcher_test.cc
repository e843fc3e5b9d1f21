#include "torus/cli/launcher.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "torus/cli/session_dir.h"
#include "torus/cli/test_util.h"

namespace torus::cli {
namespace launcher_test {

using namespace std::chrono_literals;
using test_util::Child;
using test_util::ScopedEnv;
using test_util::TempDir;
using test_util::WriteFile;

// A process whose executable is named `name` (a torus process when the name starts with "torus") that, on
// SIGTERM, appends its name to `order_file` and exits.
class NamedProcess {
 public:
  NamedProcess(const std::string& dir, const std::string& name, const std::string& order_file)
      : script_(Script(dir, name, order_file)), child_({script_}) {
    for (int i = 0; i < 250; ++i) {
      if (test_util::ReadFile("/proc/" + std::to_string(child_.pid()) + "/comm") == name + "\n") return;
      std::this_thread::sleep_for(20ms);
    }
    ADD_FAILURE() << name << " did not start";
  }
  pid_t pid() const { return child_.pid(); }

 private:
  static std::string Script(const std::string& dir, const std::string& name, const std::string& order_file) {
    const std::string path = dir + "/" + name;
    test_util::WriteScript(path, "trap 'echo " + name + " >> " + order_file +
                                     "; exit 0' TERM\nwhile :; do sleep 0.02; done\n");
    return path;
  }
  std::string script_;
  Child child_;
};

TEST(LauncherTest, StopSessionStopsAgentsThenSimulatorsThenHeadsThenEtcd) {
  TempDir session;
  TempDir bin;
  const std::string order = session.path() + "/order";
  NamedProcess etcd(bin.path(), "torus-etcd", order);
  NamedProcess head(bin.path(), "torus-head", order);
  NamedProcess sim(bin.path(), "torus-sim", order);
  NamedProcess node(bin.path(), "torus-node", order);
  NamedProcess other(bin.path(), "torus-other", order);  // a role it does not know goes with the agents
  for (const ProcessRecord& r : std::vector<ProcessRecord>{{"etcd", "etcd-1", etcd.pid()},
                                                          {"head", "head", head.pid()},
                                                          {"sim", "v6e-0-w0", sim.pid()},
                                                          {"node", "v6e-0-w0", node.pid()},
                                                          {"other", "x", other.pid()}}) {
    ASSERT_TRUE(RecordProcess(session.path(), r).ok());
  }
  WriteFile(session.path() + "/netns", "");
  EXPECT_EQ(StopSession(session.path()), 5);
  const std::string stopped = test_util::ReadFile(order);
  EXPECT_TRUE(stopped == "torus-node\ntorus-other\ntorus-sim\ntorus-head\ntorus-etcd\n" ||
              stopped == "torus-other\ntorus-node\ntorus-sim\ntorus-head\ntorus-etcd\n")
      << stopped;
  EXPECT_FALSE(std::filesystem::exists(session.path() + "/netns"));  // its network record is removed
}

TEST(LauncherTest, StopSessionOfAnAutoscaledSessionStopsTheHeadFirst) {
  TempDir session;
  TempDir bin;
  const std::string order = session.path() + "/order";
  NamedProcess node(bin.path(), "torus-node", order);
  NamedProcess launch(bin.path(), "torus-launch", order);
  NamedProcess head(bin.path(), "torus-head", order);
  for (const ProcessRecord& r : std::vector<ProcessRecord>{{"node", "v6e-0-w0", node.pid()},
                                                          {"launch", "v6e-0", launch.pid()},
                                                          {"head", "head", head.pid()}}) {
    ASSERT_TRUE(RecordProcess(session.path(), r).ok());
  }
  WriteFile(session.path() + "/autoscaler.yaml", "node_types: []\n");
  EXPECT_EQ(StopSession(session.path()), 3);
  EXPECT_EQ(test_util::ReadFile(order), "torus-head\ntorus-launch\ntorus-node\n");
}

TEST(LauncherTest, StopSessionLeavesProcessesThatAreNotTorus) {
  TempDir session;
  TempDir bin;
  Child other({test_util::SleepBinaryNamed(bin.path(), "not-torus"), "30"});
  for (int i = 0; i < 250 && test_util::ReadFile("/proc/" + std::to_string(other.pid()) + "/comm") != "not-torus\n";
       ++i) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(RecordProcess(session.path(), {"node", "a", other.pid()}).ok());
  EXPECT_EQ(StopSession(session.path()), 0);
  EXPECT_TRUE(ProcessAlive(other.pid()));
}

TEST(LauncherTest, HeadNamesInLaunchOrderOnce) {
  TempDir session;
  for (const ProcessRecord& r : std::vector<ProcessRecord>{
           {"etcd", "etcd-1", 1}, {"head", "head-a", 2}, {"node", "head-c", 3}, {"head", "head-b", 4},
           {"head", "head-a", 5}}) {
    ASSERT_TRUE(RecordProcess(session.path(), r).ok());
  }
  EXPECT_EQ(HeadNames(session.path()), (std::vector<std::string>{"head-a", "head-b"}));
  TempDir empty;
  EXPECT_TRUE(HeadNames(empty.path()).empty());
}

TEST(LauncherTest, RelaunchHeadWithoutASavedLaunchIsNotFound) {
  TempDir session;
  auto address = RelaunchHead(session.path());
  EXPECT_EQ(address.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(address.status().message(), "no head was started in " + session.path() + " (no head.json)");
}

TEST(LauncherTest, RelaunchHeadRefusesAMalformedSavedLaunch) {
  TempDir session;
  const std::string file = session.path() + "/head.json";
  for (const std::string text : {"{", R"({"standby": false})", R"({"args": "--port"})"}) {
    WriteFile(file, text);
    auto address = RelaunchHead(session.path());
    EXPECT_EQ(address.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_EQ(address.status().message(), file + " is not a saved head launch") << text;
  }
  WriteFile(file, R"({"args": ["--port", 6380]})");
  auto address = RelaunchHead(session.path());
  EXPECT_EQ(address.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(address.status().message(), file + ": args are strings");
}

TEST(LauncherTest, RestartStoppedHeadsNeedsTheirSavedLaunches) {
  TempDir session;
  ASSERT_TRUE(RecordProcess(session.path(), {"head", "head-a", 0}).ok());  // pid 0: not running
  auto restarted = RestartStoppedHeads(session.path());
  EXPECT_EQ(restarted.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(restarted.status().message(), "no head was started in " + session.path() + " (no head-a.json)");
}

TEST(LauncherTest, RestartStoppedHeadsLeavesRunningHeadsAlone) {
  TempDir session;
  TempDir bin;
  const std::string order = session.path() + "/order";
  NamedProcess a(bin.path(), "torus-head-a", order);
  NamedProcess b(bin.path(), "torus-head-b", order);
  ASSERT_TRUE(RecordProcess(session.path(), {"head", "head-a", 0}).ok());
  ASSERT_TRUE(RecordProcess(session.path(), {"head", "head-b", b.pid()}).ok());
  ASSERT_TRUE(RecordProcess(session.path(), {"head", "head-a", a.pid()}).ok());  // the latest record counts
  auto restarted = RestartStoppedHeads(session.path());
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  EXPECT_TRUE(restarted->empty());
}

TEST(LauncherTest, LoadAgentLaunchReadsASavedLaunch) {
  TempDir session;
  WriteFile(session.path() + "/agents/v6e-0-w1.json",
            R"({"name": "v6e-0-w1", "args": ["--node-id", "v6e-0-w1"], "env": {"TPU_WORKER_ID": "1"}})");
  auto launch = LoadAgentLaunch(session.path(), "v6e-0-w1");
  ASSERT_TRUE(launch.ok()) << launch.status();
  EXPECT_EQ(launch->session, session.path());
  EXPECT_EQ(launch->name, "v6e-0-w1");
  EXPECT_EQ(launch->args, (std::vector<std::string>{"--node-id", "v6e-0-w1"}));
  EXPECT_EQ(launch->env, (std::map<std::string, std::string>{{"TPU_WORKER_ID", "1"}}));
}

TEST(LauncherTest, LoadAgentLaunchErrors) {
  TempDir session;
  auto missing = LoadAgentLaunch(session.path(), "a");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "no agent named \"a\" in session " + session.path());
  const std::string file = session.path() + "/agents/b.json";
  for (const std::string text : {"not json", R"({"args": []})", R"({"env": {}})"}) {
    WriteFile(file, text);
    auto bad = LoadAgentLaunch(session.path(), "b");
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << text;
    EXPECT_EQ(bad.status().message(), file + " is not a saved agent launch") << text;
  }
}

TEST(LauncherTest, LoadAgentLaunchRefusesFieldsOfTheWrongTypeWithoutThrowing) {
  TempDir session;
  const std::string file = session.path() + "/agents/c.json";
  const std::pair<std::string, std::string> cases[] = {
      {R"({"args": 1, "env": {}})", ": args is a list of strings and env an object of strings"},
      {R"({"args": [], "env": []})", ": args is a list of strings and env an object of strings"},
      {R"({"args": ["--port", 1], "env": {}})", ": args is a list of strings"},
      {R"({"args": [], "env": {"A": 1}})", ": env.A is not a string"}};
  for (const auto& [text, why] : cases) {
    WriteFile(file, text);
    auto bad = LoadAgentLaunch(session.path(), "c");
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << text;
    EXPECT_EQ(bad.status().message(), file + why) << text;
  }
}

TEST(LauncherTest, RelaunchHeadRefusesAStandbyThatIsNotABoolean) {
  TempDir session;
  const std::string file = session.path() + "/head.json";
  WriteFile(file, R"({"args": ["--port", "0"], "standby": "yes"})");
  auto address = RelaunchHead(session.path());
  EXPECT_EQ(address.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(address.status().message(), file + ": standby is true or false");
}

TEST(LauncherTest, TpuSimPortFileIsUnderTheHost) {
  EXPECT_EQ(TpuSimPortFile("/s", "v6e-0-w0"), "/s/hosts/v6e-0-w0/tpu_sim_port");
}

TEST(LauncherTest, WaitForTpuSimPortReadsThePortFile) {
  TempDir session;
  WriteFile(TpuSimPortFile(session.path(), "h"), "43210\n");
  auto port = WaitForTpuSimPort(session.path(), "h", getpid(), 5000ms);
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(*port, 43210);
}

TEST(LauncherTest, WaitForTpuSimPortFailsWithTheLogWhenTheSimulatorExited) {
  TempDir session;
  WriteFile(session.path() + "/logs/sim-h.log", "starting\nbind: address in use\n");
  WriteFile(TpuSimPortFile(session.path(), "h"), "0\n");  // not a port: it never served
  Child exited({"/bin/true"});
  ASSERT_TRUE(WaitForExit(exited.pid(), 5000ms));
  auto port = WaitForTpuSimPort(session.path(), "h", exited.pid(), 5000ms);
  EXPECT_EQ(port.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(port.status().message(), "torus-tpu-sim of h exited during start; end of " + session.path() +
                                         "/logs/sim-h.log:\nstarting\nbind: address in use");
}

TEST(LauncherTest, WaitForTpuSimPortTimesOut) {
  TempDir session;
  auto port = WaitForTpuSimPort(session.path(), "h", getpid(), 1000ms);
  EXPECT_EQ(port.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(port.status().message(),
            "torus-tpu-sim of h did not serve within 1 s; see " + session.path() + "/logs/sim-h.log");
}

TEST(LauncherTest, ATimeoutUnderASecondIsNamedInFractions) {
  TempDir session;
  auto port = WaitForTpuSimPort(session.path(), "h", getpid(), 250ms);
  EXPECT_EQ(port.status().message(),
            "torus-tpu-sim of h did not serve within 0.25 s; see " + session.path() + "/logs/sim-h.log");
}

TEST(LauncherTest, CleanAgentEnvironmentDropsWhatMisleadsDetection) {
  ScopedEnv a("TPU_WORKER_ID", "3"), b("MEGASCALE_SLICE_ID", "1"), c("TORUS_NODE_GROUP", "v6e"),
      d("TORUS_TOKEN", "secret"), e("TORUS_ADDRESS", "h:1"), f("CUDA_VISIBLE_DEVICES", "0"),
      keep1("TORUS_TEMP_DIR", "/tmp/x"), keep2("TPUX", "1"), keep3("MY_TPU_", "1");
  const auto env = CleanAgentEnvironment();
  for (const char* dropped : {"TPU_WORKER_ID", "MEGASCALE_SLICE_ID", "TORUS_NODE_GROUP", "TORUS_TOKEN",
                              "TORUS_ADDRESS", "CUDA_VISIBLE_DEVICES"}) {
    EXPECT_FALSE(env.contains(dropped)) << dropped;
  }
  EXPECT_EQ(env.at("TORUS_TEMP_DIR"), "/tmp/x");
  EXPECT_EQ(env.at("TPUX"), "1");
  EXPECT_EQ(env.at("MY_TPU_"), "1");
}

TEST(LauncherTest, SessionTlsAgentArgsOnlyWithTheSessionsCa) {
  TempDir session;
  EXPECT_TRUE(SessionTlsAgentArgs(session.path()).empty());
  WriteFile(session.path() + "/ca.crt", "-----BEGIN CERTIFICATE-----\n");
  EXPECT_EQ(SessionTlsAgentArgs(session.path()),
            (std::vector<std::string>{"--tls-ca", session.path() + "/ca.crt", "--join-token-file",
                                      session.path() + "/join_token"}));
}

TEST(LauncherTest, DashboardLoginUrl) {
  TempDir session;
  auto none = DashboardLoginUrl(session.path());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(none.status().message(), "no head in " + session.path() + " (no dashboard_address)");
  WriteFile(session.path() + "/dashboard_address", "127.0.0.1:8265\n");
  auto no_token = DashboardLoginUrl(session.path());
  EXPECT_EQ(no_token.status().code(), absl::StatusCode::kNotFound);
  WriteFile(session.path() + "/token", "abc123\n");
  EXPECT_EQ(DashboardLoginUrl(session.path()).value_or(""), "http://127.0.0.1:8265/?token=abc123");
  WriteFile(session.path() + "/ca.crt", "-----BEGIN CERTIFICATE-----\n");
  EXPECT_EQ(DashboardLoginUrl(session.path()).value_or(""), "https://127.0.0.1:8265/?token=abc123");
}

}  // namespace launcher_test
}  // namespace torus::cli
