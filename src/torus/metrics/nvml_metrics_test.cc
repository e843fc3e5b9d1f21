#include "torus/metrics/nvml_metrics.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torus::metrics {
namespace nvml_metrics_test {

using ::testing::HasSubstr;

TEST(NvmlMetricsTest, AbsentLibraryIsUnavailable) {
  auto nvml = NvmlMetrics::Open("libnvidia-ml-does-not-exist.so.1");
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(nvml.status().message(), HasSubstr("cannot load libnvidia-ml-does-not-exist.so.1"));
}

TEST(NvmlMetricsTest, LibraryWithoutNvmlFunctionsIsUnavailable) {
  // libdl-loadable, but not NVML: every function is missing.
  auto nvml = NvmlMetrics::Open("libz.so.1");
  if (nvml.status().message().find("cannot load") != std::string::npos) GTEST_SKIP() << "no libz.so.1 here";
  ASSERT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(nvml.status().message(), HasSubstr("lacks nvmlInit_v2"));
}

TEST(NvmlMetricsTest, ReadsEveryGpuOfTheFakeLibrary) {
  auto nvml = NvmlMetrics::Open(FAKE_NVML_PATH);
  ASSERT_TRUE(nvml.ok()) << nvml.status();
  auto gpus = (*nvml)->Sample();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 2u);
  const GpuStats& g0 = (*gpus)[0];
  EXPECT_EQ(g0.index, 0);
  EXPECT_EQ(g0.utilization_percent, 40);
  EXPECT_EQ(g0.memory_used_bytes, double(1ull << 30));
  EXPECT_EQ(g0.memory_total_bytes, double(16ull << 30));
  EXPECT_EQ(g0.power_watts, 72.5);
  EXPECT_EQ(g0.temperature_celsius, 60);
  const GpuStats& g1 = (*gpus)[1];
  EXPECT_EQ(g1.index, 1);
  EXPECT_EQ(g1.utilization_percent, 41);
  EXPECT_FALSE(g1.power_watts.has_value());  // no sensor: left out, not zero
  EXPECT_EQ(g1.temperature_celsius, 61);
}

}  // namespace nvml_metrics_test
}  // namespace torus::metrics
