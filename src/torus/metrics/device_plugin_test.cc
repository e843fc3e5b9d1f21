#include "torus/metrics/device_plugin.h"

#include <httplib.h>

#include <cmath>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torus::metrics {
namespace device_plugin_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

const std::set<std::string> kFamilies = {"duty_cycle", "memory_used", "tensorcore_utilization_node"};

TEST(ParsePrometheusTextTest, ParsesLabelsValuesAndTimestamps) {
  const std::string text = R"text(# HELP duty_cycle Time over the past sample period during which the TPU was busy.
# TYPE duty_cycle gauge
duty_cycle{accelerator_id="123-0",make="cloud-tpu",model="tpu-v6e-slice"} 37.5
duty_cycle{accelerator_id="123-1",pod="a \"quoted\" \\ name\nx",} 0 1712345678901

  memory_used	{ accelerator_id = "123-0" }	1.5e9
memory_used NaN
memory_used{accelerator_id="123-2"} +Inf
go_goroutines 17
some_histogram_bucket{le="0.5",weird=unparsed stuff} 3
)text";
  auto samples = ParsePrometheusText(text, kFamilies);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 5u);
  EXPECT_EQ((*samples)[0].name, "duty_cycle");
  EXPECT_THAT((*samples)[0].labels, ElementsAre(Pair("accelerator_id", "123-0"), Pair("make", "cloud-tpu"),
                                                Pair("model", "tpu-v6e-slice")));
  EXPECT_EQ((*samples)[0].value, 37.5);
  EXPECT_FALSE((*samples)[0].timestamp_ms.has_value());
  EXPECT_THAT((*samples)[1].labels, ElementsAre(Pair("accelerator_id", "123-1"), Pair("pod", "a \"quoted\" \\ name\nx")));
  EXPECT_EQ((*samples)[1].timestamp_ms, 1712345678901);
  EXPECT_EQ((*samples)[2].value, 1.5e9);
  EXPECT_THAT((*samples)[3].labels, IsEmpty());
  EXPECT_TRUE(std::isnan((*samples)[3].value));
  EXPECT_TRUE(std::isinf((*samples)[4].value));
}

TEST(ParsePrometheusTextTest, MalformedLinesOfWantedFamiliesFailWithTheLineNumber) {
  struct Case {
    std::string text;
    std::string error;
  };
  const Case cases[] = {
      {"duty_cycle", "line 1: duty_cycle: missing value"},
      {"# c\nduty_cycle{} abc", "line 2: duty_cycle: bad value 'abc'"},
      {"duty_cycle{accelerator_id=\"1-0} 3", "line 1: label accelerator_id: unterminated value"},
      {"duty_cycle{accelerator_id=1} 3", "line 1: label accelerator_id: value must be quoted"},
      {"duty_cycle{accelerator_id=\"\\t\"} 3", "line 1: label accelerator_id: unknown escape \\t"},
      {"duty_cycle{=\"x\"} 3", "line 1: expected a label name"},
      {"duty_cycle{a=\"x\" b=\"y\"} 3", "line 1: expected ',' or '}' after label a"},
      {"duty_cycle{a=\"x\"} 3 12.5", "line 1: duty_cycle: bad timestamp '12.5'"},
      {"duty_cycle{a=\"x\"} 3 12 extra", "line 1: duty_cycle: unexpected text after the timestamp"},
      {"\n\n{a=\"x\"} 3", "line 3: expected a metric name"},
  };
  for (const Case& c : cases) {
    auto samples = ParsePrometheusText(c.text, kFamilies);
    ASSERT_FALSE(samples.ok()) << c.text;
    EXPECT_EQ(samples.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(samples.status().message(), HasSubstr(c.error)) << c.text;
  }
}

TEST(ParsePrometheusTextTest, EmptyTextHasNoSamples) {
  auto samples = ParsePrometheusText("", kFamilies);
  ASSERT_TRUE(samples.ok());
  EXPECT_THAT(*samples, IsEmpty());
}

PromSample Sample(std::string name, std::string id, double value) {
  PromSample s;
  s.name = std::move(name);
  if (!id.empty()) s.labels = {{"make", "cloud-tpu"}, {"accelerator_id", std::move(id)}};
  s.value = value;
  return s;
}

TEST(ExtractPluginChipsTest, ChipIsTheTrailingIndexAndNodeVariantsWin) {
  auto chips = ExtractPluginChips({
      Sample("tensorcore_utilization", "4804690994094478883-0", 10),
      Sample("tensorcore_utilization_node", "4804690994094478883-0", 11),
      Sample("tensorcore_utilization", "4804690994094478883-3", 30),
      Sample("memory_bandwidth_utilization_node", "4804690994094478883-3", 5),
      Sample("memory_used", "4804690994094478883-3", 1e9),
      Sample("memory_total_node", "4804690994094478883-3", 3.2e10),
      Sample("duty_cycle_node", "4804690994094478883-3", 99),
  });
  EXPECT_THAT(chips.skipped, IsEmpty());
  ASSERT_EQ(chips.chips.size(), 2u);
  EXPECT_EQ(chips.chips[0].tensorcore_utilization_percent, 11);
  EXPECT_EQ(chips.chips[3].tensorcore_utilization_percent, 30);
  EXPECT_EQ(chips.chips[3].memory_bandwidth_utilization_percent, 5);
  EXPECT_EQ(chips.chips[3].memory_used_bytes, 1e9);
  EXPECT_EQ(chips.chips[3].memory_total_bytes, 3.2e10);
  EXPECT_EQ(chips.chips[3].duty_cycle_percent, 99);
}

TEST(ExtractPluginChipsTest, SkipsBadIdsDuplicatesAndNaN) {
  auto chips = ExtractPluginChips({
      Sample("duty_cycle", "", 1),
      Sample("duty_cycle", "nodash", 1),
      Sample("duty_cycle", "123-x", 1),
      Sample("duty_cycle", "123-1", 5),
      Sample("duty_cycle", "123-1", 6),
      Sample("duty_cycle_node", "123-2", std::nan("")),
      Sample("duty_cycle", "123-2", 7),
  });
  ASSERT_EQ(chips.skipped.size(), 4u);
  EXPECT_THAT(chips.skipped[0], HasSubstr("no accelerator_id"));
  EXPECT_THAT(chips.skipped[1], HasSubstr("'nodash' is not <instance id>-<device index>"));
  EXPECT_THAT(chips.skipped[3], HasSubstr("chip 1 listed twice"));
  EXPECT_EQ(chips.chips[1].duty_cycle_percent, 5);
  EXPECT_EQ(chips.chips[2].duty_cycle_percent, 7);  // the NaN node value gives way
}

TEST(ParseDevicePluginAddrTest, AcceptedForms) {
  auto plain = ParseDevicePluginAddr("10.0.0.5:2112");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->scheme_host_port, "http://10.0.0.5:2112");
  EXPECT_EQ(plain->path, "/metrics");
  auto url = ParseDevicePluginAddr(" http://node:2112/custom/metrics ");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->scheme_host_port, "http://node:2112");
  EXPECT_EQ(url->path, "/custom/metrics");
  auto slash = ParseDevicePluginAddr("http://node:2112/");
  ASSERT_TRUE(slash.ok());
  EXPECT_EQ(slash->path, "/metrics");
  for (const char* bad : {"", "  ", "https://node:2112", ":2112", "http:///metrics"}) {
    auto r = ParseDevicePluginAddr(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("TPU_DEVICE_PLUGIN_ADDR")) << bad;
  }
}

class DevicePluginClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(body_, "text/plain; version=0.0.4");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  void TearDown() override {
    server_.stop();
    thread_.join();
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::string body_;
};

TEST_F(DevicePluginClientTest, FetchesAndExtracts) {
  body_ = "# TYPE duty_cycle_node gauge\nduty_cycle_node{accelerator_id=\"77-1\",model=\"tpu-v6e-slice\"} 12.5\n";
  auto target = ParseDevicePluginAddr("127.0.0.1:" + std::to_string(port_));
  ASSERT_TRUE(target.ok());
  auto chips = DevicePluginClient(*target).Read();
  ASSERT_TRUE(chips.ok()) << chips.status();
  EXPECT_EQ(chips->chips.at(1).duty_cycle_percent, 12.5);
}

TEST_F(DevicePluginClientTest, MalformedTextAndMissingPathAreErrors) {
  body_ = "duty_cycle{accelerator_id=\"77-1} 1\n";
  auto target = ParseDevicePluginAddr("127.0.0.1:" + std::to_string(port_));
  ASSERT_TRUE(target.ok());
  auto bad = DevicePluginClient(*target).Read();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("line 1"));
  auto missing = DevicePluginClient(*ParseDevicePluginAddr("http://127.0.0.1:" + std::to_string(port_) + "/nope"))
                     .Read();
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(missing.status().message(), HasSubstr("HTTP 404"));
}

TEST(DevicePluginClientUnreachableTest, Unavailable) {
  // Port 1 on loopback: nothing listens there.
  auto r = DevicePluginClient(*ParseDevicePluginAddr("127.0.0.1:1"), 300).Read();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace device_plugin_test
}  // namespace torus::metrics
