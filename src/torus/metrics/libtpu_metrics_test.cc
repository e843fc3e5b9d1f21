#include "torus/metrics/libtpu_metrics.h"

#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/security/server_credentials.h"
#include "gtest/gtest.h"

namespace torus::metrics {
namespace libtpu_metrics_test {

namespace tpu_rt = ::tpu::monitoring::runtime;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

tpu_rt::Metric* AddEntry(tpu_rt::MetricResponse& r, int64_t device) {
  tpu_rt::Metric* m = r.mutable_metric()->add_metrics();
  m->mutable_attribute()->set_key("device-id");
  m->mutable_attribute()->mutable_value()->set_int_attr(device);
  return m;
}

tpu_rt::MetricResponse IntGauges(const std::string& name, const std::map<int64_t, int64_t>& values) {
  tpu_rt::MetricResponse r;
  r.mutable_metric()->set_name(name);
  for (const auto& [d, v] : values) AddEntry(r, d)->mutable_gauge()->set_as_int(v);
  return r;
}

tpu_rt::MetricResponse DoubleGauges(const std::string& name, const std::map<int64_t, double>& values) {
  tpu_rt::MetricResponse r;
  r.mutable_metric()->set_name(name);
  for (const auto& [d, v] : values) AddEntry(r, d)->mutable_gauge()->set_as_double(v);
  return r;
}

TEST(ParsePerDeviceGaugeTest, ReadsIntGaugesByDevice) {
  auto parsed = ParsePerDeviceGauge(IntGauges(kLibtpuHbmUsageMetric, {{0, 100}, {1, 200}}), kLibtpuHbmUsageMetric,
                                    GaugeKind::kInt);
  EXPECT_THAT(parsed.values, ElementsAre(Pair(0, 100.0), Pair(1, 200.0)));
  EXPECT_THAT(parsed.skipped, IsEmpty());
}

TEST(ParsePerDeviceGaugeTest, AcceptsTheOtherNumericType) {
  auto as_double = ParsePerDeviceGauge(DoubleGauges(kLibtpuHbmUsageMetric, {{0, 5.0}}), kLibtpuHbmUsageMetric,
                                       GaugeKind::kInt);
  EXPECT_THAT(as_double.values, ElementsAre(Pair(0, 5.0)));
  auto as_int = ParsePerDeviceGauge(IntGauges(kLibtpuDutyCycleMetric, {{3, 42}}), kLibtpuDutyCycleMetric,
                                    GaugeKind::kDouble);
  EXPECT_THAT(as_int.values, ElementsAre(Pair(3, 42.0)));
}

TEST(ParsePerDeviceGaugeTest, SkipsMalformedEntriesWithAReason) {
  tpu_rt::MetricResponse r;
  r.mutable_metric()->set_name(kLibtpuHbmUsageMetric);
  r.mutable_metric()->add_metrics()->mutable_gauge()->set_as_int(1);  // 0: no attribute
  {
    tpu_rt::Metric* m = r.mutable_metric()->add_metrics();  // 1: attribute without a value
    m->mutable_attribute()->set_key("device-id");
    m->mutable_gauge()->set_as_int(1);
  }
  {
    tpu_rt::Metric* m = r.mutable_metric()->add_metrics();  // 2: string id
    m->mutable_attribute()->mutable_value()->set_string_attr("0");
    m->mutable_gauge()->set_as_int(1);
  }
  AddEntry(r, -1)->mutable_gauge()->set_as_int(1);              // 3: negative id
  AddEntry(r, 0);                                               // 4: no gauge
  AddEntry(r, 0)->mutable_gauge()->set_as_string("12");          // 5: string value
  AddEntry(r, 0)->mutable_gauge()->set_as_bool(true);            // 6: bool value
  AddEntry(r, 0)->mutable_counter()->set_as_int(3);              // 7: counter, not gauge
  AddEntry(r, 0)->mutable_gauge()->set_as_double(std::nan(""));  // 8: NaN
  AddEntry(r, 0)->mutable_gauge();                               // 9: empty gauge
  AddEntry(r, 1)->mutable_gauge()->set_as_int(7);                // 10: good
  AddEntry(r, 1)->mutable_gauge()->set_as_int(8);                // 11: duplicate
  AddEntry(r, int64_t{1} << 40)->mutable_gauge()->set_as_int(1);  // 12: absurd id
  auto parsed = ParsePerDeviceGauge(r, kLibtpuHbmUsageMetric, GaugeKind::kInt);
  EXPECT_THAT(parsed.values, ElementsAre(Pair(1, 7.0)));
  ASSERT_EQ(parsed.skipped.size(), 12u);
  EXPECT_THAT(parsed.skipped[0], HasSubstr("entry 0: no device attribute"));
  EXPECT_THAT(parsed.skipped[1], HasSubstr("entry 1: no device attribute"));
  EXPECT_THAT(parsed.skipped[2], HasSubstr("not an int_attr"));
  EXPECT_THAT(parsed.skipped[3], HasSubstr("device id -1 out of range"));
  EXPECT_THAT(parsed.skipped[4], HasSubstr("has no gauge"));
  EXPECT_THAT(parsed.skipped[5], HasSubstr("a string value"));
  EXPECT_THAT(parsed.skipped[6], HasSubstr("a bool value"));
  EXPECT_THAT(parsed.skipped[7], HasSubstr("has no gauge"));
  EXPECT_THAT(parsed.skipped[8], HasSubstr("non-finite"));
  EXPECT_THAT(parsed.skipped[9], HasSubstr("empty gauge"));
  EXPECT_THAT(parsed.skipped[10], HasSubstr("device 1 listed twice"));
  EXPECT_THAT(parsed.skipped[11], HasSubstr("out of range"));
}

TEST(ParsePerDeviceGaugeTest, ByteCountsOutOfRangeAreSkipped) {
  tpu_rt::MetricResponse r;
  r.mutable_metric()->set_name(kLibtpuHbmUsageMetric);
  AddEntry(r, 0)->mutable_gauge()->set_as_int(-5);                       // negative
  AddEntry(r, 1)->mutable_gauge()->set_as_int(INT64_MAX);                // beyond any HBM; summing would overflow
  AddEntry(r, 2)->mutable_gauge()->set_as_double(1e20);                  // beyond int64
  AddEntry(r, 3)->mutable_gauge()->set_as_int(int64_t{32} << 30);        // 32 GiB: fine
  auto parsed = ParsePerDeviceGauge(r, kLibtpuHbmUsageMetric, GaugeKind::kInt);
  EXPECT_THAT(parsed.values, ElementsAre(Pair(3, double(int64_t{32} << 30))));
  ASSERT_EQ(parsed.skipped.size(), 3u);
  EXPECT_THAT(parsed.skipped[0], HasSubstr("negative"));
  EXPECT_THAT(parsed.skipped[1], HasSubstr("beyond"));
  EXPECT_THAT(parsed.skipped[2], HasSubstr("beyond"));
}

TEST(ParsePerDeviceGaugeTest, WrongMetricNameAndEmptyResponse) {
  auto wrong = ParsePerDeviceGauge(IntGauges("other", {{0, 1}}), kLibtpuHbmUsageMetric, GaugeKind::kInt);
  EXPECT_THAT(wrong.values, IsEmpty());
  ASSERT_EQ(wrong.skipped.size(), 1u);
  EXPECT_THAT(wrong.skipped[0], HasSubstr("answered with 'other'"));
  auto empty = ParsePerDeviceGauge(tpu_rt::MetricResponse(), kLibtpuHbmUsageMetric, GaugeKind::kInt);
  EXPECT_THAT(empty.values, IsEmpty());
}

TEST(JoinLibtpuMetricsTest, OneDevicePerChip) {
  PerDeviceValues used{{{0, 10}, {1, 20}}, {}};
  PerDeviceValues total{{{0, 100}, {1, 100}}, {}};
  PerDeviceValues duty{{{0, 50.5}, {1, 0}}, {}};
  auto chips = JoinLibtpuMetrics(used, total, duty);
  ASSERT_EQ(chips.size(), 2u);
  EXPECT_EQ(chips[0].duty_cycle_percent, 50.5);
  EXPECT_EQ(chips[0].hbm_used_bytes, 10);
  EXPECT_EQ(chips[1].hbm_total_bytes, 100);
}

TEST(JoinLibtpuMetricsTest, TwoDevicesPerChipAreSummed) {
  PerDeviceValues used{{{0, 1}, {1, 2}, {2, 3}, {3, 4}}, {}};
  PerDeviceValues total{{{0, 10}, {1, 10}, {2, 10}, {3, 10}}, {}};
  PerDeviceValues duty{{{0, 1.0}, {1, 2.0}}, {}};
  auto chips = JoinLibtpuMetrics(used, total, duty);
  ASSERT_EQ(chips.size(), 2u);
  EXPECT_EQ(chips[0].hbm_used_bytes, 3);
  EXPECT_EQ(chips[1].hbm_used_bytes, 7);
  EXPECT_EQ(chips[1].hbm_total_bytes, 20);
}

TEST(JoinLibtpuMetricsTest, MemoryWithoutDutyCycle) {
  auto chips = JoinLibtpuMetrics({{{2, 5}}, {}}, {}, {});
  ASSERT_EQ(chips.size(), 1u);
  EXPECT_EQ(chips[2].hbm_used_bytes, 5);
  EXPECT_FALSE(chips[2].duty_cycle_percent.has_value());
  EXPECT_FALSE(chips[2].hbm_total_bytes.has_value());
}

TEST(ParseMetricsPortsTest, DefaultsAndLists) {
  EXPECT_THAT(*ParseMetricsPorts(nullptr), ElementsAre(8431));
  EXPECT_THAT(*ParseMetricsPorts(""), ElementsAre(8431));
  EXPECT_THAT(*ParseMetricsPorts(" 8431, 8432 ,8431"), ElementsAre(8431, 8432));
}

TEST(ParseMetricsPortsTest, BadEntriesNameTheVariable) {
  for (const char* bad : {"84x1", "8431,,8432", "0", "65536", "-1", "8431;8432"}) {
    auto ports = ParseMetricsPorts(bad);
    ASSERT_FALSE(ports.ok()) << bad;
    EXPECT_EQ(ports.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(ports.status().message(), HasSubstr("TPU_RUNTIME_METRICS_PORTS"));
  }
}

TEST(MergePortReadingsTest, FirstPortWinsAndFailuresAreLeftOut) {
  std::vector<LibtpuPortReading> readings(3);
  readings[0].port = 8431;
  readings[0].chips = std::map<int, LibtpuChipStats>{{0, {.duty_cycle_percent = 1}}, {1, {}}};
  readings[1].port = 8432;
  readings[1].chips = absl::UnavailableError("no framework");
  readings[2].port = 8433;
  readings[2].chips = std::map<int, LibtpuChipStats>{{1, {.duty_cycle_percent = 9}}, {2, {}}};
  std::vector<std::string> skipped;
  auto merged = MergePortReadings(readings, &skipped);
  EXPECT_EQ(merged.size(), 3u);
  EXPECT_FALSE(merged[1].duty_cycle_percent.has_value());
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_THAT(skipped[0], HasSubstr("chip 1 reported by ports 8431 and 8433"));
}

// ---- The client against an in-process RuntimeMetricService ----

class FakeRuntimeMetricService final : public tpu_rt::RuntimeMetricService::Service {
 public:
  grpc::Status GetRuntimeMetric(grpc::ServerContext*, const tpu_rt::MetricRequest* request,
                                tpu_rt::MetricResponse* response) override {
    absl::MutexLock lock(&mu_);
    if (!status_.ok()) return status_;
    auto it = responses_.find(request->metric_name());
    if (it == responses_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown metric");
    *response = it->second;
    return grpc::Status::OK;
  }
  void Set(const std::string& name, tpu_rt::MetricResponse response) {
    absl::MutexLock lock(&mu_);
    responses_[name] = std::move(response);
  }
  void Fail(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    status_ = std::move(status);
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, tpu_rt::MetricResponse> responses_ ABSL_GUARDED_BY(mu_);
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

class LibtpuClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    // libtpu serves with local credentials; the same on the test's side shows the client's credentials match.
    builder.AddListeningPort("localhost:0", grpc::experimental::LocalServerCredentials(LOCAL_TCP), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override { server_->Shutdown(); }

  FakeRuntimeMetricService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(LibtpuClientTest, ReadsChipsOverLocalCredentials) {
  service_.Set(kLibtpuHbmUsageMetric, IntGauges(kLibtpuHbmUsageMetric, {{0, 1000}, {1, 2000}}));
  service_.Set(kLibtpuHbmTotalMetric, IntGauges(kLibtpuHbmTotalMetric, {{0, 33'550'000'000}, {1, 33'550'000'000}}));
  service_.Set(kLibtpuDutyCycleMetric, DoubleGauges(kLibtpuDutyCycleMetric, {{0, 87.5}, {1, 0.0}}));
  LibtpuClient client({port_});
  LibtpuPortReading reading = client.Read(port_);
  ASSERT_TRUE(reading.chips.ok()) << reading.chips.status();
  ASSERT_EQ(reading.chips->size(), 2u);
  EXPECT_EQ(reading.chips->at(0).duty_cycle_percent, 87.5);
  EXPECT_EQ(reading.chips->at(1).hbm_used_bytes, 2000);
  EXPECT_EQ(reading.chips->at(1).hbm_total_bytes, 33'550'000'000);
  EXPECT_THAT(reading.skipped, IsEmpty());
  // The channel is kept and reused.
  EXPECT_TRUE(client.Read(port_).chips.ok());
}

TEST_F(LibtpuClientTest, AMissingMetricLeavesTheOthers) {
  service_.Set(kLibtpuDutyCycleMetric, DoubleGauges(kLibtpuDutyCycleMetric, {{0, 12.0}}));
  LibtpuClient client({port_});
  LibtpuPortReading reading = client.Read(port_);
  ASSERT_TRUE(reading.chips.ok()) << reading.chips.status();
  EXPECT_EQ(reading.chips->at(0).duty_cycle_percent, 12.0);
  EXPECT_EQ(reading.skipped.size(), 2u);
}

TEST_F(LibtpuClientTest, UnavailableWhileNoFrameworkHoldsTheTpu) {
  service_.Fail(grpc::Status(grpc::StatusCode::UNAVAILABLE, "TPU not in use"));
  LibtpuClient client({port_});
  LibtpuPortReading reading = client.Read(port_);
  ASSERT_FALSE(reading.chips.ok());
  EXPECT_EQ(reading.chips.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(reading.chips.status().message(), HasSubstr("TPU not in use"));
}

TEST_F(LibtpuClientTest, NothingListeningIsUnavailable) {
  const int port = port_;
  server_->Shutdown();
  server_->Wait();
  LibtpuClient client({port}, "localhost", 500);
  LibtpuPortReading reading = client.Read(port);
  ASSERT_FALSE(reading.chips.ok());
  EXPECT_EQ(reading.chips.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace libtpu_metrics_test
}  // namespace torus::metrics
