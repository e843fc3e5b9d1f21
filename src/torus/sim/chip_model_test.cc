#include "torus/sim/chip_model.h"

#include <gtest/gtest.h>

namespace torus::sim {
namespace chip_model_test {

constexpr int64_t kGiB = int64_t{1} << 30;

ChipLoad Held(double cpu_percent, int64_t rss_bytes) {
  return ChipLoad{.holders = {42}, .cpu_percent = cpu_percent, .rss_bytes = rss_bytes};
}

TEST(ChipModelTest, HbmTotalsReadBelowSpec) {
  EXPECT_EQ(HbmTotalBytesPerDevice(TpuGeneration::kV6e), 33'554'432'000);
  EXPECT_EQ(HbmTotalBytesPerDevice(TpuGeneration::kV5e), 16 * kGiB);
  EXPECT_EQ(HbmTotalBytesPerDevice(TpuGeneration::kV4), 32 * kGiB);
  EXPECT_EQ(HbmTotalBytesPerDevice(TpuGeneration::kV5p), 95 * kGiB);
  EXPECT_EQ(HbmTotalBytesPerDevice(TpuGeneration::kTpu7x), 96 * kGiB);
}

TEST(ChipModelTest, ParseGeneration) {
  EXPECT_EQ(*ParseGeneration("v6e"), TpuGeneration::kV6e);
  EXPECT_EQ(*ParseGeneration("V5E"), TpuGeneration::kV5e);
  EXPECT_EQ(*ParseGeneration("v5litepod"), TpuGeneration::kV5e);
  EXPECT_EQ(*ParseGeneration("v5p"), TpuGeneration::kV5p);
  EXPECT_EQ(*ParseGeneration("v4"), TpuGeneration::kV4);
  EXPECT_EQ(*ParseGeneration("tpu7x"), TpuGeneration::kTpu7x);
  EXPECT_EQ(*ParseGeneration("TPU-V6E"), TpuGeneration::kV6e);
  auto bad = ParseGeneration("v9");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("use v4, v5e"), std::string::npos) << bad.status().message();
}

TEST(ChipModelTest, IdleHostReportsZeroUsageAndFullTotals) {
  ChipModel model({.generation = TpuGeneration::kV6e, .chips = 4});
  TpuSnapshot s = model.Update(std::vector<ChipLoad>(4), 1.0, 123);
  EXPECT_EQ(s.duty_cycle_percent, std::vector<double>(4, 0.0));
  EXPECT_EQ(s.hbm_used_bytes, std::vector<int64_t>(4, 0));
  EXPECT_EQ(s.hbm_total_bytes, std::vector<int64_t>(4, 33'554'432'000));
  EXPECT_EQ(s.unix_nanos, 123);
}

TEST(ChipModelTest, DutyCycleFollowsCpuSmoothlyWithinBounds) {
  ChipModel model({.generation = TpuGeneration::kV6e, .chips = 2, .smoothing = 0.5});
  std::vector<ChipLoad> loads = {Held(80, 0), ChipLoad{}};
  double previous = 0;
  for (int t = 0; t < 20; ++t) {
    TpuSnapshot s = model.Update(loads, t, 0);
    EXPECT_GE(s.duty_cycle_percent[0], 0);
    EXPECT_LE(s.duty_cycle_percent[0], 100);
    EXPECT_EQ(s.duty_cycle_percent[1], 0) << "an unheld chip is idle";
    if (t == 0) {
      EXPECT_NEAR(s.duty_cycle_percent[0], 36, 2.01);  // half way to 72, ± noise
    }
    previous = s.duty_cycle_percent[0];
  }
  EXPECT_NEAR(previous, 72, 2.01) << "settles at cpu × 0.9, ± noise";

  // Saturated: never above 100. Released: back to 0 at once.
  loads[0] = Held(400, 0);
  for (int t = 20; t < 30; ++t) EXPECT_LE(model.Update(loads, t, 0).duty_cycle_percent[0], 100);
  EXPECT_GE(model.Update(loads, 30, 0).duty_cycle_percent[0], 97.9);
  loads[0] = ChipLoad{};
  EXPECT_EQ(model.Update(loads, 31, 0).duty_cycle_percent[0], 0);
}

TEST(ChipModelTest, HbmUsedHasABaseFollowsRssAndIsCapped) {
  ChipModel model({.generation = TpuGeneration::kV5e, .chips = 2});
  TpuSnapshot s = model.Update({Held(0, 0), Held(0, kGiB / 2)}, 0, 0);
  EXPECT_EQ(s.hbm_used_bytes[0], kGiB) << "1/16 of 16 GiB once held";
  EXPECT_EQ(s.hbm_used_bytes[1], kGiB + 4 * kGiB) << "plus 8 × RSS";
  s = model.Update({Held(0, 100 * kGiB), ChipLoad{}}, 1, 0);
  EXPECT_EQ(s.hbm_used_bytes[0], 16 * kGiB) << "capped at total";
  EXPECT_EQ(s.hbm_used_bytes[1], 0);
}

TEST(ChipModelTest, Tpu7xReportsMemoryPerDeviceAndDutyPerChip) {
  ChipModel model({.generation = TpuGeneration::kTpu7x, .chips = 2});
  TpuSnapshot s = model.Update({ChipLoad{}, Held(50, 0)}, 0, 0);
  ASSERT_EQ(s.duty_cycle_percent.size(), 2u);
  ASSERT_EQ(s.hbm_used_bytes.size(), 4u);
  EXPECT_EQ(s.hbm_used_bytes[0], 0);
  EXPECT_EQ(s.hbm_used_bytes[1], 0);
  EXPECT_EQ(s.hbm_used_bytes[2], 6 * kGiB) << "1/16 of the chip's 192 GiB, split over its two devices";
  EXPECT_EQ(s.hbm_used_bytes[3], 6 * kGiB);
  EXPECT_EQ(s.hbm_total_bytes[3], 96 * kGiB);
}

}  // namespace chip_model_test
}  // namespace torus::sim
