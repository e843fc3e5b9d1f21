// The simulated RuntimeMetricService served in-process on loopback with local credentials, read over gRPC as the
// agent reads libtpu's.
#include "torus/sim/metric_service.h"

#include <gtest/gtest.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "torus/sim/query.h"

namespace torus::sim {
namespace metric_service_test {

namespace runtime = tpu::monitoring::runtime;

TpuSnapshot TwoChips() {
  return TpuSnapshot{.duty_cycle_percent = {12.5, 0},
                     .hbm_used_bytes = {2'000'000'000, 0},
                     .hbm_total_bytes = {33'554'432'000, 33'554'432'000},
                     .unix_nanos = 1'700'000'000'123'456'789};
}

class MetricServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_ = std::make_unique<SimulatedMetricService>(TwoChips());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", LocalTcpServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(port_, 0);
    address_ = absl::StrCat("127.0.0.1:", port_);
    stub_ = runtime::RuntimeMetricService::NewStub(grpc::CreateChannel(address_, LocalTcpChannelCredentials()));
  }
  void TearDown() override { server_->Shutdown(); }

  grpc::Status Get(const std::string& name, runtime::MetricResponse& response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    runtime::MetricRequest request;
    request.set_metric_name(name);
    return stub_->GetRuntimeMetric(&context, request, &response);
  }

  std::unique_ptr<SimulatedMetricService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::string address_;
  std::unique_ptr<runtime::RuntimeMetricService::Stub> stub_;
};

TEST_F(MetricServiceTest, HbmUsageIsAnIntGaugePerDevice) {
  runtime::MetricResponse response;
  grpc::Status s = Get(kHbmUsageMetric, response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const runtime::TPUMetric& metric = response.metric();
  EXPECT_EQ(metric.name(), kHbmUsageMetric);
  EXPECT_FALSE(metric.description().empty());
  ASSERT_EQ(metric.metrics_size(), 2);
  for (int d = 0; d < 2; ++d) {
    const runtime::Metric& m = metric.metrics(d);
    EXPECT_EQ(m.attribute().key(), "device-id");
    EXPECT_EQ(m.attribute().value().int_attr(), d);
    ASSERT_EQ(m.gauge().value_case(), runtime::Gauge::kAsInt);
    EXPECT_EQ(m.timestamp().seconds(), 1'700'000'000);
    EXPECT_EQ(m.timestamp().nanos(), 123'456'789);
  }
  EXPECT_EQ(metric.metrics(0).gauge().as_int(), 2'000'000'000);
  EXPECT_EQ(metric.metrics(1).gauge().as_int(), 0);
}

TEST_F(MetricServiceTest, TotalsAndDutyCycle) {
  runtime::MetricResponse total;
  ASSERT_TRUE(Get(kHbmTotalMetric, total).ok());
  ASSERT_EQ(total.metric().metrics_size(), 2);
  EXPECT_EQ(total.metric().metrics(1).gauge().as_int(), 33'554'432'000);

  runtime::MetricResponse duty;
  ASSERT_TRUE(Get(kDutyCycleMetric, duty).ok());
  ASSERT_EQ(duty.metric().metrics_size(), 2);
  ASSERT_EQ(duty.metric().metrics(0).gauge().value_case(), runtime::Gauge::kAsDouble);
  EXPECT_DOUBLE_EQ(duty.metric().metrics(0).gauge().as_double(), 12.5);
  EXPECT_EQ(duty.metric().metrics(1).attribute().value().int_attr(), 1);
}

TEST_F(MetricServiceTest, PublishReplacesValues) {
  TpuSnapshot next = TwoChips();
  next.duty_cycle_percent = {0, 77};
  service_->Publish(next);
  runtime::MetricResponse duty;
  ASSERT_TRUE(Get(kDutyCycleMetric, duty).ok());
  EXPECT_DOUBLE_EQ(duty.metric().metrics(1).gauge().as_double(), 77);
}

TEST_F(MetricServiceTest, UnknownMetricIsNotFound) {
  runtime::MetricResponse response;
  grpc::Status s = Get("tpu.runtime.hbm.utilization.percent", response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("tpu.runtime.hbm.utilization.percent"), std::string::npos);
}

TEST_F(MetricServiceTest, ListSupportedMetricsFilters) {
  auto list = [&](const std::string& filter, runtime::ListSupportedMetricsResponse& response) {
    grpc::ClientContext context;
    runtime::ListSupportedMetricsRequest request;
    request.set_filter(filter);
    return stub_->ListSupportedMetrics(&context, request, &response);
  };
  runtime::ListSupportedMetricsResponse all;
  ASSERT_TRUE(list("", all).ok());
  ASSERT_EQ(all.supported_metric_size(), 3);
  runtime::ListSupportedMetricsResponse hbm;
  ASSERT_TRUE(list("hbm\\.memory", hbm).ok());
  ASSERT_EQ(hbm.supported_metric_size(), 2);
  EXPECT_EQ(hbm.supported_metric(0).metric_name(), kHbmTotalMetric);
  runtime::ListSupportedMetricsResponse bad;
  EXPECT_EQ(list("(", bad).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(MetricServiceTest, QueryPrintsEveryMetricAsJson) {
  auto json = QueryMetrics(address_, std::chrono::seconds(5));
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ((*json)["address"], address_);
  EXPECT_EQ((*json)["supported"].size(), 3u);
  EXPECT_EQ((*json)["metrics"][kHbmUsageMetric][0]["device_id"], 0);
  EXPECT_EQ((*json)["metrics"][kHbmUsageMetric][0]["value"], 2'000'000'000);
  EXPECT_DOUBLE_EQ((*json)["metrics"][kDutyCycleMetric][0]["value"].get<double>(), 12.5);
}

TEST_F(MetricServiceTest, PlaintextClientAlsoReads) {
  // Local credentials do no handshake (plaintext on the wire, peer must be on loopback), so a client with
  // insecure credentials reads the simulator too, as it would libtpu.
  auto stub = runtime::RuntimeMetricService::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  runtime::MetricRequest request;
  request.set_metric_name(kDutyCycleMetric);
  runtime::MetricResponse response;
  grpc::Status s = stub->GetRuntimeMetric(&context, request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.metric().metrics_size(), 2);
}

TEST(QueryTest, UnreachableAddressNamesIt) {
  auto json = QueryMetrics("127.0.0.1:1", std::chrono::milliseconds(500));
  ASSERT_FALSE(json.ok());
  EXPECT_NE(json.status().message().find("127.0.0.1:1"), std::string::npos);
}

}  // namespace metric_service_test
}  // namespace torus::sim
