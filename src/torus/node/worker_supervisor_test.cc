#include "torus/node/worker_supervisor.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace torus::node {
namespace worker_supervisor_test {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int64_t kSecond = 1'000'000;

// Collects on_exit calls; lets a test wait for one.
class ExitCollector {
 public:
  void Record(const WorkerExit& exit) {
    {
      absl::MutexLock lock(&mu_);
      exits_.push_back(exit);
    }
    cv_.SignalAll();
  }
  std::optional<WorkerExit> WaitFor(const std::string& id, milliseconds timeout = seconds(20)) {
    absl::MutexLock lock(&mu_);
    std::optional<WorkerExit> found;
    auto find = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const WorkerExit& e : exits_) {
        if (e.worker_id == id) found = e;
      }
      return found.has_value();
    };
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!find()) {
      if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) {
        find();
        break;
      }
    }
    return found;
  }
  size_t Count() {
    absl::MutexLock lock(&mu_);
    return exits_.size();
  }

 private:
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::vector<WorkerExit> exits_ ABSL_GUARDED_BY(mu_);
};

// True when `pid` no longer runs (gone, or a zombie nobody has reaped yet).
bool ProcessGone(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() || text[paren + 2] == 'Z' || text[paren + 2] == 'X';
}

bool WaitGone(pid_t pid, milliseconds timeout = seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!ProcessGone(pid)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

class WorkerSupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "torus_workers_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    supervisor_ = std::make_unique<WorkerSupervisor>(
        &clock_, dir_ + "/logs", EnvMap{{"PATH", "/usr/bin:/bin"}, {"BASE", "base"}, {"DROP", "drop"}},
        [this](const WorkerExit& e) { exits_.Record(e); });
  }
  void TearDown() override {
    supervisor_.reset();
    std::filesystem::remove_all(dir_);
  }

  absl::StatusOr<StartedWorker> StartShell(const std::string& id, const std::string& script,
                                           const std::string& owner = "job1") {
    return supervisor_->Start({.worker_id = id, .owner = owner, .argv = {"/bin/sh", "-c", script}});
  }

  std::string Log(const std::string& id) {
    auto chunk = supervisor_->ReadLog(id, 0, 0);
    return chunk.ok() ? chunk->data : "<" + std::string(chunk.status().message()) + ">";
  }

  // Polls the log until it contains `needle` (the worker's own progress is the only signal we have).
  bool WaitForLog(const std::string& id, const std::string& needle, milliseconds timeout = seconds(10)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (Log(id).find(needle) == std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(milliseconds(10));
    }
    return true;
  }

  std::optional<WorkerInfo> Find(const std::string& id) {
    for (const WorkerInfo& w : supervisor_->List()) {
      if (w.worker_id == id) return w;
    }
    return std::nullopt;
  }

  RealClock clock_;
  std::string dir_;
  ExitCollector exits_;
  std::unique_ptr<WorkerSupervisor> supervisor_;
};

TEST_F(WorkerSupervisorTest, ReportsExitCodeAndCapturesOutput) {
  auto started = StartShell("w1", "echo hi; echo oops >&2; exit 3");
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_GT(started->pid, 0);
  EXPECT_EQ(started->log_path, dir_ + "/logs/w1.log");

  auto exit = exits_.WaitFor("w1");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 3);
  EXPECT_EQ(exit->signal, 0);
  EXPECT_EQ(exit->owner, "job1");
  EXPECT_EQ(exit->pid, started->pid);
  EXPECT_GT(exit->end_time_ms, 0);

  auto info = Find("w1");
  ASSERT_TRUE(info.has_value());
  EXPECT_FALSE(info->running);
  EXPECT_EQ(info->exit_code, 3);
  EXPECT_EQ(info->pid, started->pid);
  EXPECT_GE(info->end_time_ms, info->start_time_ms);
  EXPECT_EQ(Log("w1"), "hi\noops\n");
  EXPECT_EQ(supervisor_->RunningCount(), 0);
}

TEST_F(WorkerSupervisorTest, EnvironmentIsBasePlusSetMinusUnset) {
  auto started = supervisor_->Start({.worker_id = "env",
                                     .argv = {"env"},  // found through the worker's PATH
                                     .env_set = {{"ADDED", "a b=c"}, {"BASE", "overridden"}},
                                     .env_unset = {"DROP", "NOT_THERE"}});
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_TRUE(exits_.WaitFor("env").has_value());
  std::string log = Log("env");
  EXPECT_NE(log.find("ADDED=a b=c\n"), std::string::npos) << log;
  EXPECT_NE(log.find("BASE=overridden\n"), std::string::npos) << log;
  EXPECT_NE(log.find("PATH=/usr/bin:/bin\n"), std::string::npos) << log;
  EXPECT_EQ(log.find("DROP="), std::string::npos) << log;
}

TEST_F(WorkerSupervisorTest, RunsInCwdWithStdinFromDevNull) {
  std::filesystem::create_directories(dir_ + "/work dir");
  auto started = supervisor_->Start(
      {.worker_id = "cwd", .argv = {"/bin/sh", "-c", "pwd; cat; echo done"}, .cwd = dir_ + "/work dir"});
  ASSERT_TRUE(started.ok()) << started.status();
  auto exit = exits_.WaitFor("cwd");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 0);
  EXPECT_EQ(Log("cwd"), std::filesystem::canonical(dir_ + "/work dir").string() + "\ndone\n");
}

TEST_F(WorkerSupervisorTest, StopSendsSigtermToANormalProcess) {
  auto started = supervisor_->Start({.worker_id = "sleeper", .argv = {"sleep", "30"}});
  ASSERT_TRUE(started.ok()) << started.status();
  auto was_running = supervisor_->Stop("sleeper", 30 * kSecond);
  ASSERT_TRUE(was_running.ok());
  EXPECT_TRUE(*was_running);
  auto exit = exits_.WaitFor("sleeper");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal, SIGTERM);
  // Stopping a finished worker is not an error.
  was_running = supervisor_->Stop("sleeper", kSecond);
  ASSERT_TRUE(was_running.ok());
  EXPECT_FALSE(*was_running);
  EXPECT_EQ(supervisor_->Stop("nobody", kSecond).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(WorkerSupervisorTest, StopEscalatesToSigkillAfterGrace) {
  auto started = StartShell("stubborn", "trap '' TERM; echo ready; sleep 30");
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_TRUE(WaitForLog("stubborn", "ready"));
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(supervisor_->Stop("stubborn", 200'000).ok());
  auto exit = exits_.WaitFor("stubborn");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal, SIGKILL);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, milliseconds(200));
}

TEST_F(WorkerSupervisorTest, StopKillsTheWholeProcessGroup) {
  auto started = StartShell("group", "sleep 30 & echo child=$!; wait");
  ASSERT_TRUE(started.ok()) << started.status();
  ASSERT_TRUE(WaitForLog("group", "\n"));
  std::string log = Log("group");
  ASSERT_EQ(log.rfind("child=", 0), 0u) << log;
  const pid_t child = std::stoi(log.substr(6));
  EXPECT_FALSE(ProcessGone(child));

  ASSERT_TRUE(supervisor_->Stop("group", 10 * kSecond).ok());
  auto exit = exits_.WaitFor("group");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal, SIGTERM);
  EXPECT_TRUE(WaitGone(child));
}

TEST_F(WorkerSupervisorTest, GroupLeftoversDieWhenTheWorkerExits) {
  auto started = StartShell("leaver", "sleep 30 & echo child=$!; exit 0");
  ASSERT_TRUE(started.ok()) << started.status();
  auto exit = exits_.WaitFor("leaver");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 0);
  std::string log = Log("leaver");
  ASSERT_EQ(log.rfind("child=", 0), 0u) << log;
  EXPECT_TRUE(WaitGone(std::stoi(log.substr(6))));
}

TEST_F(WorkerSupervisorTest, MissingBinaryFailsStartNamingIt) {
  auto started = supervisor_->Start({.worker_id = "missing", .argv = {"no-such-binary-xyz", "--flag"}});
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(started.status().message(),
            "cannot execute 'no-such-binary-xyz': No such file or directory (errno 2, ENOENT) (searched PATH=/usr/bin:/bin)");

  started = supervisor_->Start({.worker_id = "missing", .argv = {dir_ + "/nothing"}});
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().message(),
            "cannot execute '" + dir_ + "/nothing': No such file or directory (errno 2, ENOENT)");

  // The failed start leaves no record and no exit report; the id is free again at once.
  EXPECT_FALSE(Find("missing").has_value());
  EXPECT_EQ(supervisor_->ReadLog("missing", 0, 0).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(StartShell("missing", "exit 0").ok());
  ASSERT_TRUE(exits_.WaitFor("missing").has_value());
  EXPECT_EQ(exits_.Count(), 1u);
}

// Starts run in parallel (several spawner threads); one that fails says why and no other is affected.
TEST_F(WorkerSupervisorTest, ConcurrentStartsFailAloneWithTheirReason) {
  constexpr int kWorkers = 16;
  std::vector<absl::StatusOr<StartedWorker>> started(kWorkers, absl::UnknownError("not started"));
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWorkers; ++i) {
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < kWorkers) std::this_thread::yield();
      const std::string id = "w" + std::to_string(i);
      if (i == 5) {
        started[i] = supervisor_->Start({.worker_id = id, .argv = {dir_ + "/no-such-program"}});
      } else if (i == 11) {
        started[i] = supervisor_->Start({.worker_id = id, .argv = {"/bin/true"}, .cwd = dir_ + "/no-such-dir"});
      } else {
        started[i] = StartShell(id, "echo rank " + std::to_string(i) + "; exit " + std::to_string(i % 4));
      }
    });
  }
  for (std::thread& t : threads) t.join();

  ASSERT_FALSE(started[5].ok());
  EXPECT_EQ(started[5].status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(started[5].status().message(),
            "cannot execute '" + dir_ + "/no-such-program': No such file or directory (errno 2, ENOENT)");
  ASSERT_FALSE(started[11].ok());
  EXPECT_EQ(started[11].status().message(),
            "cannot enter working directory '" + dir_ + "/no-such-dir': No such file or directory (errno 2, ENOENT)");
  std::set<pid_t> pids;
  for (int i = 0; i < kWorkers; ++i) {
    if (i == 5 || i == 11) continue;
    const std::string id = "w" + std::to_string(i);
    ASSERT_TRUE(started[i].ok()) << id << ": " << started[i].status();
    pids.insert(started[i]->pid);
    auto exit = exits_.WaitFor(id);
    ASSERT_TRUE(exit.has_value()) << id;
    EXPECT_EQ(exit->exit_code, i % 4) << id;
    EXPECT_EQ(exit->pid, started[i]->pid) << id;
    EXPECT_EQ(Log(id), "rank " + std::to_string(i) + "\n");
  }
  EXPECT_EQ(pids.size(), static_cast<size_t>(kWorkers - 2));
  EXPECT_FALSE(Find("w5").has_value());
  EXPECT_FALSE(Find("w11").has_value());
  EXPECT_EQ(exits_.Count(), static_cast<size_t>(kWorkers - 2));
  EXPECT_EQ(supervisor_->RunningCount(), 0);
}

TEST_F(WorkerSupervisorTest, ProgramsAreFoundAndRunAsExecvpRunsThem) {
  // On the worker's PATH (not the agent's), in PATH order.
  std::filesystem::create_directories(dir_ + "/bin1");
  std::filesystem::create_directories(dir_ + "/bin2");
  auto write_script = [](const std::string& path, const std::string& text, bool executable) {
    std::ofstream(path) << text;
    std::filesystem::permissions(path, executable ? std::filesystem::perms::owner_all
                                                  : std::filesystem::perms::owner_read |
                                                        std::filesystem::perms::owner_write);
  };
  write_script(dir_ + "/bin1/greet", "#!/bin/sh\necho first $1\n", false);  // found, not executable: skipped
  write_script(dir_ + "/bin2/greet", "#!/bin/sh\necho second $1\n", true);
  // No #! line: it runs with /bin/sh, with its arguments.
  write_script(dir_ + "/bin2/plain", "echo plain $1 $2\n", true);
  ASSERT_TRUE(supervisor_->Start({.worker_id = "found", .argv = {"greet", "x"},
                                  .env_set = {{"PATH", dir_ + "/bin1:" + dir_ + "/bin2:/usr/bin:/bin"}}}).ok());
  ASSERT_TRUE(exits_.WaitFor("found").has_value());
  EXPECT_EQ(Log("found"), "second x\n");
  ASSERT_TRUE(supervisor_->Start({.worker_id = "plain", .argv = {dir_ + "/bin2/plain", "a", "b"}}).ok());
  ASSERT_TRUE(exits_.WaitFor("plain").has_value());
  EXPECT_EQ(Log("plain"), "plain a b\n");
  // Found only where it cannot be executed: permission denied, as execvp says.
  auto denied = supervisor_->Start({.worker_id = "denied", .argv = {"greet"}, .env_set = {{"PATH", dir_ + "/bin1"}}});
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().message(),
            "cannot execute 'greet': Permission denied (errno 13, EACCES) (searched PATH=" + dir_ + "/bin1)");
}

TEST_F(WorkerSupervisorTest, BadCwdFailsStart) {
  auto started = supervisor_->Start({.worker_id = "cwd", .argv = {"true"}, .cwd = dir_ + "/absent"});
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(started.status().message(),
            "cannot enter working directory '" + dir_ + "/absent': No such file or directory (errno 2, ENOENT)");
}

TEST_F(WorkerSupervisorTest, ValidatesSpec) {
  struct Case {
    WorkerSpec spec;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{.worker_id = "", .argv = {"true"}}, "worker_id '' must be 1-128 characters of [0-9A-Za-z_.-]"},
      {{.worker_id = "a/b", .argv = {"true"}}, "worker_id 'a/b' must be 1-128 characters of [0-9A-Za-z_.-]"},
      {{.worker_id = std::string(129, 'x'), .argv = {"true"}},
       "worker_id '" + std::string(129, 'x') + "' must be 1-128 characters of [0-9A-Za-z_.-]"},
      {{.worker_id = "ok", .argv = {}}, "argv must name a program to run (argv[0] is empty)"},
      {{.worker_id = "ok", .argv = {"true"}, .env_set = {{"A=B", "1"}}},
       "env_set: bad variable name 'A=B' (non-empty, without '=' or NUL)"},
      {{.worker_id = "ok", .argv = {"true"}, .env_unset = {""}},
       "env_unset: bad variable name '' (non-empty, without '=' or NUL)"},
      {{.worker_id = "ok", .argv = {"true", std::string("a\0b", 3)}}, "argv[1] contains a NUL byte"},
  };
  for (const Case& c : cases) {
    auto started = supervisor_->Start(c.spec);
    ASSERT_FALSE(started.ok()) << c.message;
    EXPECT_EQ(started.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(started.status().message(), c.message);
  }
  EXPECT_TRUE(ValidateWorkerId(std::string(128, 'x')).ok());
  EXPECT_TRUE(ValidateWorkerId("job-1.rank_0").ok());
}

TEST_F(WorkerSupervisorTest, ReadLogHonoursOffsets) {
  ASSERT_TRUE(StartShell("log", "printf abcdefghij").ok());
  ASSERT_TRUE(exits_.WaitFor("log").has_value());

  auto chunk = supervisor_->ReadLog("log", 0, 4);
  ASSERT_TRUE(chunk.ok());
  EXPECT_EQ(chunk->data, "abcd");
  EXPECT_EQ(chunk->next_offset, 4);
  EXPECT_FALSE(chunk->finished);

  chunk = supervisor_->ReadLog("log", 4, 100);
  ASSERT_TRUE(chunk.ok());
  EXPECT_EQ(chunk->data, "efghij");
  EXPECT_EQ(chunk->next_offset, 10);
  EXPECT_TRUE(chunk->finished);

  chunk = supervisor_->ReadLog("log", 25, 100);
  ASSERT_TRUE(chunk.ok());
  EXPECT_EQ(chunk->data, "");
  EXPECT_EQ(chunk->next_offset, 25);
  EXPECT_TRUE(chunk->finished);

  EXPECT_EQ(supervisor_->ReadLog("log", -1, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(supervisor_->ReadLog("other", 0, 0).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(WorkerSupervisorTest, RunningLogIsNotFinished) {
  ASSERT_TRUE(StartShell("live", "echo first; sleep 30").ok());
  ASSERT_TRUE(WaitForLog("live", "first\n"));
  auto chunk = supervisor_->ReadLog("live", 0, 0);
  ASSERT_TRUE(chunk.ok());
  EXPECT_EQ(chunk->data, "first\n");
  EXPECT_FALSE(chunk->finished);
  ASSERT_TRUE(supervisor_->Stop("live", 0).ok());
  auto exit = exits_.WaitFor("live");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal, SIGKILL);
}

TEST_F(WorkerSupervisorTest, WaitForLogReturnsWhenOutputArrivesWhileTheWorkerRuns) {
  ASSERT_TRUE(StartShell("talker", "echo first; sleep 0.3; echo second; sleep 30").ok());
  ASSERT_TRUE(WaitForLog("talker", "first\n"));
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  ASSERT_TRUE(supervisor_->WaitForLog("talker", 6, deadline, [] { return false; }).ok());
  auto chunk = supervisor_->ReadLog("talker", 6, 0);
  ASSERT_TRUE(chunk.ok());
  EXPECT_EQ(chunk->data, "second\n");
  EXPECT_FALSE(chunk->finished);  // woken by the output, not by an exit
  EXPECT_LT(std::chrono::steady_clock::now(), deadline);
  ASSERT_TRUE(supervisor_->Stop("talker", 0).ok());
}

TEST_F(WorkerSupervisorTest, WaitForLogReturnsWhenTheWorkerExitsWithoutOutput) {
  ASSERT_TRUE(StartShell("quiet", "echo only; sleep 0.3").ok());
  ASSERT_TRUE(WaitForLog("quiet", "only\n"));
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  ASSERT_TRUE(supervisor_->WaitForLog("quiet", 5, deadline, [] { return false; }).ok());
  EXPECT_LT(std::chrono::steady_clock::now(), deadline);
  auto chunk = supervisor_->ReadLog("quiet", 5, 0);
  ASSERT_TRUE(chunk.ok());
  EXPECT_EQ(chunk->data, "");
  EXPECT_TRUE(chunk->finished);
}

TEST_F(WorkerSupervisorTest, WaitForLogEndsWhenCancelledAndKnowsNoStranger) {
  ASSERT_TRUE(StartShell("idle", "sleep 30").ok());
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(100));
    cancel = true;
  });
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  EXPECT_TRUE(supervisor_->WaitForLog("idle", 0, deadline, [&] { return cancel.load(); }).ok());
  canceller.join();
  EXPECT_LT(std::chrono::steady_clock::now(), deadline);
  EXPECT_TRUE(Find("idle")->running);
  EXPECT_EQ(supervisor_->WaitForLog("stranger", 0, deadline, [] { return false; }).code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(supervisor_->Stop("idle", 0).ok());
}

TEST_F(WorkerSupervisorTest, WaitForLogsReturnsWhenOneOfSeveralWritesOrAllEnd) {
  ASSERT_TRUE(StartShell("quiet", "exec sleep 30").ok());
  ASSERT_TRUE(StartShell("talker", "sleep 0.3; echo late; exec sleep 30").ok());
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  ASSERT_TRUE(supervisor_->WaitForLogs({{"quiet", 0}, {"talker", 0}}, deadline, [] { return false; }).ok());
  EXPECT_LT(std::chrono::steady_clock::now(), deadline);
  EXPECT_EQ(Log("talker"), "late\n");
  EXPECT_EQ(Log("quiet"), "");

  // One exit without output does not end it while another runs: it lasts to the deadline.
  ASSERT_TRUE(StartShell("brief", "sleep 0.2").ok());
  const auto soon = std::chrono::steady_clock::now() + milliseconds(800);
  ASSERT_TRUE(supervisor_->WaitForLogs({{"quiet", 0}, {"brief", 0}}, soon, [] { return false; }).ok());
  EXPECT_GE(std::chrono::steady_clock::now(), soon);
  ASSERT_TRUE(exits_.WaitFor("brief").has_value());

  // The exit of all does, even without output; one that has already ended is not waited on.
  ASSERT_TRUE(StartShell("short", "sleep 0.3").ok());
  const auto later = std::chrono::steady_clock::now() + seconds(20);
  ASSERT_TRUE(supervisor_->WaitForLogs({{"brief", 0}, {"short", 0}}, later, [] { return false; }).ok());
  EXPECT_LT(std::chrono::steady_clock::now(), later);
  for (const WorkerInfo& w : supervisor_->List()) EXPECT_TRUE(w.worker_id != "short" || !w.running);
  ASSERT_TRUE(exits_.WaitFor("short").has_value());

  EXPECT_EQ(supervisor_->WaitForLogs({{"quiet", 0}, {"nobody", 0}}, deadline, [] { return false; }).message(),
            "no worker nobody on this node");
}

TEST_F(WorkerSupervisorTest, DuplicateRunningIdIsRejectedFinishedIsReplaced) {
  ASSERT_TRUE(StartShell("dup", "echo one; sleep 30").ok());
  ASSERT_TRUE(WaitForLog("dup", "one\n"));
  auto again = StartShell("dup", "echo two");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);

  ASSERT_TRUE(supervisor_->Stop("dup", kSecond).ok());
  ASSERT_TRUE(exits_.WaitFor("dup").has_value());
  auto second = StartShell("dup", "echo two");
  ASSERT_TRUE(second.ok()) << second.status();
  // The record is the new run; the log is appended to.
  auto info = Find("dup");
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->pid, second->pid);
  ASSERT_TRUE(WaitForLog("dup", "two\n"));
  EXPECT_EQ(Log("dup"), "one\ntwo\n");
}

// A start sent again after a head failed over: refused for an id this agent knows, even one that has ended.
TEST_F(WorkerSupervisorTest, AStartOnlyIfNewIsRefusedForAnIdThatHasRun) {
  ASSERT_TRUE(StartShell("ran", "true").ok());
  ASSERT_TRUE(exits_.WaitFor("ran").has_value());
  EXPECT_TRUE(supervisor_->Knows("ran"));
  EXPECT_FALSE(supervisor_->IsRunning("ran"));
  auto again = supervisor_->Start({.worker_id = "ran", .argv = {"/bin/true"}, .only_if_new = true});
  EXPECT_EQ(again.status(), absl::AlreadyExistsError("worker ran has run on this node already"));
  auto fresh = supervisor_->Start({.worker_id = "fresh", .argv = {"/bin/true"}, .only_if_new = true});
  EXPECT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_FALSE(supervisor_->Knows("never"));
}

TEST_F(WorkerSupervisorTest, StopOwnerStopsOnlyThatOwner) {
  ASSERT_TRUE(StartShell("a1", "sleep 30", "A").ok());
  ASSERT_TRUE(StartShell("a2", "sleep 30", "A").ok());
  ASSERT_TRUE(StartShell("b1", "sleep 30", "B").ok());
  EXPECT_EQ(supervisor_->StopOwner("A", kSecond), 2);
  ASSERT_TRUE(exits_.WaitFor("a1").has_value());
  ASSERT_TRUE(exits_.WaitFor("a2").has_value());
  auto b1 = Find("b1");
  ASSERT_TRUE(b1.has_value());
  EXPECT_TRUE(b1->running);
  EXPECT_EQ(supervisor_->RunningCount(), 1);
  EXPECT_EQ(supervisor_->StopOwner("A", kSecond), 0);
}

TEST_F(WorkerSupervisorTest, StopAllWaitsForEveryWorker) {
  ASSERT_TRUE(StartShell("s1", "sleep 30").ok());
  ASSERT_TRUE(StartShell("s2", "trap '' TERM; echo ready; sleep 30").ok());
  ASSERT_TRUE(WaitForLog("s2", "ready"));
  EXPECT_EQ(supervisor_->StopAll(200'000), 2);
  EXPECT_EQ(supervisor_->RunningCount(), 0);
  for (const WorkerInfo& w : supervisor_->List()) EXPECT_FALSE(w.running) << w.worker_id;
  EXPECT_EQ(exits_.Count(), 2u);
}

TEST_F(WorkerSupervisorTest, BlockedAndIgnoredSignalsAreNotInherited) {
  // The agent blocks SIGTERM in every thread and ignores SIGPIPE; neither may reach a worker.
  supervisor_.reset();  // one supervisor per process reaps children
  sigset_t term, old_mask;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &term, &old_mask), 0);
  auto old_pipe = signal(SIGPIPE, SIG_IGN);
  supervisor_ = std::make_unique<WorkerSupervisor>(&clock_, dir_ + "/logs", EnvMap{{"PATH", "/usr/bin:/bin"}},
                                                   [this](const WorkerExit& e) { exits_.Record(e); });
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  signal(SIGPIPE, old_pipe);

  ASSERT_TRUE(supervisor_->Start({.worker_id = "t", .argv = {"sleep", "30"}}).ok());
  ASSERT_TRUE(supervisor_->Stop("t", 30 * kSecond).ok());
  auto exit = exits_.WaitFor("t");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal, SIGTERM);

  ASSERT_TRUE(supervisor_->Start({.worker_id = "masks", .argv = {"grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"}})
                  .ok());
  ASSERT_TRUE(exits_.WaitFor("masks").has_value());
  EXPECT_EQ(Log("masks"), "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
}

TEST_F(WorkerSupervisorTest, KeepsOnlyTheNewestFinishedRecords) {
  supervisor_.reset();  // one supervisor per process reaps children
  supervisor_ = std::make_unique<WorkerSupervisor>(
      &clock_, dir_ + "/logs", EnvMap{{"PATH", "/usr/bin:/bin"}}, [this](const WorkerExit& e) { exits_.Record(e); },
      SupervisorOptions{.max_finished = 3});
  for (int i = 0; i < 5; ++i) {
    const std::string id = "f" + std::to_string(i);
    ASSERT_TRUE(StartShell(id, "exit 0").ok());
    ASSERT_TRUE(exits_.WaitFor(id).has_value());
  }
  std::vector<std::string> ids;
  for (const WorkerInfo& w : supervisor_->List()) ids.push_back(w.worker_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"f2", "f3", "f4"}));
}

TEST_F(WorkerSupervisorTest, DestructorKillsRunningWorkers) {
  auto started = StartShell("left", "sleep 30");
  ASSERT_TRUE(started.ok());
  supervisor_.reset();
  EXPECT_TRUE(ProcessGone(started->pid));
  EXPECT_TRUE(exits_.WaitFor("left", milliseconds(0)).has_value());
}

// ---- what an exit says about why ----

TEST_F(WorkerSupervisorTest, AFailedExitCarriesTheLastLinesOfItsOutputAndItsPeakRss) {
  ASSERT_TRUE(StartShell("tail", "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo line $i; done; echo oops >&2; exit 3")
                  .ok());
  auto exit = exits_.WaitFor("tail");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 3);
  EXPECT_FALSE(exit->stopped);
  EXPECT_FALSE(exit->oom_killed);
  EXPECT_EQ(exit->output_tail, "line 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\nline 11\nline 12\noops");
  EXPECT_GT(exit->peak_rss_bytes, 0);
}

TEST_F(WorkerSupervisorTest, ASuccessfulExitCarriesNoOutput) {
  ASSERT_TRUE(StartShell("ok", "echo fine").ok());
  auto exit = exits_.WaitFor("ok");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->output_tail, "");
}

TEST_F(WorkerSupervisorTest, AStoppedWorkerIsMarkedStoppedAndAnOutsideKillIsNot) {
  ASSERT_TRUE(StartShell("stopped", "echo up; exec sleep 30").ok());
  ASSERT_TRUE(WaitForLog("stopped", "up"));
  ASSERT_TRUE(supervisor_->Stop("stopped", kSecond).ok());
  auto stopped = exits_.WaitFor("stopped");
  ASSERT_TRUE(stopped.has_value());
  EXPECT_EQ(stopped->signal, SIGTERM);
  EXPECT_TRUE(stopped->stopped);

  auto started = StartShell("killed", "echo up; exec sleep 30");
  ASSERT_TRUE(started.ok());
  ASSERT_TRUE(WaitForLog("killed", "up"));
  ASSERT_EQ(kill(started->pid, SIGKILL), 0);
  auto killed = exits_.WaitFor("killed");
  ASSERT_TRUE(killed.has_value());
  EXPECT_EQ(killed->signal, SIGKILL);
  EXPECT_FALSE(killed->stopped);
  EXPECT_FALSE(killed->oom_killed);  // its cgroup's OOM count did not rise
}

TEST_F(WorkerSupervisorTest, AFailedWorkerCarriesTheLastErrorLibtpuLoggedWhileItRan) {
  const std::string tpu_logs = dir_ + "/tpu_logs";
  std::filesystem::create_directories(tpu_logs);
  ExitCollector exits;
  WorkerSupervisor supervisor(&clock_, dir_ + "/logs2", EnvMap{{"PATH", "/usr/bin:/bin"}},
                              [&exits](const WorkerExit& e) { exits.Record(e); }, {.tpu_log_dir = tpu_logs});
  ASSERT_TRUE(supervisor
                  .Start({.worker_id = "tpu",
                          .argv = {"/bin/sh", "-c",
                                   "echo 'E1201 10:00:01.000000 7 tpu.cc:2] TPU chip 1 is unhealthy' >> " + tpu_logs +
                                       "/tpu_driver.log; echo 'I1201 10:00:02.000000 7 tpu.cc:3] bye' >> " +
                                       tpu_logs + "/tpu_driver.log; exit 1"}})
                  .ok());
  auto exit = exits.WaitFor("tpu");
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->accelerator_error, "E1201 10:00:01.000000 7 tpu.cc:2] TPU chip 1 is unhealthy");
}

}  // namespace worker_supervisor_test
}  // namespace torus::node
