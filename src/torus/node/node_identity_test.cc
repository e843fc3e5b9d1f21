#include "torus/node/node_identity.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "torus/accel/fake_host.h"

namespace torus::node {
namespace node_identity_test {

class NodeIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/torus_identity_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  IdentityOptions Options() {
    IdentityOptions o;
    o.node_id = "n1";
    o.address = "127.0.1.1";
    o.dev_root = root_;
    o.sys_root = root_;
    o.use_nvml = false;
    o.num_cpus = 8;
    o.memory_bytes = int64_t{1} << 30;
    return o;
  }

  std::string root_;
};

TEST_F(NodeIdentityTest, SimulatedV6eHostIsDetectedThroughTheDeviceRoot) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 4).ok());
  IdentityOptions o = Options();
  o.env = {{"TPU_ACCELERATOR_TYPE", "v6e-16"}, {"TPU_TOPOLOGY", "4x4"},     {"TPU_NAME", "slice-a"},
           {"TPU_WORKER_ID", "2"},             {"TPU_SKIP_MDS_QUERY", "true"},
           {"TPU_WORKER_HOSTNAMES", "h0,h1,h2,h3"}, {"TORUS_NODE_MARKET_TYPE", "spot"}};
  auto id = BuildNodeIdentity(o);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->resources.GetFixed("TPU"), 4 * kResourceScale);
  EXPECT_EQ(id->resources.GetFixed("CPU"), 8 * kResourceScale);
  EXPECT_EQ(id->resources.GetFixed("memory"), (int64_t{1} << 30) * kResourceScale);
  EXPECT_EQ(id->labels.at("torus.io/accelerator-type"), "TPU-V6E");
  EXPECT_EQ(id->labels.at("torus.io/tpu-slice-name"), "slice-a");
  EXPECT_EQ(id->labels.at("torus.io/tpu-worker-id"), "2");
  EXPECT_EQ(id->labels.at("torus.io/tpu-topology"), "4x4");
  EXPECT_EQ(id->labels.at("torus.io/tpu-pod-type"), "v6e-16");
  EXPECT_EQ(id->labels.at("torus.io/market-type"), "spot");
  EXPECT_EQ(id->labels.at("torus.io/node-id"), "n1");
}

TEST_F(NodeIdentityTest, TpuEnvWithoutDevicesGivesNoTpuResource) {
  IdentityOptions o = Options();
  o.env = {{"TPU_ACCELERATOR_TYPE", "v6e-16"}, {"TPU_TOPOLOGY", "4x4"}, {"TPU_SKIP_MDS_QUERY", "true"}};
  auto id = BuildNodeIdentity(o);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->resources.GetFixed("TPU"), 0);
  EXPECT_FALSE(id->labels.contains("torus.io/accelerator-type"));
  EXPECT_FALSE(id->warnings.empty());
}

TEST_F(NodeIdentityTest, UserLabelsWinOverEnvironment) {
  IdentityOptions o = Options();
  o.env = {{"TORUS_NODE_GROUP", "from-env"}, {"TORUS_NODE_ZONE", "us-central2-b"}};
  o.user_labels = {{"torus.io/node-group", "from-flag"}, {"team", "ml"}};
  auto id = BuildNodeIdentity(o);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->labels.at("torus.io/node-group"), "from-flag");
  EXPECT_EQ(id->labels.at("torus.io/availability-zone"), "us-central2-b");
  EXPECT_EQ(id->labels.at("team"), "ml");
}

TEST_F(NodeIdentityTest, MalformedEnvironmentLabelIsAnError) {
  IdentityOptions o = Options();
  o.env = {{"TORUS_NODE_MARKET_TYPE", "not valid!"}};
  auto id = BuildNodeIdentity(o);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("TORUS_NODE_MARKET_TYPE"), std::string::npos) << id.status();
}

TEST_F(NodeIdentityTest, MalformedTpuEnvironmentIsAnErrorNamingTheVariable) {
  ASSERT_TRUE(WriteFakeTpuDevices(root_, TpuGeneration::kV6e, 4).ok());
  IdentityOptions o = Options();
  o.env = {{"TPU_ACCELERATOR_TYPE", "v6e-16"}, {"TPU_TOPOLOGY", "3x3"}, {"TPU_SKIP_MDS_QUERY", "true"}};
  auto id = BuildNodeIdentity(o);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("3x3"), std::string::npos) << id.status();
}

TEST_F(NodeIdentityTest, SimulatedGpuHost) {
  ASSERT_TRUE(WriteFakeGpuDevices(root_, 2, "NVIDIA L4").ok());
  auto id = BuildNodeIdentity(Options());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->resources.GetFixed("GPU"), 2 * kResourceScale);
  EXPECT_EQ(id->labels.at("torus.io/accelerator-type"), "L4");
}

TEST(HostProbeTest, MemoryFromMeminfo) {
  char tmpl[] = "/tmp/torus_meminfo_XXXXXX";
  int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(tmpl) << "MemTotal:       16384 kB\nMemFree:        1 kB\n";
  EXPECT_EQ(DetectMemoryBytes(tmpl), 16384 * 1024);
  EXPECT_EQ(DetectMemoryBytes("/nonexistent"), 0);
  std::filesystem::remove(tmpl);
}

// The CPUs this process may run on (its affinity), not the machine's: with the thread held to one CPU it counts 1.
TEST(CpuCountTest, IsTheAffinityOfTheProcess) {
  cpu_set_t original;
  ASSERT_EQ(sched_getaffinity(0, sizeof(original), &original), 0);
  EXPECT_EQ(DetectCpuCount(), CPU_COUNT(&original));
  int first = 0;
  while (!CPU_ISSET(first, &original)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(DetectCpuCount(), 1);
  ASSERT_EQ(sched_setaffinity(0, sizeof(original), &original), 0);
}

}  // namespace node_identity_test
}  // namespace torus::node
