#include "torus/autoscale/config.h"

#include <gtest/gtest.h>

#include "torus/common/well_known_labels.h"

namespace torus::autoscale {
namespace {

constexpr char kConfig[] = R"(
provider: {type: local, session: /tmp/s}
failure_backoff_s: 30
node_types:
  - name: v6e
    tpu: {pod_type: v6e-16, topology: 4x4}
    num_cpus: 4
    memory: 8Gi
    labels: {team: ml}
    min_slices: 1
    max_slices: 3
    idle_timeout_s: 2.5
    capacity_classes:
      - {class: spot, provisioning_timeout_s: 5}
      - flex-start
    simulate: {spot: stockout, flex-start: quota}
  - name: v5e
    tpu: {accelerator_type: TPU-V5LITEPOD, topology: 2x4}
)";

TEST(AutoscalerConfigTest, ParsesEveryField) {
  auto config = ParseAutoscalerConfig(kConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->local_session, "/tmp/s");
  EXPECT_EQ(config->failure_backoff_ms, 30'000);
  ASSERT_EQ(config->node_types.size(), 2u);
  const NodeType& v6e = config->node_types[0];
  EXPECT_EQ(v6e.name, "v6e");
  EXPECT_EQ(v6e.shape.hosts, 4);
  EXPECT_EQ(v6e.shape.chips_per_host, 4);
  EXPECT_EQ(v6e.num_cpus, 4);
  EXPECT_EQ(v6e.memory_bytes, int64_t{8} << 30);
  EXPECT_EQ(v6e.labels.at("team"), "ml");
  EXPECT_EQ(v6e.min_slices, 1);
  EXPECT_EQ(v6e.max_slices, 3);
  EXPECT_EQ(v6e.idle_timeout_ms, 2500);
  ASSERT_EQ(v6e.classes.size(), 2u);
  EXPECT_EQ(v6e.classes[0].capacity_class, CapacityClass::kSpot);
  EXPECT_EQ(v6e.classes[0].provisioning_timeout_ms, 5000);
  EXPECT_EQ(v6e.classes[1].capacity_class, CapacityClass::kFlexStart);
  EXPECT_EQ(v6e.classes[1].provisioning_timeout_ms, 600'000);
  EXPECT_EQ(v6e.simulate.at(CapacityClass::kSpot), SimulatedAnswer::kStockout);
  EXPECT_EQ(v6e.simulate.at(CapacityClass::kFlexStart), SimulatedAnswer::kQuota);
  const NodeType& v5e = config->node_types[1];
  EXPECT_EQ(v5e.shape.hosts, 1);  // 2x4 on one 8-chip host by default
  EXPECT_EQ(v5e.max_slices, 10);
  ASSERT_EQ(v5e.classes.size(), 1u);
  EXPECT_EQ(v5e.classes[0].capacity_class, CapacityClass::kOnDemand);
  EXPECT_EQ(config->Find("v5e"), &config->node_types[1]);
  EXPECT_EQ(config->Find("v4"), nullptr);
}

TEST(AutoscalerConfigTest, ErrorsNameTheFieldAndTheAcceptedForms) {
  struct Case {
    std::string node_type;  // one node type's YAML (a flow map)
    std::string error;
  };
  const Case cases[] = {
      {"{tpu: {pod_type: v6e-16, topology: 4x4}}", "node_types[0].name: is required"},
      {"{name: V6E, tpu: {pod_type: v6e-16, topology: 4x4}}", "node_types[0].name: \"V6E\" is invalid"},
      {"{name: cpu, num_cpus: 4}", "node_types[0].tpu: is required (the autoscaler launches whole TPU slices)"},
      {"{name: a, tpu: {pod_type: v6e-16, topology: 3x3}}", "node_types[0].tpu.topology: topology \"3x3\""},
      {"{name: a, tpu: {pod_type: v6e-16, topology: 4x4}, max_slices: -1}",
       "node_types[0].max_slices: must be an integer from 0 to 1000"},
      {"{name: a, tpu: {pod_type: v6e-16, topology: 4x4}, min_slices: 3, max_slices: 2}",
       "node_types[0]: min_slices (3) is more than max_slices (2)"},
      {"{name: a, tpu: {pod_type: v6e-16, topology: 4x4}, capacity_classes: [spot, cheap]}",
       "node_types[0].capacity_classes[1]: capacity class \"cheap\" is not known; accepted: spot, flex-start, "
       "reserved, on-demand"},
      {"{name: a, tpu: {pod_type: v6e-16, topology: 4x4}, capacity_classes: [spot, spot]}",
       "node_types[0].capacity_classes[1]: class spot is listed twice"},
      {"{name: a, tpu: {pod_type: v6e-16, topology: 4x4}, capacity_classes: []}",
       "node_types[0].capacity_classes: must be a non-empty list"},
      {"{name: a, tpu: {pod_type: v6e-16, topology: 4x4}, capacity_classes: [{class: spot, "
       "provisioning_timeout_s: 0}]}",
       "node_types[0].capacity_classes[0].provisioning_timeout_s: must be more than 0"},
      {"{name: a, tpu: {pod_type: v6e-16, topology: 4x4}, simulate: {spot: maybe}}",
       "node_types[0].simulate.spot: \"maybe\" is not an answer; accepted: stockout"},
      {"{name: a, tpu: {pod_type: v6e-16, topology: 4x4}, labels: {torus.io/market-type: spot}}",
       "node_types[0].labels: torus.io/market-type is set by the autoscaler"},
      {"{name: a, tpu: {pod_type: v6e-16, topology: 4x4}, slices: 2}",
       "node_types[0]: unknown key \"slices\"; accepted: name, tpu,"},
  };
  for (const Case& c : cases) {
    auto config = ParseAutoscalerConfig("provider: {type: local, session: /s}\nnode_types: [" + c.node_type + "]");
    ASSERT_FALSE(config.ok()) << c.node_type;
    EXPECT_TRUE(absl::IsInvalidArgument(config.status()));
    EXPECT_NE(config.status().message().find(c.error), std::string::npos)
        << c.node_type << "\n  got: " << config.status().message() << "\n  want: " << c.error;
  }
}

TEST(AutoscalerConfigTest, RefusesABadProviderAndDuplicateNames) {
  auto unknown = ParseAutoscalerConfig("provider: {type: aws}\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().message(), "provider.type: \"aws\" is not known; accepted: local, kubernetes");
  auto missing = ParseAutoscalerConfig("node_types: []\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "provider: is required, e.g. {type: local, session: DIR}");
  auto twice = ParseAutoscalerConfig(
      "provider: {type: local, session: /s}\nnode_types: [{name: a, tpu: {pod_type: v6e-8, topology: 2x4}}, "
      "{name: a, tpu: {pod_type: v6e-8, topology: 2x4}}]");
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().message(), "node_types[1].name: \"a\" is used by an earlier node type");
  auto bad_yaml = ParseAutoscalerConfig("provider: [");
  ASSERT_FALSE(bad_yaml.ok());
  EXPECT_NE(bad_yaml.status().message().find("not valid YAML"), std::string::npos);
}

TEST(AutoscalerConfigTest, TheKubernetesProviderNeedsAnImageAndTheHeadsAddress) {
  auto config = ParseAutoscalerConfig(R"(
provider: {type: kubernetes, image: example.com/torus:1, head_address: torus-head.torus.svc:6380, namespace: ml}
node_types:
  - {name: v6e, tpu: {pod_type: v6e-16, topology: 4x4}, capacity_classes: [reserved, spot], reservation: res-1}
)");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->provider, ProviderKind::kKubernetes);
  EXPECT_EQ(config->kubernetes.image, "example.com/torus:1");
  EXPECT_EQ(config->kubernetes.ns, "ml");
  EXPECT_EQ(config->kubernetes.token_secret, "torus-token");
  EXPECT_EQ(config->kubernetes.api_server, "https://kubernetes.default.svc");
  EXPECT_EQ(config->node_types[0].reservation, "res-1");
  const std::pair<std::string, std::string> cases[] = {
      {"provider: {type: kubernetes, head_address: h:1}",
       "provider.image: is required: the torus image the hosts run"},
      {"provider: {type: kubernetes, image: i}", "provider.head_address: is required"},
      {"provider: {type: kubernetes, image: i, head_address: h:1, image_pull_policy: Sometimes}",
       "provider.image_pull_policy: accepted: Always, IfNotPresent, Never"},
      {"provider: {type: kubernetes, image: \"a b\", head_address: h:1}",
       "provider.image: must be UTF-8 without spaces or control characters"},
      {"provider: {type: kubernetes, image: a\xff" "b, head_address: h:1}",
       "provider.image: must be UTF-8 without spaces or control characters"},
      {"provider: {type: kubernetes, image: i, head_address: h:1, namespace: My_NS}",
       "provider.namespace: \"My_NS\" is not a Kubernetes name"},
      {"provider: {type: kubernetes, image: i, head_address: h:1, session: /s}",
       "provider: unknown key \"session\""},
      {"provider: {type: kubernetes, image: i, head_address: h:1}\nnode_types: [{name: a, tpu: {pod_type: v6e-8, "
       "topology: 2x4}, capacity_classes: [reserved]}]",
       "node_types[0].reservation: is required for class reserved with the kubernetes provider"},
      {"provider: {type: kubernetes, image: i, head_address: h:1}\nnode_types: [{name: a, tpu: {pod_type: v6e-8, "
       "topology: 2x4}, simulate: {spot: quota}}]",
       "node_types[0].simulate: is for the local provider only"},
  };
  for (const auto& [text, error] : cases) {
    auto bad = ParseAutoscalerConfig(text);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_NE(bad.status().message().find(error), std::string::npos) << bad.status().message();
  }
}

TEST(AutoscalerConfigTest, SliceHostsCarryTheLabelsTheirAgentsWillReport) {
  auto config = ParseAutoscalerConfig(kConfig);
  ASSERT_TRUE(config.ok()) << config.status();
  std::vector<HostPlan> hosts = SliceHosts(config->node_types[0], "v6e-0a1b2", CapacityClass::kSpot);
  ASSERT_EQ(hosts.size(), 4u);
  const HostPlan& w2 = hosts[2];
  EXPECT_EQ(w2.name, "v6e-0a1b2-w2");
  EXPECT_EQ(w2.worker_id, 2);
  EXPECT_EQ(w2.env.at("TPU_ACCELERATOR_TYPE"), "v6e-16");
  EXPECT_EQ(w2.env.at("TPU_TOPOLOGY"), "4x4");
  EXPECT_EQ(w2.env.at("TPU_NAME"), "v6e-0a1b2");
  EXPECT_EQ(w2.env.at("TPU_WORKER_ID"), "2");
  EXPECT_EQ(w2.env.at("TORUS_NODE_MARKET_TYPE"), "spot");
  EXPECT_EQ(w2.env.at("TORUS_NODE_GROUP"), "v6e");
  EXPECT_EQ(w2.labels.at(std::string(kLabelTpuSliceName)), "v6e-0a1b2");
  EXPECT_EQ(w2.labels.at(std::string(kLabelTpuWorkerId)), "2");
  EXPECT_EQ(w2.labels.at(std::string(kLabelTpuPodType)), "v6e-16");
  EXPECT_EQ(w2.labels.at(std::string(kLabelAcceleratorType)), "TPU-V6E");
  EXPECT_EQ(w2.labels.at(std::string(kLabelMarketType)), "spot");
  EXPECT_EQ(w2.labels.at(std::string(kLabelNodeGroup)), "v6e");
  EXPECT_EQ(w2.labels.at(std::string(kLabelNodeId)), "v6e-0a1b2-w2");
  EXPECT_EQ(w2.labels.at("team"), "ml");
  EXPECT_EQ(w2.resources.GetFixed(kResourceTpu), 4 * kResourceScale);
  EXPECT_EQ(w2.resources.GetFixed(kResourceCpu), 4 * kResourceScale);
}

}  // namespace
}  // namespace torus::autoscale
