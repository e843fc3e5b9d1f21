#include "torus/sim/simulator.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"

namespace torus::sim {
namespace simulator_test {

namespace runtime = tpu::monitoring::runtime;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

runtime::TPUMetric Read(SimulatedMetricService& service, const std::string& name) {
  runtime::MetricRequest request;
  request.set_metric_name(name);
  runtime::MetricResponse response;
  EXPECT_TRUE(service.GetRuntimeMetric(nullptr, &request, &response).ok());
  return response.metric();
}

TEST(HolderChangesTest, OpenedAndReleased) {
  std::vector<ChipLoad> before(3), after(3);
  before[0].holders = {10};
  before[1].holders = {11};
  after[1].holders = {11};
  after[2].holders = {12, 13};
  EXPECT_EQ(HolderChanges(before, after),
            (std::vector<std::string>{"TPU chip 0 released by pid 10", "TPU chip 2 opened by pid 12",
                                      "TPU chip 2 opened by pid 13"}));
  EXPECT_EQ(HolderChanges({}, after).size(), 3u) << "from nothing held";
}

TEST(StartupLinesTest, SaysItIsASimulatorAndListsChips) {
  auto lines = StartupLines(TpuGeneration::kV6e, 4, "127.0.0.1:8431");
  ASSERT_EQ(lines.size(), 3u + 4u);
  EXPECT_TRUE(absl::StrContains(lines[0], "SIMULATED")) << lines[0];
  EXPECT_TRUE(absl::StrContains(lines[1], "127.0.0.1:8431"));
  EXPECT_TRUE(absl::StrContains(lines[6], "TPU chip 3: TPU-V6E, HBM 31.25 GiB")) << lines[6];
}

TEST(TpuLogTest, GlogFormatAndFileName) {
  absl::TimeZone utc = absl::UTCTimeZone();
  absl::Time when = absl::FromCivil(absl::CivilSecond(2025, 6, 12, 10, 11, 12), utc) + absl::Microseconds(345);
  EXPECT_EQ(FormatGlogLine('I', when, utc, 1234, "hello"), "I0612 10:11:12.000345    1234 tpu_sim.cc:0] hello\n");
  EXPECT_EQ(GlogFileName("v6e-0-w1", "alice", when, utc, 77), "tpu_driver.v6e-0-w1.alice.log.INFO.20250612-101112.77");
}

// A real worker: a busy shell loop whose environment marks it as holding chip 1 of this host.
TEST(SimulatorTest, FollowsARealWorkerAndLogsItsChip) {
  const std::string dir = absl::StrCat(std::filesystem::temp_directory_path().string(), "/torus_simulator_test_",
                                       getpid());
  std::filesystem::remove_all(dir);
  const std::string mark = dir + "/work";
  pid_t child = fork();
  if (child == 0) {
    std::string mark_var = "TORUS_WORKER_OF=" + mark;
    std::string chips_var = "TPU_VISIBLE_CHIPS=1";
    char* env[] = {mark_var.data(), chips_var.data(), nullptr};
    char* argv[] = {const_cast<char*>("/bin/sh"), const_cast<char*>("-c"),
                    const_cast<char*>("while :; do :; done"), nullptr};
    execve("/bin/sh", argv, env);
    _exit(127);
  }
  ASSERT_GT(child, 0);
  usleep(100'000);  // let it exec

  auto log = TpuLog::Open(dir + "/tpu_logs", "v6e-0-w0");
  ASSERT_TRUE(log.ok()) << log.status();
  ChipModelOptions model{.generation = TpuGeneration::kV6e, .chips = 4};
  SimulatedMetricService service(ChipModel(model).Idle(0));
  Simulator simulator({.proc_root = "/proc", .worker_mark = mark, .chips = 4,
                       .ticks_per_second = sysconf(_SC_CLK_TCK), .page_size = sysconf(_SC_PAGESIZE)},
                      model, &service, log->get());
  const auto start = std::chrono::steady_clock::now();
  auto now = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  simulator.Tick(now(), 1);
  usleep(500'000);
  simulator.Tick(now(), 2);

  runtime::TPUMetric duty = Read(service, kDutyCycleMetric);
  ASSERT_EQ(duty.metrics_size(), 4);
  EXPECT_EQ(duty.metrics(0).gauge().as_double(), 0);
  EXPECT_GT(duty.metrics(1).gauge().as_double(), 3) << "a busy loop keeps its chip busy";
  runtime::TPUMetric used = Read(service, kHbmUsageMetric);
  EXPECT_GE(used.metrics(1).gauge().as_int(), 33'554'432'000 / 16);
  EXPECT_EQ(used.metrics(2).gauge().as_int(), 0);

  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  simulator.Tick(now(), 3);
  EXPECT_EQ(Read(service, kDutyCycleMetric).metrics(1).gauge().as_double(), 0);
  EXPECT_EQ(Read(service, kHbmUsageMetric).metrics(1).gauge().as_int(), 0);

  const std::string text = ReadAll((*log)->path());
  EXPECT_TRUE(absl::StrContains(text, absl::StrCat("TPU chip 1 opened by pid ", child))) << text;
  EXPECT_TRUE(absl::StrContains(text, absl::StrCat("TPU chip 1 released by pid ", child))) << text;
  EXPECT_TRUE(absl::StartsWith(std::filesystem::path((*log)->path()).filename().string(), "tpu_driver.v6e-0-w0."));
  std::filesystem::remove_all(dir);
}

}  // namespace simulator_test
}  // namespace torus::sim
