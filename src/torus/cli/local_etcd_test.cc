// StartLocalEtcd with a stand-in `etcd` on PATH: a script that prints its arguments, so that the arguments each
// member is started with can be read back from its log. No real etcd is started.
#include "torus/cli/local_etcd.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "torus/cli/daemons.h"
#include "torus/cli/session_dir.h"
#include "torus/cli/test_util.h"

namespace torus::cli {
namespace local_etcd_test {

using namespace std::chrono_literals;
using test_util::ScopedEnv;
using test_util::TempDir;

// Stops (by pid) every member the session recorded, at the end of a test.
class StopMembers {
 public:
  explicit StopMembers(std::string session) : session_(std::move(session)) {}
  ~StopMembers() {
    std::vector<pid_t> pids;
    for (const ProcessRecord& r : ReadProcesses(session_)) pids.push_back(r.pid);
    StopProcesses(pids, 2000ms);
    for (pid_t pid : pids) WaitForExit(pid, 2000ms);  // reaps those that exited by themselves
  }

 private:
  std::string session_;
};

TEST(LocalEtcdTest, WithoutEtcdOnPathSaysHowToInstallIt) {
  TempDir empty;
  ScopedEnv path("PATH", empty.path());
  TempDir session;
  auto endpoints = StartLocalEtcd(session.path(), 3, 1000ms);
  EXPECT_EQ(endpoints.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(endpoints.status().message(),
            "etcd is not installed (Debian: apt-get install etcd-server; scripts/setup.sh installs it)");
  EXPECT_FALSE(std::filesystem::exists(session.path() + "/processes"));
}

TEST(LocalEtcdTest, AMemberThatExitsIsNamedWithItsLogAndTheArgumentsItGot) {
  TempDir bin;
  test_util::WriteScript(bin.path() + "/etcd", "echo \"$@\"\nexit 1\n");
  ScopedEnv path("PATH", "/nonexistent:" + bin.path() + ":/usr/bin:/bin");
  TempDir session;
  std::filesystem::create_directories(session.path() + "/logs");
  StopMembers stop(session.path());
  auto endpoints = StartLocalEtcd(session.path(), 3, 10'000ms, "localhost");
  ASSERT_EQ(endpoints.status().code(), absl::StatusCode::kInternal) << endpoints.status();
  const std::string s = session.path();
  const std::string token = std::filesystem::path(s).filename().string();
  // Clients on `client_host`; peers on loopback; every member knows every peer.
  const std::regex expected(
      "etcd-1 exited during start; end of " + s + "/logs/etcd-1.log:\n--name etcd-1 --data-dir " + s +
      "/etcd/etcd-1 --listen-client-urls http://localhost:(\\d+) --advertise-client-urls http://localhost:\\1 "
      "--listen-peer-urls http://127.0.0.1:(\\d+) --initial-advertise-peer-urls http://127.0.0.1:\\2 "
      "--initial-cluster etcd-1=http://127.0.0.1:\\2,etcd-2=http://127.0.0.1:\\d+,etcd-3=http://127.0.0.1:\\d+ "
      "--initial-cluster-state new --initial-cluster-token " + token);
  EXPECT_TRUE(std::regex_match(std::string(endpoints.status().message()), expected)) << endpoints.status();
  // Every member was started and recorded (role "etcd") before the first was waited for.
  const std::vector<ProcessRecord> records = ReadProcesses(s);
  ASSERT_EQ(records.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(records[i].role, "etcd");
    EXPECT_EQ(records[i].name, "etcd-" + std::to_string(i + 1));
    EXPECT_TRUE(std::filesystem::is_directory(s + "/etcd/etcd-" + std::to_string(i + 1)));
  }
}

TEST(LocalEtcdTest, AMemberThatNeverAnswersTimesOut) {
  TempDir bin;
  test_util::WriteScript(bin.path() + "/etcd", "while :; do sleep 0.05; done\n");
  ScopedEnv path("PATH", bin.path() + ":/usr/bin:/bin");
  TempDir session;
  std::filesystem::create_directories(session.path() + "/logs");
  StopMembers stop(session.path());
  auto endpoints = StartLocalEtcd(session.path(), 1, 1000ms);
  EXPECT_EQ(endpoints.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(endpoints.status().message(),
            "etcd-1 was not healthy within 1 s; see " + session.path() + "/logs/etcd-1.log");
}

}  // namespace local_etcd_test
}  // namespace torus::cli
