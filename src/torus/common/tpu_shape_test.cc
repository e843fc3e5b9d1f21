#include "torus/common/tpu_shape.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torus {
namespace tpu_shape_test {

using ::testing::ElementsAre;

constexpr TpuGeneration kV4 = TpuGeneration::kV4;
constexpr TpuGeneration kV5e = TpuGeneration::kV5e;
constexpr TpuGeneration kV5p = TpuGeneration::kV5p;
constexpr TpuGeneration kV6e = TpuGeneration::kV6e;
constexpr TpuGeneration k7x = TpuGeneration::kTpu7x;

constexpr char kV4Valid[] = "2x2x1, 2x2x2, 2x2x4, 2x4x4, or AxBxC with every dim a multiple of 4, A<=12, B<=12, C<=16";
constexpr char kV5pValid[] = "2x2x1, 2x2x2, 2x2x4, 2x4x4, or AxBxC with every dim a multiple of 4, A<=16, B<=16, C<=24";
constexpr char k2dValid[] = "1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16";
constexpr char k7xValid[] = "1x1x1, 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4, 4x4x8, 4x8x8, 8x8x8, 8x8x16, 8x16x16";
constexpr int64_t kGiB = int64_t{1} << 30;

TEST(GenerationInfoTest, MatchesReferenceTable) {
  struct Case {
    TpuGeneration gen;
    std::string accelerator_type, pod_prefix, label_prefix;
    int cores_per_chip, devices_per_chip, topology_dims;
    int64_t hbm;
    std::string pci;
  };
  const std::vector<Case> cases = {
      {kV4, "TPU-V4", "v4", "v4", 2, 1, 3, 32 * kGiB, "0x005e"},
      {kV5e, "TPU-V5LITEPOD", "v5litepod", "v5litepod", 1, 1, 2, 16 * kGiB, "0x0063"},
      {kV5p, "TPU-V5P", "v5p", "v5p", 2, 1, 3, 95 * kGiB, "0x0062"},
      {kV6e, "TPU-V6E", "v6e", "v6e", 1, 1, 2, 32 * kGiB, "0x006f"},
      {k7x, "TPU-V7X", "tpu7x", "v7x", 2, 2, 3, 192 * kGiB, "0x0076"},
  };
  for (const Case& c : cases) {
    const TpuGenerationInfo& info = GetGenerationInfo(c.gen);
    SCOPED_TRACE(c.accelerator_type);
    EXPECT_EQ(info.generation, c.gen);
    EXPECT_EQ(info.accelerator_type, c.accelerator_type);
    EXPECT_EQ(info.pod_prefix, c.pod_prefix);
    EXPECT_EQ(info.label_prefix, c.label_prefix);
    EXPECT_EQ(info.cores_per_chip, c.cores_per_chip);
    EXPECT_EQ(info.devices_per_chip, c.devices_per_chip);
    EXPECT_EQ(info.topology_dims, c.topology_dims);
    EXPECT_EQ(info.hbm_bytes_per_chip, c.hbm);
    EXPECT_EQ(info.pci_device_id, c.pci);
  }
  EXPECT_THAT(AllGenerations(), ElementsAre(kV4, kV5e, kV5p, kV6e, k7x));
}

TEST(ParseAcceleratorTypeTest, AcceptsEveryGenerationAndAlias) {
  const std::vector<std::pair<std::string, TpuGeneration>> cases = {
      {"TPU-V4", kV4},   {"tpu-v4", kV4},    {"TPU-V5LITEPOD", kV5e}, {"TPU-V5E", kV5e},
      {"tpu-v5e", kV5e}, {"TPU-V5P", kV5p},  {"TPU-V6E", kV6e},       {" tpu-v6e\n", kV6e},
      {"TPU-V7X", k7x},  {"TPU-TPU7X", k7x}, {"tpu-tpu7x", k7x},
  };
  for (const auto& [text, gen] : cases) {
    absl::StatusOr<TpuGeneration> parsed = ParseAcceleratorType(text);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
    EXPECT_EQ(*parsed, gen) << text;
  }
}

TEST(ParseAcceleratorTypeTest, RejectsOthersNamingTheAcceptedForms) {
  const std::string valid = "valid: TPU-V4, TPU-V5LITEPOD, TPU-V5P, TPU-V6E, TPU-V7X";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"TPU-V9", "accelerator type \"TPU-V9\" is not supported; " + valid},
      {"", "accelerator type \"\" is not supported; " + valid},
      {"V6E", "accelerator type \"V6E\" is not supported; " + valid},
      {"v6e-16", "accelerator type \"v6e-16\" is not supported; " + valid},
      {"H100", "accelerator type \"H100\" is not supported; " + valid},
      {"TPU-V2", "accelerator type \"TPU-V2\" is not supported: TPU v2 and v3 are too old for torus; " + valid},
      {"tpu-v3", "accelerator type \"tpu-v3\" is not supported: TPU v2 and v3 are too old for torus; " + valid},
  };
  for (const auto& [text, message] : cases) {
    absl::StatusOr<TpuGeneration> parsed = ParseAcceleratorType(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(), message);
  }
}

TEST(GenerationFromPciDeviceIdTest, MapsSysfsValues) {
  const std::vector<std::pair<std::string, std::optional<TpuGeneration>>> cases = {
      {"0x005e", kV4},          {"0x0063\n", kV5e}, {"0x0062", kV5p},          {"0x006F\n", kV6e},   {"0x0076", k7x},
      {"0x0027", std::nullopt}, {"", std::nullopt}, {"0x006f0", std::nullopt}, {"6f", std::nullopt},
  };
  for (const auto& [id, gen] : cases) EXPECT_EQ(GenerationFromPciDeviceId(id), gen) << id;
}

TEST(TopologyTest, ChipsAndString) {
  EXPECT_EQ((Topology{{4, 4}}).Chips(), 16);
  EXPECT_EQ((Topology{{4, 4}}).ToString(), "4x4");
  EXPECT_EQ((Topology{{2, 2, 2}}).Chips(), 8);
  EXPECT_EQ((Topology{{2, 2, 2}}).ToString(), "2x2x2");
  EXPECT_EQ((Topology{{12, 12, 16}}).Chips(), 2304);
}

TEST(ParseTopologyTest, AcceptsValidTopologies) {
  struct Case {
    TpuGeneration gen;
    std::string text;
    std::vector<int> dims;
  };
  const std::vector<Case> cases = {
      {kV4, "2x2x1", {2, 2, 1}},
      {kV4, "2x2x2", {2, 2, 2}},
      {kV4, "2x2x4", {2, 2, 4}},
      {kV4, "2x4x4", {2, 4, 4}},
      {kV4, "4x4x4", {4, 4, 4}},
      {kV4, "4x8x12", {4, 8, 12}},
      {kV4, "12x12x16", {12, 12, 16}},
      {kV4, "2X2X2", {2, 2, 2}},
      {kV4, " 4x4x8\n", {4, 4, 8}},
      {kV5p, "2x2x1", {2, 2, 1}},
      {kV5p, "4x4x8", {4, 4, 8}},
      {kV5p, "16x16x24", {16, 16, 24}},
      {kV5p, "16x12x20", {16, 12, 20}},
      {kV5e, "1x1", {1, 1}},
      {kV5e, "2x4", {2, 4}},
      {kV5e, "8x16", {8, 16}},
      {kV5e, "16x16", {16, 16}},
      {kV6e, "1x1", {1, 1}},
      {kV6e, "2x2", {2, 2}},
      {kV6e, "2x4", {2, 4}},
      {kV6e, "2x8", {2, 8}},
      {kV6e, "4x4", {4, 4}},
      {kV6e, "4x8", {4, 8}},
      {kV6e, "8x8", {8, 8}},
      {kV6e, "8x16", {8, 16}},
      {kV6e, "16X16", {16, 16}},
      {k7x, "1x1x1", {1, 1, 1}},
      {k7x, "2x2x1", {2, 2, 1}},
      {k7x, "2x2x2", {2, 2, 2}},
      {k7x, "2x2x4", {2, 2, 4}},
      {k7x, "2x4x4", {2, 4, 4}},
      {k7x, "4x4x4", {4, 4, 4}},
      {k7x, "4x4x8", {4, 4, 8}},
      {k7x, "4x8x8", {4, 8, 8}},
      {k7x, "8x8x8", {8, 8, 8}},
      {k7x, "8x8x16", {8, 8, 16}},
      {k7x, "8x16x16", {8, 16, 16}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Topology> topology = ParseTopology(c.gen, c.text);
    ASSERT_TRUE(topology.ok()) << c.text << ": " << topology.status();
    EXPECT_EQ(topology->dims, c.dims) << c.text;
  }
}

TEST(ParseTopologyTest, RejectsInvalidTopologiesNamingTheValidOnes) {
  struct Case {
    TpuGeneration gen;
    std::string text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {kV6e, "3x3", "topology \"3x3\" is not valid for TPU-V6E; valid: " + std::string(k2dValid)},
      {kV6e, "4x5", "topology \"4x5\" is not valid for TPU-V6E; valid: " + std::string(k2dValid)},
      {kV6e, "4x2", "topology \"4x2\" is not valid for TPU-V6E; valid: " + std::string(k2dValid)},
      {kV6e, "2x2x1", "topology \"2x2x1\" is not valid for TPU-V6E; valid: " + std::string(k2dValid)},
      {kV6e, "32x32", "topology \"32x32\" is not valid for TPU-V6E; valid: " + std::string(k2dValid)},
      {kV5e, "16", "topology \"16\" is not valid for TPU-V5LITEPOD; valid: " + std::string(k2dValid)},
      {kV5e, "", "topology \"\" is not valid for TPU-V5LITEPOD; valid: " + std::string(k2dValid)},
      {kV4, "3x3x3", "topology \"3x3x3\" is not valid for TPU-V4; valid: " + std::string(kV4Valid)},
      {kV4, "4x4x6", "topology \"4x4x6\" is not valid for TPU-V4; valid: " + std::string(kV4Valid)},
      {kV4, "16x4x4", "topology \"16x4x4\" is not valid for TPU-V4; valid: " + std::string(kV4Valid)},
      {kV4, "4x4x20", "topology \"4x4x20\" is not valid for TPU-V4; valid: " + std::string(kV4Valid)},
      {kV4, "2x4x2", "topology \"2x4x2\" is not valid for TPU-V4; valid: " + std::string(kV4Valid)},
      {kV4, "1x1x1", "topology \"1x1x1\" is not valid for TPU-V4; valid: " + std::string(kV4Valid)},
      {kV4, "2x2", "topology \"2x2\" is not valid for TPU-V4; valid: " + std::string(kV4Valid)},
      {kV4, "0x4x4", "topology \"0x4x4\" is not valid for TPU-V4; valid: " + std::string(kV4Valid)},
      {kV4, "-4x4x4", "topology \"-4x4x4\" is not valid for TPU-V4; valid: " + std::string(kV4Valid)},
      {kV4, "+4x4x4", "topology \"+4x4x4\" is not valid for TPU-V4; valid: " + std::string(kV4Valid)},
      {kV4, "4x4x", "topology \"4x4x\" is not valid for TPU-V4; valid: " + std::string(kV4Valid)},
      {kV4, "4x4x4x4", "topology \"4x4x4x4\" is not valid for TPU-V4; valid: " + std::string(kV4Valid)},
      {kV4, "4*4*4", "topology \"4*4*4\" is not valid for TPU-V4; valid: " + std::string(kV4Valid)},
      {kV5p, "16x16x28", "topology \"16x16x28\" is not valid for TPU-V5P; valid: " + std::string(kV5pValid)},
      {kV5p, "20x4x4", "topology \"20x4x4\" is not valid for TPU-V5P; valid: " + std::string(kV5pValid)},
      {kV5p, "4x4x2", "topology \"4x4x2\" is not valid for TPU-V5P; valid: " + std::string(kV5pValid)},
      {k7x, "1x2x2", "topology \"1x2x2\" is not valid for TPU-V7X; valid: " + std::string(k7xValid)},
      {k7x, "12x12x16", "topology \"12x12x16\" is not valid for TPU-V7X; valid: " + std::string(k7xValid)},
      {k7x, "16x16x16", "topology \"16x16x16\" is not valid for TPU-V7X; valid: " + std::string(k7xValid)},
      {k7x, "2x2", "topology \"2x2\" is not valid for TPU-V7X; valid: " + std::string(k7xValid)},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Topology> topology = ParseTopology(c.gen, c.text);
    ASSERT_FALSE(topology.ok()) << c.text;
    EXPECT_EQ(topology.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(topology.status().message(), c.message);
  }
}

TEST(ValidTopologiesTextTest, NamesEachGenerationsForms) {
  EXPECT_EQ(ValidTopologiesText(kV4), kV4Valid);
  EXPECT_EQ(ValidTopologiesText(kV5p), kV5pValid);
  EXPECT_EQ(ValidTopologiesText(kV5e), k2dValid);
  EXPECT_EQ(ValidTopologiesText(kV6e), k2dValid);
  EXPECT_EQ(ValidTopologiesText(k7x), k7xValid);
}

// Counts every valid topology by brute force, so the rule and the named lists cannot drift apart silently.
std::vector<Topology> EnumerateValid(TpuGeneration gen) {
  std::vector<Topology> valid;
  if (GetGenerationInfo(gen).topology_dims == 2) {
    for (int a = 1; a <= 32; ++a) {
      for (int b = 1; b <= 32; ++b) {
        if (IsValidTopology(gen, {a, b})) valid.push_back(Topology{{a, b}});
      }
    }
  } else {
    for (int a = 1; a <= 32; ++a) {
      for (int b = 1; b <= 32; ++b) {
        for (int c = 1; c <= 32; ++c) {
          if (IsValidTopology(gen, {a, b, c})) valid.push_back(Topology{{a, b, c}});
        }
      }
    }
  }
  return valid;
}

TEST(IsValidTopologyTest, CountsPerGeneration) {
  // v4: 4 named + 3*3*4 multiples of 4; v5p: 4 named + 4*4*6.
  EXPECT_EQ(EnumerateValid(kV4).size(), 40u);
  EXPECT_EQ(EnumerateValid(kV5p).size(), 100u);
  EXPECT_EQ(EnumerateValid(kV5e).size(), 9u);
  EXPECT_EQ(EnumerateValid(kV6e).size(), 9u);
  EXPECT_EQ(EnumerateValid(k7x).size(), 11u);
  EXPECT_FALSE(IsValidTopology(kV6e, {}));
  EXPECT_FALSE(IsValidTopology(kV4, {4, 4}));
}

TEST(IsValidTopologyTest, EveryValidTopologyRoundTrips) {
  for (TpuGeneration gen : AllGenerations()) {
    for (const Topology& topology : EnumerateValid(gen)) {
      SCOPED_TRACE(absl::StrCat(std::string(GetGenerationInfo(gen).accelerator_type), " ", topology.ToString()));
      absl::StatusOr<Topology> parsed = ParseTopology(gen, topology.ToString());
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      EXPECT_EQ(*parsed, topology);
      const PodType pod_type = PodTypeFor(gen, topology);
      absl::StatusOr<PodType> from_string = ParsePodType(pod_type.ToString());
      ASSERT_TRUE(from_string.ok()) << from_string.status();
      EXPECT_EQ(*from_string, pod_type);
      absl::StatusOr<PodType> from_label = ParsePodType(pod_type.LabelString());
      ASSERT_TRUE(from_label.ok()) << from_label.status();
      EXPECT_EQ(*from_label, pod_type);
      EXPECT_EQ(pod_type.Chips(), topology.Chips());
      absl::StatusOr<SliceShape> shape = MakeSliceShape(gen, topology);
      ASSERT_TRUE(shape.ok()) << shape.status();
      EXPECT_EQ(shape->hosts * shape->chips_per_host, shape->chips);
      EXPECT_EQ(shape->host_bounds[0] * shape->host_bounds[1] * shape->host_bounds[2], shape->hosts);
    }
  }
}

TEST(ParsePodTypeTest, NormalisesEveryForm) {
  struct Case {
    std::string text;
    TpuGeneration gen;
    int suffix;
    std::string normal, label;
    int chips;
  };
  const std::vector<Case> cases = {
      {"v6e-16", kV6e, 16, "v6e-16", "v6e-16", 16},
      {"tpu-v6e-16", kV6e, 16, "v6e-16", "v6e-16", 16},
      {" V6E-16 ", kV6e, 16, "v6e-16", "v6e-16", 16},
      {"TPU-V6E-256", kV6e, 256, "v6e-256", "v6e-256", 256},
      {"v6e-8", kV6e, 8, "v6e-8", "v6e-8", 8},
      {"v5e-8", kV5e, 8, "v5litepod-8", "v5litepod-8", 8},
      {"v5litepod-1", kV5e, 1, "v5litepod-1", "v5litepod-1", 1},
      {"tpu-v5litepod-256", kV5e, 256, "v5litepod-256", "v5litepod-256", 256},
      {"v4-8", kV4, 8, "v4-8", "v4-8", 4},
      {"v4-16", kV4, 16, "v4-16", "v4-16", 8},
      {"v4-2048", kV4, 2048, "v4-2048", "v4-2048", 1024},
      {"v5p-8", kV5p, 8, "v5p-8", "v5p-8", 4},
      {"v5p-256", kV5p, 256, "v5p-256", "v5p-256", 128},
      {"tpu7x-8", k7x, 8, "tpu7x-8", "v7x-8", 4},
      {"v7x-8", k7x, 8, "tpu7x-8", "v7x-8", 4},
      {"TPU7X-2", k7x, 2, "tpu7x-2", "v7x-2", 1},
      {"tpu-v7x-128", k7x, 128, "tpu7x-128", "v7x-128", 64},
      {"tpu-7x-16", k7x, 16, "tpu7x-16", "v7x-16", 8},
  };
  for (const Case& c : cases) {
    absl::StatusOr<PodType> pod_type = ParsePodType(c.text);
    ASSERT_TRUE(pod_type.ok()) << c.text << ": " << pod_type.status();
    EXPECT_EQ(pod_type->generation, c.gen) << c.text;
    EXPECT_EQ(pod_type->suffix, c.suffix) << c.text;
    EXPECT_EQ(pod_type->ToString(), c.normal) << c.text;
    EXPECT_EQ(pod_type->LabelString(), c.label) << c.text;
    EXPECT_EQ(pod_type->Chips(), c.chips) << c.text;
  }
}

TEST(ParsePodTypeTest, RejectsInconsistentOrMalformedPodTypes) {
  const std::string forms =
      "is not valid; expected <prefix>-<number> such as v6e-16, with prefix v4, v5litepod (or v5e), v5p, v6e, "
      "tpu7x (or v7x)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"v4-15",
       "pod type \"v4-15\" is not valid: TPU-V4 pod types count cores, 2 per chip, so the number must be "
       "even"},
      {"v5p-9",
       "pod type \"v5p-9\" is not valid: TPU-V5P pod types count cores, 2 per chip, so the number must be "
       "even"},
      {"tpu7x-1",
       "pod type \"tpu7x-1\" is not valid: TPU-V7X pod types count cores, 2 per chip, so the number "
       "must be even"},
      {"v6e-0", "pod type \"v6e-0\" is not valid: the number after \"v6e-\" must be a positive whole number"},
      {"v6e--8", "pod type \"v6e--8\" is not valid: the number after \"v6e-\" must be a positive whole number"},
      {"v6e-", "pod type \"v6e-\" is not valid: the number after \"v6e-\" must be a positive whole number"},
      {"v6e-abc", "pod type \"v6e-abc\" is not valid: the number after \"v6e-\" must be a positive whole number"},
      {"v6e-16.0", "pod type \"v6e-16.0\" is not valid: the number after \"v6e-\" must be a positive whole number"},
      {"v5e-+8", "pod type \"v5e-+8\" is not valid: the number after \"v5e-\" must be a positive whole number"},
      {"v6e-3", "pod type \"v6e-3\" is not valid: no TPU-V6E topology has 3 chips; valid: " + std::string(k2dValid)},
      {"v6e-512",
       "pod type \"v6e-512\" is not valid: no TPU-V6E topology has 512 chips; valid: " + std::string(k2dValid)},
      {"v4-6", "pod type \"v4-6\" is not valid: no TPU-V4 topology has 3 chips; valid: " + std::string(kV4Valid)},
      {"v4-2", "pod type \"v4-2\" is not valid: no TPU-V4 topology has 1 chip; valid: " + std::string(kV4Valid)},
      {"tpu7x-6",
       "pod type \"tpu7x-6\" is not valid: no TPU-V7X topology has 3 chips; valid: " + std::string(k7xValid)},
      {"v6e", "pod type \"v6e\" " + forms},
      {"", "pod type \"\" " + forms},
      {"v9-8", "pod type \"v9-8\" " + forms},
      {"v6-8", "pod type \"v6-8\" " + forms},
      {"TPU-V6E", "pod type \"TPU-V6E\" " + forms},
      {"v3-8",
       "pod type \"v3-8\" is not supported: TPU v2 and v3 are too old for torus; valid prefixes: v4, "
       "v5litepod (or v5e), v5p, v6e, tpu7x (or v7x)"},
      {"tpu-v2-8",
       "pod type \"tpu-v2-8\" is not supported: TPU v2 and v3 are too old for torus; valid prefixes: "
       "v4, v5litepod (or v5e), v5p, v6e, tpu7x (or v7x)"},
  };
  for (const auto& [text, message] : cases) {
    absl::StatusOr<PodType> pod_type = ParsePodType(text);
    ASSERT_FALSE(pod_type.ok()) << text;
    EXPECT_EQ(pod_type.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(pod_type.status().message(), message);
  }
}

TEST(PodTypeForTest, CountsCoresOrChips) {
  struct Case {
    TpuGeneration gen;
    std::vector<int> dims;
    std::string pod_type;
  };
  const std::vector<Case> cases = {
      {kV4, {2, 2, 1}, "v4-8"},     {kV4, {2, 2, 2}, "v4-16"},     {kV5p, {2, 2, 1}, "v5p-8"},
      {kV5p, {4, 4, 8}, "v5p-256"}, {kV5e, {2, 4}, "v5litepod-8"}, {kV6e, {4, 4}, "v6e-16"},
      {kV6e, {16, 16}, "v6e-256"},  {k7x, {2, 2, 1}, "tpu7x-8"},   {k7x, {1, 1, 1}, "tpu7x-2"},
  };
  for (const Case& c : cases) EXPECT_EQ(PodTypeFor(c.gen, Topology{c.dims}).ToString(), c.pod_type);
}

TEST(ChipsPerHostTest, DefaultsAndValidValues) {
  struct Case {
    TpuGeneration gen;
    std::vector<int> dims;
    int cph;
  };
  const std::vector<Case> cases = {
      {kV5e, {1, 1}, 1},     {kV5e, {2, 2}, 4},   {kV5e, {2, 4}, 8},      {kV5e, {2, 8}, 4},
      {kV5e, {16, 16}, 4},   {kV6e, {1, 1}, 1},   {kV6e, {2, 2}, 4},      {kV6e, {2, 4}, 8},
      {kV6e, {4, 4}, 4},     {kV6e, {8, 16}, 4},  {k7x, {1, 1, 1}, 1},    {k7x, {2, 2, 1}, 4},
      {k7x, {8, 16, 16}, 4}, {kV4, {2, 2, 1}, 4}, {kV4, {12, 12, 16}, 4}, {kV5p, {2, 2, 1}, 4},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(DefaultChipsPerHost(c.gen, Topology{c.dims}), c.cph) << Topology{c.dims}.ToString();
  }
  EXPECT_THAT(ValidChipsPerHost(kV4), ElementsAre(4));
  EXPECT_THAT(ValidChipsPerHost(kV5p), ElementsAre(4));
  EXPECT_THAT(ValidChipsPerHost(kV5e), ElementsAre(1, 4, 8));
  EXPECT_THAT(ValidChipsPerHost(kV6e), ElementsAre(1, 4, 8));
  EXPECT_THAT(ValidChipsPerHost(k7x), ElementsAre(1, 4));
}

TEST(MakeSliceShapeTest, WorkedExamplesAndMore) {
  struct Case {
    TpuGeneration gen;
    std::vector<int> dims;
    std::optional<int> cph_override;
    std::string pod_type;
    int chips, cph, hosts;
    std::string host_bounds, wrap;
  };
  const std::vector<Case> cases = {
      // The header's worked examples (tpu.md §2).
      {kV6e, {4, 4}, std::nullopt, "v6e-16", 16, 4, 4, "2,2,1", "false,false,false"},
      {kV4, {2, 2, 2}, std::nullopt, "v4-16", 8, 4, 2, "1,1,2", "false,false,false"},
      {kV6e, {2, 4}, std::nullopt, "v6e-8", 8, 8, 1, "1,1,1", "false,false,false"},
      {kV6e, {2, 4}, 4, "v6e-8", 8, 4, 2, "1,2,1", "false,false,false"},
      {kV6e, {16, 16}, std::nullopt, "v6e-256", 256, 4, 64, "8,8,1", "true,true,false"},
      {kV5p, {4, 4, 8}, std::nullopt, "v5p-256", 128, 4, 32, "2,2,8", "true,true,true"},
      {k7x, {2, 2, 1}, std::nullopt, "tpu7x-8", 4, 4, 1, "1,1,1", "false,false,false"},
      // Single-host shapes of every host size.
      {kV5e, {1, 1}, std::nullopt, "v5litepod-1", 1, 1, 1, "1,1,1", "false,false,false"},
      {kV5e, {2, 2}, std::nullopt, "v5litepod-4", 4, 4, 1, "1,1,1", "false,false,false"},
      {kV6e, {1, 1}, 1, "v6e-1", 1, 1, 1, "1,1,1", "false,false,false"},
      {kV4, {2, 2, 1}, std::nullopt, "v4-8", 4, 4, 1, "1,1,1", "false,false,false"},
      {kV5p, {2, 2, 1}, std::nullopt, "v5p-8", 4, 4, 1, "1,1,1", "false,false,false"},
      {k7x, {1, 1, 1}, std::nullopt, "tpu7x-2", 1, 1, 1, "1,1,1", "false,false,false"},
      // Multi-host, including one wrapping axis of 2D and the largest 3D shapes.
      {kV6e, {2, 8}, std::nullopt, "v6e-16", 16, 4, 4, "1,4,1", "false,false,false"},
      {kV5e, {8, 16}, std::nullopt, "v5litepod-128", 128, 4, 32, "4,8,1", "false,true,false"},
      {kV4, {2, 4, 4}, std::nullopt, "v4-64", 32, 4, 8, "1,2,4", "false,false,false"},
      {kV4, {4, 4, 4}, std::nullopt, "v4-128", 64, 4, 16, "2,2,4", "true,true,true"},
      {kV4, {12, 12, 16}, std::nullopt, "v4-4608", 2304, 4, 576, "6,6,16", "true,true,true"},
      {kV5p, {16, 16, 24}, std::nullopt, "v5p-12288", 6144, 4, 1536, "8,8,24", "true,true,true"},
      {k7x, {2, 2, 4}, std::nullopt, "tpu7x-32", 16, 4, 4, "1,1,4", "false,false,false"},
      {k7x, {4, 4, 4}, std::nullopt, "tpu7x-128", 64, 4, 16, "2,2,4", "true,true,true"},
      {k7x, {8, 16, 16}, std::nullopt, "tpu7x-4096", 2048, 4, 512, "4,8,16", "true,true,true"},
  };
  for (const Case& c : cases) {
    const Topology topology{c.dims};
    SCOPED_TRACE(absl::StrCat(std::string(GetGenerationInfo(c.gen).accelerator_type), " ", topology.ToString()));
    absl::StatusOr<SliceShape> shape = MakeSliceShape(c.gen, topology, c.cph_override);
    ASSERT_TRUE(shape.ok()) << shape.status();
    EXPECT_EQ(shape->generation, c.gen);
    EXPECT_EQ(shape->topology, topology);
    EXPECT_EQ(shape->pod_type.ToString(), c.pod_type);
    EXPECT_EQ(shape->chips, c.chips);
    EXPECT_EQ(shape->chips_per_host, c.cph);
    EXPECT_EQ(shape->hosts, c.hosts);
    EXPECT_EQ(JoinInts(shape->host_bounds), c.host_bounds);
    EXPECT_EQ(JoinBools(shape->wrap), c.wrap);
  }
}

TEST(MakeSliceShapeTest, RejectsHostSizesThatDoNotFit) {
  struct Case {
    TpuGeneration gen;
    std::vector<int> dims;
    std::optional<int> cph;
    std::string message;
  };
  const std::vector<Case> cases = {
      {kV6e, {4, 4}, 8, "TPU-V6E 4x4 on 8-chip hosts would span 2 hosts; multi-host slices use 4-chip hosts"},
      {kV6e, {2, 2}, 1, "TPU-V6E 2x2 on 1-chip hosts would span 4 hosts; multi-host slices use 4-chip hosts"},
      {kV5e, {2, 4}, 1, "TPU-V5LITEPOD 2x4 on 1-chip hosts would span 8 hosts; multi-host slices use 4-chip hosts"},
      {kV6e, {1, 1}, 4, "TPU-V6E 1x1 has 1 chip, not a whole number of 4-chip hosts"},
      {kV6e, {2, 2}, 8, "TPU-V6E 2x2 has 4 chips, not a whole number of 8-chip hosts"},
      {k7x, {1, 1, 1}, 4, "TPU-V7X 1x1x1 has 1 chip, not a whole number of 4-chip hosts"},
      {kV6e, {4, 4}, 2, "chips per host 2 is not valid for TPU-V6E; valid: 1, 4, 8"},
      {kV6e, {4, 4}, 0, "chips per host 0 is not valid for TPU-V6E; valid: 1, 4, 8"},
      {kV4, {2, 2, 2}, 8, "chips per host 8 is not valid for TPU-V4; valid: 4"},
      {kV5p, {2, 2, 1}, 1, "chips per host 1 is not valid for TPU-V5P; valid: 4"},
      {k7x, {2, 2, 2}, 8, "chips per host 8 is not valid for TPU-V7X; valid: 1, 4"},
      {kV6e, {3, 3}, std::nullopt, "topology \"3x3\" is not valid for TPU-V6E; valid: " + std::string(k2dValid)},
      {kV4, {2, 2}, std::nullopt, "topology \"2x2\" is not valid for TPU-V4; valid: " + std::string(kV4Valid)},
  };
  for (const Case& c : cases) {
    absl::StatusOr<SliceShape> shape = MakeSliceShape(c.gen, Topology{c.dims}, c.cph);
    ASSERT_FALSE(shape.ok()) << c.message;
    EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(shape.status().message(), c.message);
  }
}

TEST(ChipsPerHostBoundsTest, OneTwoFourEight) {
  const std::vector<std::pair<int, std::string>> cases = {{1, "1,1,1"}, {2, "1,2,1"}, {4, "2,2,1"}, {8, "2,4,1"}};
  for (const auto& [chips, bounds] : cases) {
    absl::StatusOr<std::string> got = ChipsPerHostBounds(chips);
    ASSERT_TRUE(got.ok()) << chips;
    EXPECT_EQ(*got, bounds);
  }
  for (int chips : {0, 3, 16, -1}) {
    absl::StatusOr<std::string> got = ChipsPerHostBounds(chips);
    ASSERT_FALSE(got.ok()) << chips;
    EXPECT_EQ(got.status().message(),
              absl::StrCat("no chips-per-host bounds for ", chips, " chips; a host or worker has 1, 2, 4 or 8 chips"));
  }
}

TEST(JoinTest, IntsAndBools) {
  EXPECT_EQ(JoinInts({2, 2, 8}), "2,2,8");
  EXPECT_EQ(JoinInts({}), "");
  EXPECT_EQ(JoinBools({true, false, true}), "true,false,true");
}

}  // namespace tpu_shape_test
}  // namespace torus
