#include "torus/node/metrics_sampler.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torus::node {
namespace metrics_sampler_test {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

using LabelMap = std::map<std::string, std::string>;

// The samples of one report as (name, labels) -> value.
std::map<std::pair<std::string, LabelMap>, double> Samples(const rpc::MetricsReport& report) {
  std::map<std::pair<std::string, LabelMap>, double> out;
  for (const rpc::MetricSample& s : report.samples()) {
    out[{s.name(), LabelMap(s.labels().begin(), s.labels().end())}] = s.value();
  }
  return out;
}

std::map<std::string, rpc::MetricSourceStatus> Sources(const rpc::MetricsReport& report) {
  std::map<std::string, rpc::MetricSourceStatus> out;
  for (const rpc::MetricSourceStatus& s : report.sources()) out[s.source()] = s;
  return out;
}

class MetricsSamplerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "torus_sampler_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    WriteHost(1000, 10000);
    Write("meminfo", "MemTotal: 1000 kB\nMemAvailable: 250 kB\n");
    WriteProcess(100, 0, 10);
    sources_.proc_root = root_;
    sources_.list_workers = [this] { return workers_; };
  }
  void TearDown() override { fs::remove_all(root_); }

  void Write(const std::string& relative, const std::string& contents) {
    const fs::path path = fs::path(root_) / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << contents;
  }
  void WriteHost(uint64_t busy, uint64_t idle) { Write("stat", absl::StrCat("cpu  ", busy, " 0 0 ", idle, "\n")); }
  void WriteProcess(pid_t pid, uint64_t ticks, int64_t rss_pages) {
    Write(absl::StrCat(pid, "/stat"), absl::StrCat(pid, " (python3) S 1 ", pid, " 1 0 -1 0 0 0 0 0 ", ticks,
                                                   " 0 0 0 20 0 1 0 5555 0 ", rss_pages, " 0"));
  }
  std::unique_ptr<MetricsSampler> Make(int64_t period_ms = 5000) {
    return std::make_unique<MetricsSampler>(
        &clock_, MetricsSamplerOptions{.node_id = "n1", .period_ms = period_ms}, sources_,
        [](const rpc::MetricsReport&) -> absl::StatusOr<bool> { return false; }, [] { return uint64_t{7}; });
  }

  std::string root_;
  FakeClock clock_;
  MetricsSources sources_;
  std::vector<RunningWorker> workers_;
};

TEST_F(MetricsSamplerTest, HostAndWorkerSamples) {
  workers_ = {{.worker_id = "job-1", .owner = "job-1", .pid = 100,
               .env_set = {{"TORUS_JOB_ID", "job-1"}, {"PATH", "/bin"}}}};
  auto sampler = Make();
  const rpc::MetricsReport& first = sampler->SampleOnce();
  EXPECT_EQ(first.node_id(), "n1");
  EXPECT_EQ(first.incarnation(), 7u);
  EXPECT_EQ(first.period_ms(), 5000);
  EXPECT_EQ(first.time_ms(), clock_.WallMillis());
  const LabelMap worker = {{"process", "job-1"}, {"owner", "job-1"}, {"job_id", "job-1"}};
  const int64_t page = sysconf(_SC_PAGESIZE);
  // CPU needs two readings.
  EXPECT_THAT(Samples(first), UnorderedElementsAre(Pair(Pair("torus_node_memory_used_bytes", LabelMap{}), 750 * 1024),
                                                   Pair(Pair("torus_node_memory_total_bytes", LabelMap{}), 1000 * 1024),
                                                   Pair(Pair("torus_worker_rss_bytes", worker), 10.0 * page)));
  auto sources = Sources(first);
  ASSERT_EQ(sources.size(), 1u);
  EXPECT_TRUE(sources["host"].available());

  // 2 s later: the host was busy a quarter of the time; the worker used 1 s of CPU (at 100 ticks a second).
  clock_.AdvanceMillis(2000);
  WriteHost(1000 + 250, 10000 + 750);
  WriteProcess(100, sysconf(_SC_CLK_TCK), 12);
  auto second = Samples(sampler->SampleOnce());
  EXPECT_DOUBLE_EQ((second[{"torus_node_cpu_percent", {}}]), 25.0);
  EXPECT_DOUBLE_EQ((second[{"torus_worker_cpu_percent", worker}]), 50.0);
  EXPECT_DOUBLE_EQ((second[{"torus_worker_rss_bytes", worker}]), 12.0 * page);

  // The worker exited: its samples go.
  workers_.clear();
  for (const auto& [key, value] : Samples(sampler->SampleOnce())) EXPECT_THAT(key.first, HasSubstr("torus_node_"));
}

TEST_F(MetricsSamplerTest, ChipsAreTaggedWithTheirHolders) {
  workers_ = {{.worker_id = "run-a.r3", .owner = "run-a", .pid = 100,
               .env_set = {{"TORUS_RUN_ID", "run-a"}, {"TORUS_RANK", "3"}, {"TPU_VISIBLE_CHIPS", "0,1"}}},
              {.worker_id = "job-9", .owner = "job-9", .pid = 101,
               .env_set = {{"TORUS_JOB_ID", "job-9"}}, .chips = {3}}};
  sources_.libtpu_ports = {8431};
  sources_.read_libtpu = [](int port) {
    metrics::LibtpuPortReading r;
    r.port = port;
    r.chips = std::map<int, metrics::LibtpuChipStats>{
        {0, {.duty_cycle_percent = 90, .hbm_used_bytes = 1000, .hbm_total_bytes = 4000}},
        {1, {.duty_cycle_percent = 80}},
        {2, {.hbm_used_bytes = 5}},
        {3, {}}};
    return r;
  };
  sources_.read_device_plugin = []() -> absl::StatusOr<metrics::PluginChips> {
    metrics::PluginChips p;
    p.chips[0] = {.duty_cycle_percent = 1, .tensorcore_utilization_percent = 70};
    p.chips[1] = {.memory_bandwidth_utilization_percent = 30, .memory_used_bytes = 222, .memory_total_bytes = 333};
    return p;
  };
  auto sampler = Make();
  auto samples = Samples(sampler->SampleOnce());
  const LabelMap chip0 = {{"chip", "0"}, {"process", "run-a.r3"}, {"run_id", "run-a"}, {"rank", "3"}};
  const LabelMap chip1 = {{"chip", "1"}, {"process", "run-a.r3"}, {"run_id", "run-a"}, {"rank", "3"}};
  const LabelMap chip2 = {{"chip", "2"}};
  EXPECT_EQ((samples[{"torus_tpu_duty_cycle_percent", chip0}]), 90);  // libtpu wins
  EXPECT_EQ((samples[{"torus_tpu_hbm_used_bytes", chip0}]), 1000);
  EXPECT_EQ((samples[{"torus_tpu_hbm_total_bytes", chip0}]), 4000);
  EXPECT_EQ((samples[{"torus_tpu_tensorcore_utilization_percent", chip0}]), 70);
  EXPECT_EQ((samples[{"torus_tpu_duty_cycle_percent", chip1}]), 80);
  EXPECT_EQ((samples[{"torus_tpu_hbm_used_bytes", chip1}]), 222);  // the plugin fills in
  EXPECT_EQ((samples[{"torus_tpu_hbm_total_bytes", chip1}]), 333);
  EXPECT_EQ((samples[{"torus_tpu_memory_bandwidth_utilization_percent", chip1}]), 30);
  EXPECT_EQ((samples[{"torus_tpu_hbm_used_bytes", chip2}]), 5);
  EXPECT_EQ(samples.count({"torus_tpu_duty_cycle_percent", chip2}), 0u);
  // A chip with nothing measured has no samples; the spec's chip list tags without TPU_VISIBLE_CHIPS.
  for (const auto& [key, value] : samples) {
    EXPECT_EQ(key.second.count("node_id") + key.second.count("slice") + key.second.count("worker_id"), 0u);
    if (key.second.count("chip") && key.second.at("chip") == "3") FAIL() << key.first;
  }
  auto sources = Sources(sampler->SampleOnce());
  EXPECT_TRUE(sources["libtpu:8431"].available());
  EXPECT_TRUE(sources["device_plugin"].available());
}

TEST_F(MetricsSamplerTest, PlacedChipsWinOverAWorkersOwnClaim) {
  // "a-job" sorts first and claims every chip through its own TPU_VISIBLE_CHIPS; the run's worker was placed on
  // chips 0 and 1 by the head. Only chips nobody was placed on go to the claim.
  workers_ = {{.worker_id = "a-job", .owner = "job:a", .pid = 100,
               .env_set = {{"TORUS_JOB_ID", "a"}, {"TPU_VISIBLE_CHIPS", "0,1,2,3"}}},
              {.worker_id = "run-b.r0", .owner = "run:b", .pid = 101,
               .env_set = {{"TORUS_RUN_ID", "b"}, {"TORUS_RANK", "0"}}, .chips = {0, 1}}};
  sources_.libtpu_ports = {8431};
  sources_.read_libtpu = [](int port) {
    metrics::LibtpuPortReading r;
    r.port = port;
    r.chips = std::map<int, metrics::LibtpuChipStats>{{0, {.duty_cycle_percent = 10}}, {2, {.duty_cycle_percent = 20}}};
    return r;
  };
  auto samples = Samples(Make()->SampleOnce());
  EXPECT_EQ((samples[{"torus_tpu_duty_cycle_percent",
                      {{"chip", "0"}, {"process", "run-b.r0"}, {"run_id", "b"}, {"rank", "0"}}}]), 10);
  EXPECT_EQ((samples[{"torus_tpu_duty_cycle_percent", {{"chip", "2"}, {"process", "a-job"}, {"job_id", "a"}}}]), 20);
}

TEST_F(MetricsSamplerTest, TextFromSourcesIsMadeValidUtf8) {
  workers_ = {{.worker_id = "w", .owner = "run:b", .pid = 100, .env_set = {{"TORUS_RUN_ID", "b\xff"}}, .chips = {0}}};
  sources_.libtpu_ports = {8431};
  sources_.read_libtpu = [](int port) {
    metrics::LibtpuPortReading r;
    r.port = port;
    r.chips = absl::UnavailableError("bad value '\xfe\xff'");
    return r;
  };
  rpc::MetricsReport report = Make()->SampleOnce();
  EXPECT_EQ(Sources(report)["libtpu:8431"].error(), "bad value '?" "?'");
  for (const rpc::MetricSample& s : report.samples()) {
    if (s.labels().contains("run_id")) {
      EXPECT_EQ(s.labels().at("run_id"), "b?");
    }
  }
  std::string wire;
  ASSERT_TRUE(report.SerializeToString(&wire));
  rpc::MetricsReport parsed;
  EXPECT_TRUE(parsed.ParseFromString(wire)) << "the head must be able to read the report";
}

TEST_F(MetricsSamplerTest, FailingSourcesBackOffAndComeBack) {
  int calls = 0;
  bool fail = true;
  sources_.libtpu_ports = {8431, 8432};
  sources_.read_libtpu = [&](int port) {
    metrics::LibtpuPortReading r;
    r.port = port;
    if (port == 8432) {
      ++calls;
      if (fail) r.chips = absl::UnavailableError("connection refused");
    }
    return r;
  };
  auto sampler = Make(/*period_ms=*/1000);
  const int64_t start_ms = clock_.WallMillis();
  auto sources = Sources(sampler->SampleOnce());
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(sources["libtpu:8432"].available());
  EXPECT_THAT(sources["libtpu:8432"].error(), HasSubstr("connection refused"));
  EXPECT_EQ(sources["libtpu:8432"].since_ms(), start_ms);
  EXPECT_TRUE(sources["libtpu:8431"].available());

  // Retries after 1, 2, 4, ... s, capped at 60 s; one round per simulated second.
  std::vector<int64_t> tried_at;
  for (int second = 1; second <= 200; ++second) {
    clock_.AdvanceMillis(1000);
    const int before = calls;
    auto s = Sources(sampler->SampleOnce());
    EXPECT_FALSE(s["libtpu:8432"].available());
    EXPECT_EQ(s["libtpu:8432"].since_ms(), start_ms);  // unchanged while it stays down
    if (calls > before) tried_at.push_back(second);
  }
  EXPECT_THAT(tried_at, ElementsAre(1, 3, 7, 15, 31, 63, 123, 183));

  fail = false;
  clock_.AdvanceMillis(60'000);
  auto back = Sources(sampler->SampleOnce());
  EXPECT_TRUE(back["libtpu:8432"].available());
  EXPECT_EQ(back["libtpu:8432"].error(), "");
  EXPECT_EQ(back["libtpu:8432"].since_ms(), clock_.WallMillis());
  const int after = calls;
  clock_.AdvanceMillis(1000);
  sampler->SampleOnce();
  EXPECT_EQ(calls, after + 1);  // every period again
}

TEST_F(MetricsSamplerTest, ConfigurationErrorsAreReportedAsSources) {
  sources_.libtpu_config_error = "TPU_RUNTIME_METRICS_PORTS: 'x' is not a port";
  sources_.read_device_plugin = []() -> absl::StatusOr<metrics::PluginChips> {
    return absl::InvalidArgumentError("TPU_DEVICE_PLUGIN_ADDR is empty");
  };
  auto sampler = Make();
  auto sources = Sources(sampler->SampleOnce());
  EXPECT_FALSE(sources["libtpu"].available());
  EXPECT_THAT(sources["libtpu"].error(), HasSubstr("'x' is not a port"));
  EXPECT_FALSE(sources["device_plugin"].available());
  EXPECT_THAT(sources["device_plugin"].error(), HasSubstr("TPU_DEVICE_PLUGIN_ADDR"));
}

TEST_F(MetricsSamplerTest, GpusTaggedByCudaVisibleDevices) {
  workers_ = {{.worker_id = "w", .owner = "run-g", .pid = 100,
               .env_set = {{"TORUS_RUN_ID", "run-g"}, {"TORUS_RANK", "0"}, {"CUDA_VISIBLE_DEVICES", "1"}}}};
  sources_.read_gpus = []() -> absl::StatusOr<std::vector<metrics::GpuStats>> {
    return std::vector<metrics::GpuStats>{
        {.index = 0, .utilization_percent = 5, .temperature_celsius = 40},
        {.index = 1, .utilization_percent = 99, .memory_used_bytes = 1e9, .memory_total_bytes = 8e9,
         .power_watts = 250, .temperature_celsius = 70}};
  };
  auto sampler = Make();
  auto samples = Samples(sampler->SampleOnce());
  const LabelMap gpu1 = {{"gpu", "1"}, {"process", "w"}, {"run_id", "run-g"}, {"rank", "0"}};
  EXPECT_EQ((samples[{"torus_gpu_utilization_percent", {{"gpu", "0"}}}]), 5);
  EXPECT_EQ((samples[{"torus_gpu_temperature_celsius", {{"gpu", "0"}}}]), 40);
  EXPECT_EQ(samples.count({"torus_gpu_power_watts", {{"gpu", "0"}}}), 0u);
  EXPECT_EQ((samples[{"torus_gpu_utilization_percent", gpu1}]), 99);
  EXPECT_EQ((samples[{"torus_gpu_memory_used_bytes", gpu1}]), 1e9);
  EXPECT_EQ((samples[{"torus_gpu_memory_total_bytes", gpu1}]), 8e9);
  EXPECT_EQ((samples[{"torus_gpu_power_watts", gpu1}]), 250);
  EXPECT_EQ((samples[{"torus_gpu_temperature_celsius", gpu1}]), 70);
  EXPECT_TRUE(Sources(sampler->SampleOnce())["nvml"].available());
}

TEST_F(MetricsSamplerTest, ThreadSendsOnlyWhileRegistered) {
  absl::Mutex mu;
  absl::CondVar cv;
  std::vector<rpc::MetricsReport> sent;
  std::atomic<uint64_t> incarnation{0};
  std::atomic<int> rounds{0};
  RealClock clock;
  sources_.list_workers = [&] {
    ++rounds;
    cv.SignalAll();
    return std::vector<RunningWorker>{};
  };
  MetricsSampler sampler(
      &clock, {.node_id = "n1", .period_ms = 5}, sources_,
      [&](const rpc::MetricsReport& r) -> absl::StatusOr<bool> {
        absl::MutexLock lock(&mu);
        sent.push_back(r);
        cv.SignalAll();
        return false;
      },
      [&] { return incarnation.load(); });
  sampler.Start();
  {
    absl::MutexLock lock(&mu);
    while (rounds.load() < 3) cv.Wait(&mu);
    EXPECT_THAT(sent, IsEmpty());  // not registered: nothing sent
    incarnation = 4;
    while (sent.size() < 2) cv.Wait(&mu);
  }
  sampler.Stop();
  EXPECT_EQ(sent[0].incarnation(), 4u);
  EXPECT_EQ(sent[0].node_id(), "n1");
  EXPECT_TRUE(Sources(sent[0])["host"].available());
}

TEST(ParseDeviceListTest, IndicesOnly) {
  EXPECT_THAT(ParseDeviceList("0,1, 3"), ElementsAre(0, 1, 3));
  EXPECT_THAT(ParseDeviceList(""), IsEmpty());
  EXPECT_THAT(ParseDeviceList("GPU-8d6f1a2b,2,-1,x"), ElementsAre(2));
}

TEST(MakeHostMetricsSourcesTest, WhichSourcesExist) {
  auto cpu_host = MakeHostMetricsSources(0, 0, true, {}, nullptr);
  EXPECT_FALSE(cpu_host.read_libtpu);
  EXPECT_FALSE(cpu_host.read_device_plugin);
  EXPECT_FALSE(cpu_host.read_gpus);
  auto tpu_host = MakeHostMetricsSources(4, 0, true, {{"TPU_RUNTIME_METRICS_PORTS", "8431,8432"},
                                                      {"TPU_DEVICE_PLUGIN_ADDR", "10.0.0.1:2112"}}, nullptr);
  EXPECT_TRUE(tpu_host.read_libtpu);
  EXPECT_THAT(tpu_host.libtpu_ports, ElementsAre(8431, 8432));
  EXPECT_TRUE(tpu_host.read_device_plugin);
  auto default_port = MakeHostMetricsSources(4, 0, true, {}, nullptr);
  EXPECT_THAT(default_port.libtpu_ports, ElementsAre(8431));
  auto bad_ports = MakeHostMetricsSources(4, 0, true, {{"TPU_RUNTIME_METRICS_PORTS", "84x1"}}, nullptr);
  EXPECT_FALSE(bad_ports.read_libtpu);
  EXPECT_THAT(bad_ports.libtpu_config_error, HasSubstr("TPU_RUNTIME_METRICS_PORTS"));
  EXPECT_FALSE(MakeHostMetricsSources(0, 2, false, {}, nullptr).read_gpus);  // --no-nvml
  auto gpu_host = MakeHostMetricsSources(0, 2, true, {}, nullptr);
  ASSERT_TRUE(gpu_host.read_gpus);
  // No NVML on this machine (or a real one): either way an answer, never a crash.
  auto gpus = gpu_host.read_gpus();
  if (!gpus.ok()) {
    EXPECT_EQ(gpus.status().code(), absl::StatusCode::kUnavailable);
  }
}

}  // namespace metrics_sampler_test
}  // namespace torus::node
