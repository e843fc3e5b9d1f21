#include "torus/cli/cluster_spec.h"

#include <gtest/gtest.h>

namespace torus::cli {
namespace cluster_spec_test {

constexpr char kLocal[] = R"(
head:
  num_cpus: 2
node_groups:
  - name: v6e
    tpu: {pod_type: v6e-16, topology: 4x4}
    slices: 2
    market_type: spot
  - name: v5e
    tpu: {accelerator_type: TPU-V5LITEPOD, topology: 2x4}
  - name: v4
    tpu: {pod_type: v4-16, topology: 2x2x2}
  - name: cpu
    count: 2
    num_cpus: 4
    memory: 8Gi
    object_store_memory: 512Mi
    labels: {team: infra, ray.io/node-group: cpu-pool}
  - name: gpu
    count: 2
    gpu: {count: 2, model: NVIDIA L4}
)";

TEST(ClusterSpecTest, ParsesAndExpandsTheLocalSpec) {
  auto spec = ParseClusterSpec(kLocal);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->groups.size(), 5u);
  EXPECT_EQ(spec->groups[0].tpu->shape.hosts, 4);
  EXPECT_EQ(spec->groups[1].tpu->shape.hosts, 1);
  EXPECT_EQ(spec->groups[1].tpu->shape.chips_per_host, 8);
  EXPECT_EQ(spec->groups[2].tpu->shape.hosts, 2);
  EXPECT_EQ(*spec->groups[3].memory_bytes, int64_t{8} << 30);
  EXPECT_EQ(*spec->groups[3].object_store_bytes, int64_t{512} << 20);
  EXPECT_FALSE(spec->groups[0].object_store_bytes.has_value());
  EXPECT_EQ(spec->groups[3].labels.at("torus.io/node-group"), "cpu-pool");

  auto hosts = ExpandClusterSpec(*spec);
  ASSERT_EQ(hosts.size(), 16u);  // head + 8 v6e + 1 v5e + 2 v4 + 2 cpu + 2 gpu
  EXPECT_EQ(hosts[0].name, "head");
  EXPECT_EQ(hosts[0].node_ip, "127.0.0.1");
  const SimulatedHost& w2 = hosts[3];
  EXPECT_EQ(w2.name, "v6e-0-w2");
  EXPECT_EQ(w2.env.at("TPU_ACCELERATOR_TYPE"), "v6e-16");
  EXPECT_EQ(w2.env.at("TPU_TOPOLOGY"), "4x4");
  EXPECT_EQ(w2.env.at("TPU_NAME"), "v6e-0");
  EXPECT_EQ(w2.env.at("TPU_WORKER_ID"), "2");
  EXPECT_EQ(w2.env.at("TPU_WORKER_HOSTNAMES"), "127.0.1.1,127.0.1.2,127.0.1.3,127.0.1.4");
  EXPECT_EQ(w2.env.at("TPU_SKIP_MDS_QUERY"), "true");
  EXPECT_EQ(w2.env.at("TORUS_NODE_MARKET_TYPE"), "spot");
  EXPECT_EQ(w2.env.at("TORUS_NODE_GROUP"), "v6e");
  EXPECT_EQ(w2.tpu_chips, 4);
  EXPECT_EQ(hosts[5].name, "v6e-1-w0");
  EXPECT_EQ(hosts[9].name, "v5e-0-w0");
  EXPECT_EQ(hosts[9].tpu_chips, 8);
  EXPECT_EQ(hosts[9].env.at("TPU_ACCELERATOR_TYPE"), "v5litepod-8");
  EXPECT_EQ(hosts[10].env.at("TPU_ACCELERATOR_TYPE"), "v4-16");
  EXPECT_EQ(hosts[15].name, "gpu-1");
  EXPECT_EQ(hosts[15].gpu_count, 2);
  // Every simulated host has its own address.
  std::set<std::string> ips;
  for (const auto& h : hosts) ips.insert(h.node_ip);
  EXPECT_EQ(ips.size(), hosts.size());
}

TEST(ClusterSpecTest, ErrorsNameTheField) {
  struct Case {
    std::string yaml;
    std::string error;
  };
  std::vector<Case> cases = {
      {"node_groups: [{name: a, tpu: {pod_type: v6e-16, topology: 3x3}}]",
       "node_groups[0].tpu.topology: topology \"3x3\" is not valid for TPU-V6E"},
      {"node_groups: [{name: a, slice: 2}]", "node_groups[0]: unknown key \"slice\"; accepted: name, count"},
      {"node_groups: [{count: 2}]", "node_groups[0].name: is required"},
      {"node_groups: [{name: Bad_Name}]", "node_groups[0].name: \"Bad_Name\" is invalid"},
      {"node_groups: [{name: a}, {name: a}]", "node_groups[1].name: \"a\" is used by an earlier group"},
      {"node_groups: [{name: a, count: 0}]", "node_groups[0].count: must be an integer from 1 to 1000"},
      {"node_groups: [{name: a, tpu: {pod_type: v6e-8, topology: 4x4}}]",
       "node_groups[0].tpu: pod_type v6e-8 does not match topology 4x4 (that is v6e-16)"},
      {"node_groups: [{name: a, tpu: {topology: 4x4}}]", "node_groups[0].tpu: give pod_type"},
      {"node_groups: [{name: a, tpu: {pod_type: v6e-16, topology: 4x4}, count: 3}]",
       "node_groups[0].count: TPU groups are sized by slices"},
      {"node_groups: [{name: a, memory: lots}]", "node_groups[0].memory: \"lots\" is not a byte size"},
      {"node_groups: [{name: a, object_store_memory: 1x}]",
       "node_groups[0].object_store_memory: \"1x\" is not a byte size"},
      {"head: {object_store_memory: [1]}", "head.object_store_memory: must be a string"},
      {"node_groups: [{name: a, labels: {torus.io/tpu-worker-id: '3'}}]", "node_groups[0].labels:"},
      {"node_groups: {name: a}", "node_groups: must be a list"},
      {"head: [1]", "head: must be a map"},
      {"node_groups: [{name: a, tpu: {pod_type: v6e-16", "spec is not valid YAML"},
      {"bogus: 1", "spec: unknown key \"bogus\"; accepted: head, node_groups"},
  };
  for (const Case& c : cases) {
    auto spec = ParseClusterSpec(c.yaml);
    ASSERT_FALSE(spec.ok()) << c.yaml;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(c.error), std::string::npos)
        << c.yaml << "\n  got: " << spec.status().message() << "\n  want: " << c.error;
  }
}

TEST(ClusterSpecTest, ByteSizes) {
  EXPECT_EQ(*ParseByteSize("16Gi"), int64_t{16} << 30);
  EXPECT_EQ(*ParseByteSize("512Mi"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("8G"), int64_t{8'000'000'000});
  EXPECT_EQ(*ParseByteSize("1000"), 1000);
  EXPECT_FALSE(ParseByteSize("-1").ok());
  EXPECT_FALSE(ParseByteSize("1.5Gi").ok());
  EXPECT_FALSE(ParseByteSize("Gi").ok());
  EXPECT_FALSE(ParseByteSize("99999999999Ti").ok());
}

TEST(ClusterSpecTest, NodeTypesBecomeTheHeadsAutoscalerConfig) {
  auto spec = ParseClusterSpec(R"(
autoscaler: {failure_backoff_s: 30}
node_types:
  - name: v6e
    tpu: {pod_type: v6e-16, topology: 4x4}
    max_slices: 2
    capacity_classes: [spot, on-demand]
    simulate: {spot: stockout}
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->node_types.size(), 1u);
  EXPECT_EQ(spec->node_types[0].max_slices, 2);
  EXPECT_EQ(ExpandClusterSpec(*spec).size(), 1u);  // the head's host only: the slices come when needed
  auto config = autoscale::ParseAutoscalerConfig(AutoscalerConfigFor(*spec, "/tmp/s"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->local_session, "/tmp/s");
  EXPECT_EQ(config->failure_backoff_ms, 30'000);
  ASSERT_EQ(config->node_types.size(), 1u);
  EXPECT_EQ(config->node_types[0].simulate.at(autoscale::CapacityClass::kSpot), autoscale::SimulatedAnswer::kStockout);
  EXPECT_EQ(config->node_types[0].classes.size(), 2u);
}

TEST(ClusterSpecTest, NodeTypeErrorsNameTheirField) {
  auto bad = ParseClusterSpec("node_types: [{name: v6e, tpu: {pod_type: v6e-16, topology: 4x4}, max_slices: x}]");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "node_types[0].max_slices: must be an integer from 0 to 1000");
  auto alone = ParseClusterSpec("autoscaler: {failure_backoff_s: 30}");
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().message(), "autoscaler: needs node_types to scale");
  auto big = ParseClusterSpec("node_types: [{name: v6e, tpu: {pod_type: v6e-256, topology: 16x16}, max_slices: 4}]");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("spec has 257 hosts (node types counted at max_slices)"), std::string::npos)
      << big.status().message();
}

}  // namespace cluster_spec_test
}  // namespace torus::cli
