#include "torus/accel/gpu_detect.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torus/accel/fake_host.h"

namespace torus {
namespace gpu_detect_test {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

class GpuDetectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "torus_gpu_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
  }
  void TearDown() override { fs::remove_all(root_); }

  void WriteFile(const std::string& relative, const std::string& contents) {
    const fs::path path = fs::path(root_) / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << contents;
  }

  GpuHostInfo DetectFromRoot() const { return DetectGpus({.root = root_, .use_nvml = false}); }

  std::string root_;
};

TEST_F(GpuDetectTest, CountsDeviceNodesAndReadsTheModel) {
  ASSERT_TRUE(WriteFakeGpuDevices(root_, 4, "NVIDIA H100 80GB HBM3").ok());
  WriteFile("dev/nvidia-uvm", "");
  WriteFile("dev/nvidia-modeset", "");
  GpuHostInfo info = DetectFromRoot();
  EXPECT_EQ(info.count, 4);
  EXPECT_EQ(info.model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(info.accelerator_type, "H100");
  EXPECT_EQ(info.source, "devfs");
  EXPECT_THAT(info.warnings, IsEmpty());
}

TEST_F(GpuDetectTest, FakeGpuLayoutMatchesTheDriver) {
  ASSERT_TRUE(WriteFakeGpuDevices(root_, 2, "NVIDIA L4").ok());
  EXPECT_TRUE(fs::exists(fs::path(root_) / "dev/nvidia1"));
  EXPECT_TRUE(fs::exists(fs::path(root_) / "dev/nvidiactl"));
  std::ifstream in(fs::path(root_) / "proc/driver/nvidia/gpus/0000:01:00.0/information");
  std::string first_line;
  std::getline(in, first_line);
  EXPECT_THAT(first_line, ::testing::MatchesRegex("Model:[ \t]+NVIDIA L4"));
  EXPECT_FALSE(WriteFakeGpuDevices(root_, -1, "NVIDIA L4").ok());
}

TEST_F(GpuDetectTest, NoGpus) {
  WriteFile("dev/nvidiactl", "");  // driver installed, no GPU
  GpuHostInfo info = DetectFromRoot();
  EXPECT_EQ(info.count, 0);
  EXPECT_EQ(info.source, "");
  EXPECT_EQ(info.model, "");
  EXPECT_EQ(info.accelerator_type, "");
  EXPECT_THAT(info.warnings, IsEmpty());

  GpuHostInfo missing = DetectGpus({.root = root_ + "/absent", .use_nvml = false});
  EXPECT_EQ(missing.count, 0);
}

TEST_F(GpuDetectTest, GpusWithoutDriverInformationHaveNoModel) {
  WriteFile("dev/nvidia0", "");
  GpuHostInfo info = DetectFromRoot();
  EXPECT_EQ(info.count, 1);
  EXPECT_EQ(info.model, "");
  EXPECT_EQ(info.accelerator_type, "");
  EXPECT_THAT(info.warnings, Contains(HasSubstr("model is unknown")));
}

TEST_F(GpuDetectTest, MixedModelsWarnAndUseTheFirst) {
  ASSERT_TRUE(WriteFakeGpuDevices(root_, 2, "NVIDIA A100-SXM4-40GB").ok());
  WriteFile("proc/driver/nvidia/gpus/0000:01:00.0/information", "Model: \t\t NVIDIA A100-SXM4-80GB\n");
  GpuHostInfo info = DetectFromRoot();
  EXPECT_EQ(info.model, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(info.accelerator_type, "A100");
  EXPECT_THAT(info.warnings, Contains(HasSubstr("different models")));
}

TEST_F(GpuDetectTest, UnknownModelWarns) {
  ASSERT_TRUE(WriteFakeGpuDevices(root_, 1, "NVIDIA GeForce RTX 4090").ok());
  GpuHostInfo info = DetectFromRoot();
  EXPECT_EQ(info.count, 1);
  EXPECT_EQ(info.accelerator_type, "");
  EXPECT_THAT(info.warnings, Contains(HasSubstr("no known accelerator type")));
}

// With NVML asked for, a host without libnvidia-ml falls back to the device root.
TEST_F(GpuDetectTest, FallsBackToDevfsWithoutNvml) {
  if (void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL); nvml != nullptr) {
    dlclose(nvml);
    GTEST_SKIP() << "NVML is installed here; the fallback is not reachable";
  }
  ASSERT_TRUE(WriteFakeGpuDevices(root_, 2, "NVIDIA L4").ok());
  GpuHostInfo info = DetectGpus({.root = root_, .use_nvml = true});
  EXPECT_EQ(info.count, 2);
  EXPECT_EQ(info.source, "devfs");
  EXPECT_EQ(info.accelerator_type, "L4");
}

TEST(GpuAcceleratorTypeFromModelTest, MapsModelNamesAsRayDoes) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"NVIDIA H100 80GB HBM3", "H100"},
      {"NVIDIA H100 PCIe", "H100"},
      {"NVIDIA H200", "H200"},
      {"NVIDIA H20", "H20"},
      {"NVIDIA B200", "B200"},
      {"NVIDIA GB200", "GB200"},
      {"NVIDIA A100-SXM4-40GB", "A100"},
      {"NVIDIA A100 80GB PCIe", "A100"},
      {"NVIDIA A10G", "A10G"},
      {"NVIDIA A10", "A10"},
      {"NVIDIA L4", "L4"},
      {"NVIDIA L40S", "L40S"},
      {"Tesla T4", "T4"},
      {"NVIDIA Tesla T4", "T4"},
      {"Tesla V100-SXM2-16GB", "V100"},
      {"Tesla P100-PCIE-16GB", "P100"},
      {"Tesla K80", "K80"},
      {"Tesla P4", "P4"},
      {"NVIDIA GeForce RTX 4090", ""},
      {"NVIDIA RTX A6000", ""},
      {"H100", ""},
      {"NVIDIA", ""},
      {"", ""},
  };
  for (const auto& [model, type] : cases) EXPECT_EQ(GpuAcceleratorTypeFromModel(model), type) << model;
}

}  // namespace gpu_detect_test
}  // namespace torus
