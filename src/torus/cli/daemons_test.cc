#include "torus/cli/daemons.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "torus/cli/test_util.h"

namespace torus::cli {
namespace daemons_test {

using namespace std::chrono_literals;
using test_util::Child;
using test_util::SleepBinaryNamed;
using test_util::TempDir;

// Waits until `pid` runs the program named `name` (after its exec).
void AwaitExec(pid_t pid, const std::string& name) {
  for (int i = 0; i < 250; ++i) {
    if (test_util::ReadFile("/proc/" + std::to_string(pid) + "/comm") == name + "\n") return;
    std::this_thread::sleep_for(20ms);
  }
  FAIL() << pid << " did not exec " << name;
}

TEST(DaemonsTest, ProcessAliveOfThisProcessAndOfNoPid) {
  EXPECT_TRUE(ProcessAlive(getpid()));
  EXPECT_FALSE(ProcessAlive(0));
  EXPECT_FALSE(ProcessAlive(-1));
}

TEST(DaemonsTest, ProcessAliveIsFalseForAnExitedChild) {
  Child child({"/bin/true"});
  ASSERT_GT(child.pid(), 0);
  // The child exits at once and stays a zombie until reaped: not alive either way.
  EXPECT_TRUE(WaitForExit(child.pid(), 5000ms));
  EXPECT_FALSE(ProcessAlive(child.pid()));
}

TEST(DaemonsTest, ProcessAliveIsFalseForAZombieOfAnotherParent) {
  // A shell that starts `true` and then sleeps without reaping it (exec replaces the shell): the zombie is not ours
  // to reap, and its /proc/PID/stat says Z.
  TempDir dir;
  const std::string pid_file = dir.path() + "/pid";
  Child parent({"/bin/sh", "-c", "/bin/true & echo $! > " + pid_file + "; exec /bin/sleep 30"});
  pid_t zombie = 0;
  for (int i = 0; i < 250 && zombie == 0; ++i) {
    std::string text = test_util::ReadFile(pid_file);
    if (!text.empty() && text.back() == '\n') zombie = std::stoi(text);
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_GT(zombie, 0);
  EXPECT_TRUE(WaitForExit(zombie, 5000ms));  // true once it is a zombie
  EXPECT_FALSE(ProcessAlive(zombie));
  EXPECT_TRUE(ProcessAlive(parent.pid()));
}

TEST(DaemonsTest, WaitForExitTimesOutOnARunningProcess) {
  Child child({"/bin/sleep", "30"});
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(WaitForExit(child.pid(), 100ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
  EXPECT_TRUE(ProcessAlive(child.pid()));
}

TEST(DaemonsTest, IsTorusProcessByExecutableName) {
  TempDir dir;
  Child torus({SleepBinaryNamed(dir.path(), "torus-fake"), "30"});
  Child etcd({SleepBinaryNamed(dir.path(), "etcd"), "30"});
  Child other({SleepBinaryNamed(dir.path(), "not-torus"), "30"});
  Child etcdctl({SleepBinaryNamed(dir.path(), "etcdctl"), "30"});
  // Until its exec a child's name is this test binary's.
  AwaitExec(torus.pid(), "torus-fake");
  AwaitExec(etcd.pid(), "etcd");
  AwaitExec(other.pid(), "not-torus");
  AwaitExec(etcdctl.pid(), "etcdctl");
  EXPECT_TRUE(IsTorusProcess(torus.pid()));
  EXPECT_TRUE(IsTorusProcess(etcd.pid()));
  EXPECT_FALSE(IsTorusProcess(other.pid()));
  EXPECT_FALSE(IsTorusProcess(etcdctl.pid()));
  EXPECT_FALSE(IsTorusProcess(getpid()));  // cli_tests
  EXPECT_FALSE(IsTorusProcess(0));
}

TEST(DaemonsTest, StopProcessesStopsTorusProcessesAndSkipsOthers) {
  TempDir dir;
  Child a({SleepBinaryNamed(dir.path(), "torus-a"), "30"});
  Child b({SleepBinaryNamed(dir.path(), "torus-b"), "30"});
  Child other({SleepBinaryNamed(dir.path(), "other"), "30"});
  AwaitExec(a.pid(), "torus-a");
  AwaitExec(b.pid(), "torus-b");
  AwaitExec(other.pid(), "other");
  EXPECT_EQ(StopProcesses({a.pid(), other.pid(), b.pid(), 0}, 5000ms), 2);
  EXPECT_FALSE(ProcessAlive(a.pid()));
  EXPECT_FALSE(ProcessAlive(b.pid()));
  EXPECT_TRUE(ProcessAlive(other.pid()));  // a pid reused by another program is left alone
}

TEST(DaemonsTest, StopProcessesKillsWhatIgnoresSigterm) {
  TempDir dir;
  // A shell named torus-stubborn that ignores SIGTERM (its comm is the script's name).
  const std::string script = dir.path() + "/torus-stubborn";
  test_util::WriteScript(script, "trap '' TERM\nwhile :; do sleep 0.05; done\n");
  Child stubborn({script});
  AwaitExec(stubborn.pid(), "torus-stubborn");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(StopProcesses({stubborn.pid()}, 200ms), 1);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);  // it was given the grace period
  EXPECT_FALSE(ProcessAlive(stubborn.pid()));
}

TEST(DaemonsTest, StopProcessesOfNothingRunning) { EXPECT_EQ(StopProcesses({}, 10ms), 0); }

TEST(DaemonsTest, TailOfFileKeepsTheLastLines) {
  TempDir dir;
  const std::string log = dir.path() + "/log";
  test_util::WriteFile(log, "one\ntwo\nthree\nfour\n");
  EXPECT_EQ(TailOfFile(log, 2), "three\nfour");
  EXPECT_EQ(TailOfFile(log, 10), "one\ntwo\nthree\nfour");
  EXPECT_EQ(TailOfFile(dir.path() + "/missing", 5), "");
}

TEST(DaemonsTest, FreeLoopbackPortCanBeBound) {
  auto port = FreeLoopbackPort();
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_GT(*port, 0);
  ASSERT_LT(*port, 65536);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(*port));
  // Free a moment ago; another process could take it in between, which is why this only expects, not asserts.
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
}

}  // namespace daemons_test
}  // namespace torus::cli
