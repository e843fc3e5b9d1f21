#include "torus/common/device_env.h"

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torus/common/tpu_shape.h"

namespace torus {
namespace device_env_test {

using Env = std::map<std::string, std::string>;

constexpr TpuGeneration kV4 = TpuGeneration::kV4;
constexpr TpuGeneration kV5e = TpuGeneration::kV5e;
constexpr TpuGeneration kV5p = TpuGeneration::kV5p;
constexpr TpuGeneration kV6e = TpuGeneration::kV6e;
constexpr TpuGeneration k7x = TpuGeneration::kTpu7x;

const std::vector<std::string> kSubHostUnset = {
    "MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES", "MEGASCALE_PORT", "MEGASCALE_SLICE_ID",
    "TPU_PROCESS_ADDRESSES",         "TPU_PROCESS_PORT",
};

EnvChange SubHost(const std::string& visible, const std::string& bounds) {
  return EnvChange{{{"TPU_VISIBLE_CHIPS", visible},
                    {"TPU_CHIPS_PER_HOST_BOUNDS", bounds},
                    {"TPU_HOST_BOUNDS", "1,1,1"},
                    {"TPU_WORKER_ID", "0"},
                    {"TPU_WORKER_HOSTNAMES", "localhost"}},
                   kSubHostUnset};
}

const EnvChange kWholeHost{{}, {"TPU_VISIBLE_CHIPS"}};
const EnvChange kWholeHostDroppingBounds{{}, {"TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS", "TPU_VISIBLE_CHIPS"}};
const EnvChange kNoChips{{{"JAX_PLATFORMS", "cpu"}, {"PJRT_DEVICE", "CPU"}}, {}};

std::string Describe(const EnvChange& change) {
  return absl::StrCat("set {", absl::StrJoin(change.set, ", ", absl::PairFormatter("=")), "} unset {",
                      absl::StrJoin(change.unset, ", "), "}");
}

TEST(TpuIsolationEnvTest, SetsAndRemovesPerChipCount) {
  struct Case {
    std::string name;
    TpuGeneration gen;
    int host_chips;
    std::vector<int> chips;
    Env inherited;
    EnvChange want;
  };
  const std::vector<Case> cases = {
      {"1 chip, first", kV6e, 4, {0}, {}, SubHost("0", "1,1,1")},
      {"1 chip, last of 4", kV6e, 4, {3}, {}, SubHost("3", "1,1,1")},
      {"1 chip of 8", kV5e, 8, {5}, {}, SubHost("5", "1,1,1")},
      {"1 chip of v4", kV4, 4, {2}, {}, SubHost("2", "1,1,1")},
      {"1 chip of TPU7x", k7x, 4, {1}, {}, SubHost("1", "1,1,1")},
      {"2 chips", kV6e, 4, {2, 3}, {}, SubHost("2,3", "1,2,1")},
      {"2 chips unordered", kV5p, 4, {1, 0}, {}, SubHost("0,1", "1,2,1")},
      {"2 chips of 8", kV6e, 8, {6, 7}, {}, SubHost("6,7", "1,2,1")},
      {"4 of 8, low", kV6e, 8, {0, 1, 2, 3}, {}, SubHost("0,1,2,3", "2,2,1")},
      {"4 of 8, high", kV5e, 8, {4, 5, 6, 7}, {}, SubHost("4,5,6,7", "2,2,1")},
      {"whole 4-chip host", kV6e, 4, {0, 1, 2, 3}, {}, kWholeHost},
      {"whole 8-chip host", kV6e, 8, {0, 1, 2, 3, 4, 5, 6, 7}, {}, kWholeHost},
      {"whole 1-chip host", kV6e, 1, {0}, {}, kWholeHost},
      {"whole TPU7x host", k7x, 4, {3, 2, 1, 0}, {}, kWholeHost},
      {"whole host keeps its own multi-host bounds",
       kV4,
       4,
       {0, 1, 2, 3},
       {{"TPU_CHIPS_PER_HOST_BOUNDS", "2,2,1"}, {"TPU_HOST_BOUNDS", "2,2,4"}},
       kWholeHost},
      {"whole host drops stale 1-chip bounds",
       kV6e,
       4,
       {0, 1, 2, 3},
       {{"TPU_CHIPS_PER_HOST_BOUNDS", "1,1,1"}, {"TPU_HOST_BOUNDS", "1,1,1"}},
       kWholeHostDroppingBounds},
      {"whole host drops stale 2-chip bounds",
       kV6e,
       8,
       {0, 1, 2, 3, 4, 5, 6, 7},
       {{"TPU_CHIPS_PER_HOST_BOUNDS", "1,2,1"}},
       kWholeHostDroppingBounds},
      {"whole 8-chip host drops stale 4-chip bounds",
       kV6e,
       8,
       {0, 1, 2, 3, 4, 5, 6, 7},
       {{"TPU_CHIPS_PER_HOST_BOUNDS", "2,2,1"}},
       kWholeHostDroppingBounds},
      {"whole 1-chip host keeps 1-chip bounds", kV5e, 1, {0}, {{"TPU_CHIPS_PER_HOST_BOUNDS", "1,1,1"}}, kWholeHost},
      {"whole host ignores unparseable bounds",
       kV6e,
       4,
       {0, 1, 2, 3},
       {{"TPU_CHIPS_PER_HOST_BOUNDS", "x"}},
       kWholeHost},
      {"sub-host ignores inherited", kV6e, 4, {0}, {{"TPU_CHIPS_PER_HOST_BOUNDS", "2,2,1"}}, SubHost("0", "1,1,1")},
      {"no chips", kV6e, 4, {}, {}, kNoChips},
      {"no chips on a host that found none", kV6e, 0, {}, {}, kNoChips},
  };
  for (const Case& c : cases) {
    absl::StatusOr<EnvChange> got = TpuIsolationEnv(c.gen, c.host_chips, c.chips, c.inherited);
    ASSERT_TRUE(got.ok()) << c.name << ": " << got.status();
    EXPECT_EQ(*got, c.want) << c.name << "\n got: " << Describe(*got) << "\nwant: " << Describe(c.want);
  }
}

TEST(TpuIsolationEnvTest, RejectsBadBlocks) {
  struct Case {
    TpuGeneration gen;
    int host_chips;
    std::vector<int> chips;
    std::string message;
  };
  const std::vector<Case> cases = {
      {kV6e, 8, {0, 1, 2}, "a worker cannot hold 3 of a host's 8 chips; use 1, 2, 4 or 8 chips, or the whole host"},
      {kV6e,
       8,
       {0, 1, 2, 3, 4, 5},
       "a worker cannot hold 6 of a host's 8 chips; use 1, 2, 4 or 8 chips, or the whole host"},
      {kV6e, 4, {4}, "TPU chip 4 is out of range; the host has 4 chips (0..3)"},
      {kV6e, 4, {-1}, "TPU chip -1 is out of range; the host has 4 chips (0..3)"},
      {kV6e, 1, {1}, "TPU chip 1 is out of range; the host has 1 chip (0..0)"},
      {kV6e, 4, {1, 1}, "TPU chip 1 is given twice"},
      {kV6e, 4, {1, 2}, "TPU chips 1,2 are not an aligned block; a worker of 2 chips holds chips 2*j..2*j+1"},
      {kV6e, 4, {0, 2}, "TPU chips 0,2 are not an aligned block; a worker of 2 chips holds chips 2*j..2*j+1"},
      {kV6e, 8, {2, 3, 4, 5}, "TPU chips 2,3,4,5 are not an aligned block; a worker of 4 chips holds chips 4*j..4*j+3"},
      {kV6e, 8, {0, 1, 2, 4}, "TPU chips 0,1,2,4 are not an aligned block; a worker of 4 chips holds chips 4*j..4*j+3"},
      {kV4, 8, {0}, "a TPU-V4 host cannot have 8 chips; valid: 4"},
      {k7x, 8, {0}, "a TPU-V7X host cannot have 8 chips; valid: 1, 4"},
      {kV6e, 2, {0}, "a TPU-V6E host cannot have 2 chips; valid: 1, 4, 8"},
      {kV6e, 0, {0}, "a TPU-V6E host cannot have 0 chips; valid: 1, 4, 8"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<EnvChange> got = TpuIsolationEnv(c.gen, c.host_chips, c.chips);
    ASSERT_FALSE(got.ok()) << c.message;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(got.status().message(), c.message);
  }
}

TEST(EnvChangeTest, ApplyToRemovesThenSets) {
  Env env = {{"MEGASCALE_PORT", "8081"}, {"TPU_PROCESS_PORT", "8471"}, {"TPU_VISIBLE_CHIPS", "0,1,2,3"},
             {"TPU_WORKER_ID", "3"},     {"TPU_TOPOLOGY", "4x4"},      {"PATH", "/bin"}};
  absl::StatusOr<EnvChange> change = TpuIsolationEnv(kV6e, 4, {2, 3});
  ASSERT_TRUE(change.ok());
  change->ApplyTo(env);
  EXPECT_EQ(env, (Env{{"PATH", "/bin"},
                      {"TPU_CHIPS_PER_HOST_BOUNDS", "1,2,1"},
                      {"TPU_HOST_BOUNDS", "1,1,1"},
                      {"TPU_TOPOLOGY", "4x4"},
                      {"TPU_VISIBLE_CHIPS", "2,3"},
                      {"TPU_WORKER_HOSTNAMES", "localhost"},
                      {"TPU_WORKER_ID", "0"}}));
}

TEST(GpuIsolationEnvTest, VisibleDevicesAscendingInPciOrder) {
  const std::vector<std::pair<std::vector<int>, std::string>> cases = {
      {{}, ""}, {{0}, "0"}, {{3, 1}, "1,3"}, {{2, 0, 2, 1}, "0,1,2"}, {{7, 6, 5, 4}, "4,5,6,7"}};
  for (const auto& [gpus, visible] : cases) {
    EXPECT_EQ(GpuIsolationEnv(gpus),
              (EnvChange{{{"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}, {"CUDA_VISIBLE_DEVICES", visible}}, {}}))
        << visible;
  }
}

std::vector<bool> Busy(int host_chips, const std::vector<int>& busy_chips) {
  std::vector<bool> busy(host_chips, false);
  for (int i : busy_chips) busy[i] = true;
  return busy;
}

TEST(AllocateChipBlockTest, LowestFreeAlignedBlock) {
  struct Case {
    int host_chips;
    std::vector<int> busy;
    int k;
    std::vector<int> want;
  };
  const std::vector<Case> cases = {
      {8, {}, 1, {0}},           {8, {0}, 1, {1}},
      {8, {0, 1, 2, 4}, 1, {3}}, {8, {0}, 2, {2, 3}},
      {8, {1}, 2, {2, 3}},       {8, {0, 3}, 2, {4, 5}},
      {8, {1, 2, 5, 6}, 1, {0}}, {8, {0}, 4, {4, 5, 6, 7}},
      {8, {}, 4, {0, 1, 2, 3}},  {8, {}, 8, {0, 1, 2, 3, 4, 5, 6, 7}},
      {4, {}, 4, {0, 1, 2, 3}},  {4, {0, 1}, 2, {2, 3}},
      {4, {0, 1, 2}, 1, {3}},    {1, {}, 1, {0}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<int>> got = AllocateChipBlock(Busy(c.host_chips, c.busy), c.k);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, c.want) << c.k << " of " << c.host_chips << ", busy " << absl::StrJoin(c.busy, ",");
  }
}

TEST(AllocateChipBlockTest, ReportsExhaustionAndBadSizes) {
  struct Case {
    int host_chips;
    std::vector<int> busy;
    int k;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {8,
       {1, 2, 5, 6},
       2,
       absl::StatusCode::kResourceExhausted,
       "no free aligned block of 2 chips on a host of 8 chips; busy chips: 1,2,5,6"},
      {8,
       {0},
       8,
       absl::StatusCode::kResourceExhausted,
       "no free aligned block of 8 chips on a host of 8 chips; busy chips: 0"},
      {8,
       {3, 4},
       4,
       absl::StatusCode::kResourceExhausted,
       "no free aligned block of 4 chips on a host of 8 chips; busy chips: 3,4"},
      {4,
       {0, 1, 2, 3},
       1,
       absl::StatusCode::kResourceExhausted,
       "no free aligned block of 1 chip on a host of 4 chips; busy chips: 0,1,2,3"},
      {8,
       {},
       3,
       absl::StatusCode::kInvalidArgument,
       "cannot allocate 3 chips on a host of 8 chips; use 1, 2, 4 or 8 chips, or the whole host"},
      {8,
       {},
       0,
       absl::StatusCode::kInvalidArgument,
       "cannot allocate 0 chips on a host of 8 chips; use 1, 2, 4 or 8 chips, or the whole host"},
      {4,
       {},
       8,
       absl::StatusCode::kInvalidArgument,
       "cannot allocate 8 chips on a host of 4 chips; use 1, 2, 4 or 8 chips, or the whole host"},
      {0,
       {},
       1,
       absl::StatusCode::kInvalidArgument,
       "cannot allocate 1 chip on a host of 0 chips; use 1, 2, 4 or 8 chips, or the whole host"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<int>> got = AllocateChipBlock(Busy(c.host_chips, c.busy), c.k);
    ASSERT_FALSE(got.ok()) << c.message;
    EXPECT_EQ(got.status().code(), c.code) << c.message;
    EXPECT_EQ(got.status().message(), c.message);
  }
}

TEST(ValidateTpuRequestTest, AcceptsWholeBlocksAndWholeHosts) {
  const std::vector<std::pair<double, int>> cases = {{0, 0}, {1, 0}, {2, 0}, {4, 0}, {8, 0}, {1, 4},
                                                     {2, 4}, {4, 4}, {8, 8}, {1, 1}, {0, 4}};
  for (const auto& [amount, host_chips] : cases) {
    EXPECT_TRUE(ValidateTpuRequest(amount, host_chips).ok()) << amount << " on " << host_chips;
  }
}

TEST(ValidateTpuRequestTest, MessagesOfSemanticsSection7) {
  const std::string forms = "use 1, 2, 4 or 8 chips, or a whole host";
  const std::vector<std::tuple<double, int, std::string>> cases = {
      {3, 0, "TPU request of 3 chips is not supported; " + forms},
      {6, 8, "TPU request of 6 chips is not supported; " + forms},
      {-1, 0, "TPU request of -1 chips is not supported; " + forms},
      {0.5, 0, "TPU request of 0.5 chips is not supported; TPU is counted in whole chips; " + forms},
      {1.5, 4, "TPU request of 1.5 chips is not supported; TPU is counted in whole chips; " + forms},
      {16, 0, "TPU request of 16 chips is not supported; a host has at most 8 chips; use a slice group"},
      {9, 0, "TPU request of 9 chips is not supported; a host has at most 8 chips; use a slice group"},
      {256, 8, "TPU request of 256 chips is not supported; a host has at most 8 chips; use a slice group"},
      {8, 4, "TPU request of 8 chips is not supported; a host has at most 4 chips; use a slice group"},
      {2, 1, "TPU request of 2 chips is not supported; a host has at most 1 chip; use a slice group"},
  };
  for (const auto& [amount, host_chips, message] : cases) {
    absl::Status status = ValidateTpuRequest(amount, host_chips);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_EQ(status.message(), message);
  }
}

}  // namespace device_env_test
}  // namespace torus
