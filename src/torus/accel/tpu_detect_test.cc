#include "torus/accel/tpu_detect.h"

#include <httplib.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torus/accel/fake_host.h"
#include "torus/common/well_known_labels.h"

namespace torus {
namespace tpu_detect_test {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A device root in a fresh temporary directory, removed afterwards.
class TpuDetectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "torus_tpu_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
  }
  void TearDown() override { fs::remove_all(root_); }

  void WriteFile(const std::string& relative, const std::string& contents) {
    const fs::path path = fs::path(root_) / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << contents;
  }

  TpuDetectOptions Options(EnvMap env, MetadataSource* metadata = nullptr) const {
    TpuDetectOptions options;
    options.root = root_;
    options.env = std::move(env);
    options.metadata = metadata;
    return options;
  }

  std::string root_;
};

// The environment of tpu.md §5 for worker 2 of a v6e 4x4 slice.
EnvMap V6eEnv() {
  return {{"TPU_ACCELERATOR_TYPE", "v6e-16"},
          {"TPU_TOPOLOGY", "4x4"},
          {"TPU_NAME", "slice-a"},
          {"TPU_WORKER_ID", "2"},
          {"TPU_WORKER_HOSTNAMES", "h0,h1,h2,h3"},
          {"TPU_SKIP_MDS_QUERY", "true"}};
}

// Answers from a map and records what was asked.
class FakeMetadata : public MetadataSource {
 public:
  explicit FakeMetadata(std::map<std::string, std::string> attributes) : attributes_(std::move(attributes)) {}
  std::optional<std::string> GetAttribute(const std::string& key) override {
    asked_.push_back(key);
    auto it = attributes_.find(key);
    if (it == attributes_.end()) return std::nullopt;
    return it->second;
  }
  const std::vector<std::string>& asked() const { return asked_; }

 private:
  std::map<std::string, std::string> attributes_;
  std::vector<std::string> asked_;
};

std::map<std::string, std::string> V6eMetadata() {
  return {{"accelerator-type", "v6e-16"},
          {"instance-id", "7139284750129"},
          {"agent-worker-number", "1"},
          {"tpu-env", "ACCELERATOR_TYPE: 'v6e-16'\nTOPOLOGY: '4x4'\nZONE: 'us-east5-b'\n"},
          {"worker-network-endpoints",
           "unknown:unknown:10.0.0.1,unknown:unknown:10.0.0.2,unknown:unknown:10.0.0.3,unknown:unknown:10.0.0.4"}};
}

// ---------------------------------------------------------------------------------------------------------------
// The fake host layout.

TEST_F(TpuDetectTest, FakeV6eHostLayout) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 4).ok());
  for (int g = 0; g < 4; ++g) {
    EXPECT_TRUE(fs::is_regular_file(fs::path(root_) / "dev/vfio" / std::to_string(g)));
  }
  const fs::path device = fs::path(root_) / "sys/kernel/iommu_groups/2/devices/0000:00:02.0";
  std::ifstream vendor(device / "vendor"), id(device / "device");
  std::string vendor_text((std::istreambuf_iterator<char>(vendor)), {});
  std::string id_text((std::istreambuf_iterator<char>(id)), {});
  EXPECT_EQ(vendor_text, "0x1ae0\n");
  EXPECT_EQ(id_text, "0x006f\n");
  EXPECT_FALSE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 33).ok());
  EXPECT_FALSE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, -1).ok());
}

// ---------------------------------------------------------------------------------------------------------------
// Chips from the device root.

TEST_F(TpuDetectTest, EveryGenerationIsCountedAndIdentifiedFromDevicesAlone) {
  for (TpuGeneration gen : AllGenerations()) {
    SCOPED_TRACE(std::string(GetGenerationInfo(gen).accelerator_type));
    fs::remove_all(root_);
    ASSERT_TRUE(WriteFakeTpuDevices(root_, gen, 4).ok());
    absl::StatusOr<TpuHostInfo> info = DetectTpu(Options({}));
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->chips, 4);
    EXPECT_EQ(info->generation, gen);
    EXPECT_FALSE(info->pod_type.has_value());
    EXPECT_THAT(info->warnings, IsEmpty());
  }
}

TEST_F(TpuDetectTest, V4AccelFiles) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV4, 4).ok());
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options({{"TPU_ACCELERATOR_TYPE", "v4-16"},
                                                        {"TPU_TOPOLOGY", "2x2x2"},
                                                        {"TPU_WORKER_ID", "1"},
                                                        {"TPU_WORKER_HOSTNAMES", "a,b"},
                                                        {"TPU_NAME", "v4-slice"}}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->chips, 4);
  EXPECT_EQ(info->generation, TpuGeneration::kV4);
  EXPECT_EQ(info->worker_id, 1);
  EXPECT_THAT(info->worker_hostnames, ElementsAre("a", "b"));
  EXPECT_THAT(info->warnings, IsEmpty());
}

// A v4 host's layout written by hand (not by WriteFakeTpuDevices, which the local cluster uses too): /dev/accel0-3,
// and /sys/class/accel/accelN/device a symlink to the chip's PCI device directory, as the kernel lays them out.
TEST_F(TpuDetectTest, V4LayoutAsTheKernelMakesIt) {
  const char* slots[] = {"0000:00:04.0", "0000:00:05.0", "0000:00:06.0", "0000:00:07.0"};
  for (int i = 0; i < 4; ++i) {
    const std::string pci = std::string("sys/devices/pci0000:00/") + slots[i];
    WriteFile("dev/accel" + std::to_string(i), "");
    WriteFile(pci + "/vendor", "0x1ae0\n");
    WriteFile(pci + "/device", "0x005e\n");
    const fs::path link = fs::path(root_) / "sys/class/accel" / ("accel" + std::to_string(i)) / "device";
    fs::create_directories(link.parent_path());
    fs::create_directory_symlink(fs::path("../../../devices/pci0000:00") / slots[i], link);
  }
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options({{"TPU_ACCELERATOR_TYPE", "v4-8"},
                                                        {"TPU_TOPOLOGY", "2x2x1"},
                                                        {"TPU_WORKER_ID", "0"},
                                                        {"TPU_NAME", "v4-hand"}}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->chips, 4);
  EXPECT_EQ(info->generation, TpuGeneration::kV4);
  EXPECT_THAT(info->warnings, IsEmpty());

  // The PCI id alone names the generation.
  info = DetectTpu(Options({}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->chips, 4);
  EXPECT_EQ(info->generation, TpuGeneration::kV4);
}

TEST_F(TpuDetectTest, AccelFilesWithoutSysfsCountButHaveNoGeneration) {
  for (int i = 0; i < 4; ++i) WriteFile("dev/accel" + std::to_string(i), "");
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options({}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->chips, 4);
  EXPECT_FALSE(info->generation.has_value());
  EXPECT_THAT(info->warnings, Contains(HasSubstr("generation is unknown")));
}

TEST_F(TpuDetectTest, NvidiaAccelDirectoryIsIgnored) {
  WriteFile("dev/accel/accel0", "");  // NVIDIA driver >= 570
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options({}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->chips, 0);
  EXPECT_FALSE(info->generation.has_value());

  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 4).ok());
  info = DetectTpu(Options({}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->chips, 4);  // the vfio groups, not the directory
  EXPECT_EQ(info->generation, TpuGeneration::kV6e);
}

TEST_F(TpuDetectTest, NonTpuVfioGroupsAreIgnored) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 4).ok());
  WriteFile("dev/vfio/12", "");  // an NVIDIA GPU passed through
  WriteFile("sys/kernel/iommu_groups/12/devices/0000:40:00.0/vendor", "0x10de\n");
  WriteFile("sys/kernel/iommu_groups/12/devices/0000:40:00.0/device", "0x2330\n");
  WriteFile("dev/vfio/13", "");             // a group without sysfs
  WriteFile("dev/vfio/devices/vfio0", "");  // iommufd's directory
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options({}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->chips, 4);
  EXPECT_THAT(info->warnings, IsEmpty());
}

TEST_F(TpuDetectTest, Tpu7xTwoFunctionsPerChipCountOnce) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kTpu7x, 4).ok());
  EXPECT_TRUE(fs::exists(fs::path(root_) / "dev/vfio/7"));  // 8 groups for 4 chips
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options({{"TPU_ACCELERATOR_TYPE", "tpu7x-8"},
                                                        {"TPU_TOPOLOGY", "2x2x1"},
                                                        {"TPU_WORKER_ID", "0"},
                                                        {"TPU_WORKER_HOSTNAMES", "localhost"},
                                                        {"TPU_NAME", "ironwood"}}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->chips, 4);
  EXPECT_EQ(info->generation, TpuGeneration::kTpu7x);
  EXPECT_EQ(TpuLabels(*info), (Labels{{std::string(kLabelAcceleratorType), "TPU-V7X"},
                                      {std::string(kLabelTpuSliceName), "ironwood"},
                                      {std::string(kLabelTpuWorkerId), "0"},
                                      {std::string(kLabelTpuTopology), "2x2x1"},
                                      {std::string(kLabelTpuPodType), "v7x-8"},
                                      {std::string(kLabelTpuChipsPerHost), "4"}}));
}

TEST_F(TpuDetectTest, EnvGenerationWinsOverDevicesWithWarning) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV5p, 4).ok());
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options(V6eEnv()));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->generation, TpuGeneration::kV6e);
  EXPECT_THAT(info->warnings, Contains(AllOf(HasSubstr("TPU-V5P"), HasSubstr("trusting TPU_ACCELERATOR_TYPE"))));
}

TEST_F(TpuDetectTest, UnknownTpuDeviceIdIsCountedWithWarning) {
  WriteFile("dev/vfio/0", "");
  WriteFile("sys/kernel/iommu_groups/0/devices/0000:00:04.0/vendor", "0x1ae0\n");
  WriteFile("sys/kernel/iommu_groups/0/devices/0000:00:04.0/device", "0x0027\n");  // v2/v3
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options({}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->chips, 1);
  EXPECT_FALSE(info->generation.has_value());
  EXPECT_THAT(info->warnings, Contains(HasSubstr("0x0027")));
}

// ---------------------------------------------------------------------------------------------------------------
// Facts from the environment and metadata.

TEST_F(TpuDetectTest, FakeV6eHostFromEnv) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 4).ok());
  FakeMetadata metadata(V6eMetadata());
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options(V6eEnv(), &metadata));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->chips, 4);
  EXPECT_EQ(info->generation, TpuGeneration::kV6e);
  ASSERT_TRUE(info->pod_type.has_value());
  EXPECT_EQ(info->pod_type->ToString(), "v6e-16");
  ASSERT_TRUE(info->topology.has_value());
  EXPECT_EQ(info->topology->ToString(), "4x4");
  EXPECT_EQ(info->slice_name, "slice-a");
  EXPECT_EQ(info->worker_id, 2);
  EXPECT_THAT(info->worker_hostnames, ElementsAre("h0", "h1", "h2", "h3"));
  EXPECT_THAT(info->warnings, IsEmpty());
  EXPECT_THAT(metadata.asked(), IsEmpty());  // TPU_SKIP_MDS_QUERY=true
  EXPECT_EQ(TpuLabels(*info), (Labels{{std::string(kLabelAcceleratorType), "TPU-V6E"},
                                      {std::string(kLabelTpuSliceName), "slice-a"},
                                      {std::string(kLabelTpuWorkerId), "2"},
                                      {std::string(kLabelTpuTopology), "4x4"},
                                      {std::string(kLabelTpuPodType), "v6e-16"},
                                      {std::string(kLabelTpuChipsPerHost), "4"}}));
}

TEST_F(TpuDetectTest, EnvValuesAreTrimmedAndTopologyLowerCased) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 4).ok());
  EnvMap env = V6eEnv();
  env["TPU_ACCELERATOR_TYPE"] = "  V6E-16 ";
  env["TPU_TOPOLOGY"] = "4X4";
  env["TPU_WORKER_HOSTNAMES"] = "h0, h1 ,h2,h3";
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options(env));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(TpuLabels(*info).at(std::string(kLabelTpuTopology)), "4x4");
  EXPECT_EQ(info->pod_type->LabelString(), "v6e-16");
  EXPECT_THAT(info->worker_hostnames, ElementsAre("h0", "h1", "h2", "h3"));
}

TEST_F(TpuDetectTest, MetadataFillsWhatTheEnvLacks) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 4).ok());
  FakeMetadata metadata(V6eMetadata());
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options({}, &metadata));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->pod_type->ToString(), "v6e-16");
  EXPECT_EQ(info->topology->ToString(), "4x4");
  EXPECT_EQ(info->slice_name, "7139284750129");
  EXPECT_EQ(info->worker_id, 1);
  EXPECT_THAT(info->worker_hostnames, ElementsAre("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"));
  EXPECT_THAT(info->warnings, IsEmpty());
}

TEST_F(TpuDetectTest, EnvWinsOverMetadataAndMetadataIsAskedOnlyForMissingFacts) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 4).ok());
  FakeMetadata metadata(V6eMetadata());
  EnvMap env = V6eEnv();
  env.erase("TPU_SKIP_MDS_QUERY");
  env.erase("TPU_WORKER_HOSTNAMES");
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options(env, &metadata));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->slice_name, "slice-a");
  EXPECT_EQ(info->worker_id, 2);
  EXPECT_THAT(info->worker_hostnames, ElementsAre("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"));
  EXPECT_THAT(metadata.asked(), ElementsAre("worker-network-endpoints"));
}

TEST_F(TpuDetectTest, SkipMdsQueryAcceptsTrueAndOneInAnyCase) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 4).ok());
  for (const char* skip : {"true", "TRUE", "True", "1"}) {
    FakeMetadata metadata(V6eMetadata());
    absl::StatusOr<TpuHostInfo> info = DetectTpu(Options({{"TPU_SKIP_MDS_QUERY", skip}}, &metadata));
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_THAT(metadata.asked(), IsEmpty()) << skip;
    EXPECT_FALSE(info->pod_type.has_value());
  }
  FakeMetadata metadata(V6eMetadata());
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options({{"TPU_SKIP_MDS_QUERY", "false"}}, &metadata));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->pod_type->ToString(), "v6e-16");
}

TEST_F(TpuDetectTest, WorkerNetworkEndpointsTakeTheThirdField) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 4).ok());
  std::map<std::string, std::string> attributes = V6eMetadata();
  attributes["worker-network-endpoints"] = " 0:w0:10.1.0.5 , 1:w1:10.1.0.6:extra,2:w2:10.1.0.7,3:w3:10.1.0.8\n";
  FakeMetadata metadata(attributes);
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options({}, &metadata));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_THAT(info->worker_hostnames, ElementsAre("10.1.0.5", "10.1.0.6", "10.1.0.7", "10.1.0.8"));
}

TEST_F(TpuDetectTest, HostWithoutTpuAsksMetadataOnlyForTheAcceleratorType) {
  FakeMetadata metadata(std::map<std::string, std::string>{{"instance-id", "42"}});
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options({}, &metadata));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->chips, 0);
  EXPECT_FALSE(info->generation.has_value());
  EXPECT_TRUE(info->slice_name.empty());
  EXPECT_THAT(info->warnings, IsEmpty());
  EXPECT_THAT(metadata.asked(), ElementsAre("accelerator-type"));
  EXPECT_THAT(TpuLabels(*info), IsEmpty());
}

TEST_F(TpuDetectTest, TpuEnvWithoutDevicesGivesNoChipsAndWarns) {
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options(V6eEnv()));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->chips, 0);
  EXPECT_EQ(info->generation, TpuGeneration::kV6e);
  EXPECT_THAT(info->warnings, Contains(HasSubstr("no TPU devices were found")));
  EXPECT_THAT(TpuLabels(*info), IsEmpty());
}

TEST_F(TpuDetectTest, PodTypeWithoutTopologyLeavesTopologyUnset) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 4).ok());
  EnvMap env = V6eEnv();
  env.erase("TPU_TOPOLOGY");
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options(env));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->topology.has_value());
  EXPECT_THAT(info->warnings, Contains(HasSubstr("no topology is known")));
  Labels labels = TpuLabels(*info);
  EXPECT_FALSE(labels.contains(std::string(kLabelTpuTopology)));
  EXPECT_EQ(labels.at(std::string(kLabelTpuPodType)), "v6e-16");

  // The host count still follows from the pod type: 16 chips on 4-chip hosts.
  env["TPU_WORKER_ID"] = "4";
  EXPECT_THAT(DetectTpu(Options(env)).status().message(), HasSubstr("from 0 to 3"));
}

TEST_F(TpuDetectTest, TopologyWithoutAnyGenerationIsIgnoredWithWarning) {
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options({{"TPU_TOPOLOGY", "4x4"}}));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->topology.has_value());
  EXPECT_FALSE(info->generation.has_value());
  EXPECT_THAT(info->warnings, Contains(HasSubstr("the topology is ignored")));
}

TEST_F(TpuDetectTest, MissingPodTypeIsComputedFromTheTopology) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 4).ok());
  EnvMap env = V6eEnv();
  env.erase("TPU_ACCELERATOR_TYPE");  // the generation comes from the devices
  absl::StatusOr<TpuHostInfo> info = DetectTpu(Options(env));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->pod_type->ToString(), "v6e-16");
}

TEST_F(TpuDetectTest, DetectedChipCountWinsOverTheSetting) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 8).ok());
  TpuDetectOptions options = Options({{"TPU_ACCELERATOR_TYPE", "v6e-8"},
                                      {"TPU_TOPOLOGY", "2x4"},
                                      {"TPU_WORKER_HOSTNAMES", "localhost"},
                                      {"TPU_WORKER_ID", "0"}});
  options.chips_per_host = 4;
  absl::StatusOr<TpuHostInfo> info = DetectTpu(options);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->chips, 8);
  EXPECT_THAT(info->warnings, Contains(HasSubstr("chips-per-host setting 4 ignored")));
  EXPECT_EQ(TpuLabels(*info).at(std::string(kLabelTpuChipsPerHost)), "8");
}

TEST_F(TpuDetectTest, ChipsPerHostSettingAppliesWithoutDevices) {
  TpuDetectOptions options = Options({{"TPU_ACCELERATOR_TYPE", "v6e-8"},
                                      {"TPU_TOPOLOGY", "2x4"},
                                      {"TPU_WORKER_HOSTNAMES", "a,b"},
                                      {"TPU_WORKER_ID", "1"}});
  options.chips_per_host = 4;  // 2x4 as two 4-chip hosts
  absl::StatusOr<TpuHostInfo> info = DetectTpu(options);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->worker_id, 1);
  options.chips_per_host.reset();  // default: one 8-chip host
  EXPECT_THAT(DetectTpu(options).status().message(), HasSubstr("lists 2 hosts"));
  options.chips_per_host = 3;
  EXPECT_EQ(DetectTpu(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(TpuDetectTest, SliceNameOverrideWins) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 4).ok());
  TpuDetectOptions options = Options(V6eEnv());
  options.slice_name_override = "pinned";
  absl::StatusOr<TpuHostInfo> info = DetectTpu(options);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->slice_name, "pinned");
}

// ---------------------------------------------------------------------------------------------------------------
// Errors: each names the variable and the accepted forms.

struct ErrorCase {
  std::string name;
  EnvMap changes;                     // applied to V6eEnv(); an empty value erases the variable
  std::vector<std::string> expected;  // substrings of the message
  int chips = 4;
};

TEST_F(TpuDetectTest, MalformedEnvIsInvalidArgument) {
  const std::vector<ErrorCase> cases = {
      {"bad pod type", {{"TPU_ACCELERATOR_TYPE", "v9-8"}}, {"TPU_ACCELERATOR_TYPE \"v9-8\" is invalid", "v6e-16"}},
      {"bad topology", {{"TPU_TOPOLOGY", "3x3"}}, {"TPU_TOPOLOGY \"3x3\" is invalid", "4x4"}},
      {"3D topology on v6e", {{"TPU_TOPOLOGY", "2x2x4"}}, {"TPU_TOPOLOGY \"2x2x4\" is invalid"}},
      {"type and topology disagree",
       {{"TPU_TOPOLOGY", "2x8"}, {"TPU_ACCELERATOR_TYPE", "v6e-32"}},
       {"disagree", "v6e-16"}},
      {"non-integer worker id",
       {{"TPU_WORKER_ID", "two"}},
       {"TPU_WORKER_ID \"two\" is invalid", "an integer from 0 to 3"}},
      {"negative worker id", {{"TPU_WORKER_ID", "-1"}}, {"TPU_WORKER_ID \"-1\"", "from 0 to 3"}},
      {"worker id too large", {{"TPU_WORKER_ID", "4"}}, {"TPU_WORKER_ID \"4\"", "the slice has 4 hosts"}},
      {"too few hostnames",
       {{"TPU_WORKER_HOSTNAMES", "h0,h1,h2"}},
       {"TPU_WORKER_HOSTNAMES lists 3 hosts", "exactly 4 comma-separated hostnames"}},
      {"empty hostname", {{"TPU_WORKER_HOSTNAMES", "h0,,h2,h3"}}, {"TPU_WORKER_HOSTNAMES", "empty entry"}},
      {"slice name not a label value", {{"TPU_NAME", "a/b"}}, {"TPU_NAME \"a/b\""}},
      {"host chips do not fit", {}, {"does not fit this host with 8 chips"}, 8},
      {"pod type not made of hosts",
       {{"TPU_ACCELERATOR_TYPE", "v6e-4"}, {"TPU_TOPOLOGY", ""}},
       {"TPU_ACCELERATOR_TYPE \"v6e-4\" has 4 chips", "hosts of 8 chips"},
       8},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    fs::remove_all(root_);
    ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, c.chips).ok());
    EnvMap env = V6eEnv();
    for (const auto& [key, value] : c.changes) {
      if (value.empty()) {
        env.erase(key);
      } else {
        env[key] = value;
      }
    }
    absl::StatusOr<TpuHostInfo> info = DetectTpu(Options(env));
    ASSERT_FALSE(info.ok());
    EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument);
    for (const std::string& expected : c.expected) EXPECT_THAT(info.status().message(), HasSubstr(expected));
  }
}

TEST_F(TpuDetectTest, MalformedMetadataIsInvalidArgumentNamingTheAttribute) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 4).ok());
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"accelerator-type", "tpu-v9-8"}}, "metadata attribute accelerator-type"},
      {{{"tpu-env", "TOPOLOGY: '5x5'\n"}}, "metadata attribute tpu-env"},
      {{{"agent-worker-number", "x"}}, "metadata attribute agent-worker-number \"x\""},
      {{{"worker-network-endpoints", "a:b:10.0.0.1,10.0.0.2"}}, "metadata attribute worker-network-endpoints"},
      {{{"worker-network-endpoints", "a:b:10.0.0.1"}}, "lists 1 host but"},
  };
  for (const auto& [changes, expected] : cases) {
    SCOPED_TRACE(expected);
    std::map<std::string, std::string> attributes = V6eMetadata();
    for (const auto& [key, value] : changes) attributes[key] = value;
    FakeMetadata metadata(attributes);
    absl::StatusOr<TpuHostInfo> info = DetectTpu(Options({}, &metadata));
    ASSERT_FALSE(info.ok());
    EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(info.status().message(), HasSubstr(expected));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The HTTP metadata source against a local server.

class MetadataServer {
 public:
  MetadataServer() {
    server_.Get(R"(/computeMetadata/v1/instance/attributes/(.+))",
                [this](const httplib::Request& request, httplib::Response& response) {
                  {
                    absl::MutexLock lock(&mutex_);
                    flavors_.push_back(request.get_header_value("Metadata-Flavor"));
                  }
                  if (request.get_header_value("Metadata-Flavor") != "Google") {
                    response.status = 403;
                    return;
                  }
                  const std::string key = request.matches[1];
                  if (key == "accelerator-type") {
                    response.set_content("v6e-16", "text/plain");
                  } else if (key == "empty") {
                    response.status = 200;
                  } else if (key == "redirect") {
                    response.set_redirect("/computeMetadata/v1/instance/attributes/accelerator-type");
                  } else {
                    response.status = 404;
                    response.set_content("not found", "text/plain");
                  }
                });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~MetadataServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<std::string> flavors() {
    absl::MutexLock lock(&mutex_);
    return flavors_;
  }

 private:
  httplib::Server server_;
  int port_ = -1;
  std::thread thread_;
  absl::Mutex mutex_;
  std::vector<std::string> flavors_ ABSL_GUARDED_BY(mutex_);
};

TEST(HttpMetadataSourceTest, SendsTheFlavorHeaderAndReadsTheBody) {
  MetadataServer server;
  std::unique_ptr<MetadataSource> source = MakeHttpMetadataSource(server.url());
  EXPECT_EQ(source->GetAttribute("accelerator-type"), "v6e-16");
  EXPECT_THAT(server.flavors(), ElementsAre("Google"));
}

TEST(HttpMetadataSourceTest, NotFoundEmptyAndRedirectAreAbsent) {
  MetadataServer server;
  std::unique_ptr<MetadataSource> source = MakeHttpMetadataSource(server.url() + "/");
  EXPECT_EQ(source->GetAttribute("instance-id"), std::nullopt);  // 404
  EXPECT_EQ(source->GetAttribute("empty"), std::nullopt);        // 200, empty body
  EXPECT_EQ(source->GetAttribute("redirect"), std::nullopt);     // 302
}

TEST(HttpMetadataSourceTest, UnreachableServerIsAbsent) {
  int port = 0;
  {
    MetadataServer server;  // a port that was just free and is closed again
    port = std::stoi(server.url().substr(server.url().rfind(':') + 1));
  }
  std::unique_ptr<MetadataSource> source = MakeHttpMetadataSource("http://127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(source->GetAttribute("accelerator-type"), std::nullopt);
  EXPECT_EQ(MakeHttpMetadataSource("not a url")->GetAttribute("accelerator-type"), std::nullopt);
}

TEST(HttpMetadataSourceTest, DetectTpuReadsThePodTypeOverHttp) {
  MetadataServer server;
  std::unique_ptr<MetadataSource> source = MakeHttpMetadataSource(server.url());
  TpuDetectOptions options;
  options.root = "/nonexistent-torus-root";
  options.metadata = source.get();
  absl::StatusOr<TpuHostInfo> info = DetectTpu(options);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->chips, 0);
  ASSERT_TRUE(info->pod_type.has_value());
  EXPECT_EQ(info->pod_type->ToString(), "v6e-16");
}

}  // namespace tpu_detect_test
}  // namespace torus
