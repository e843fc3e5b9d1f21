// StartSimulatedHosts up to the point where it would start agents and simulators: those are torus binaries that
// reach a head, left to the end-to-end tests.
#include "torus/cli/sim_hosts.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "torus/cli/test_util.h"

namespace torus::cli {
namespace sim_hosts_test {

using test_util::TempDir;

TEST(SimHostsTest, NoHostsStartNothing) {
  TempDir session;
  auto agents = StartSimulatedHosts(session.path(), "127.0.0.1:9", {}, {});
  ASSERT_TRUE(agents.ok()) << agents.status();
  EXPECT_TRUE(agents->empty());
  EXPECT_FALSE(std::filesystem::exists(session.path() + "/processes"));
}

TEST(SimHostsTest, EveryDeviceRootIsLaidOutBeforeAnyAgentStarts) {
  TempDir session;
  SimulatedHost gpu{.name = "gpu-0", .gpu_count = 2, .gpu_model = "NVIDIA L4"};
  SimulatedHost blocked{.name = "cpu-0"};
  // A file where cpu-0's root would go: its root cannot be made.
  test_util::WriteFile(session.path() + "/hosts/cpu-0", "");
  auto agents = StartSimulatedHosts(session.path(), "127.0.0.1:9", {gpu, blocked}, {.tpu_sim = false});
  ASSERT_FALSE(agents.ok());
  EXPECT_EQ(agents.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(agents.status().message(), "cannot create " + session.path() + "/hosts/cpu-0: Not a directory");
  // gpu-0's devices were written, and no agent was started (none recorded) for it.
  for (const char* device : {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"}) {
    EXPECT_TRUE(std::filesystem::exists(session.path() + "/hosts/gpu-0" + device)) << device;
  }
  EXPECT_FALSE(std::filesystem::exists(session.path() + "/processes"));
}

}  // namespace sim_hosts_test
}  // namespace torus::cli
