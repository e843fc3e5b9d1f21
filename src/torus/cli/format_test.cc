#include "torus/cli/format.h"

#include <gtest/gtest.h>

namespace torus::cli {
namespace format_test {

rpc::ClusterStatus Sample() {
  rpc::ClusterStatus s;
  s.set_cluster_id("abc123");
  auto* n = s.add_nodes();
  n->mutable_info()->set_node_id("v6e-0-w0");
  n->mutable_info()->set_address("127.0.1.1");
  (*n->mutable_info()->mutable_resources_total())["CPU"] = 80000;
  (*n->mutable_info()->mutable_resources_total())["TPU"] = 40000;
  (*n->mutable_info()->mutable_labels())["torus.io/accelerator-type"] = "TPU-V6E";
  (*n->mutable_resources_available())["CPU"] = 60000;
  (*n->mutable_resources_available())["TPU"] = 40000;
  n->set_state(rpc::ALIVE);
  auto* d = s.add_nodes();
  d->mutable_info()->set_node_id("cpu-0");
  d->mutable_info()->set_address("127.0.1.9");
  d->set_state(rpc::DEAD);
  d->set_death_reason("no heartbeat for 3100 ms");
  (*s.mutable_resources_total())["CPU"] = 80000;
  (*s.mutable_resources_total())["memory"] = int64_t{16} * (1 << 30) * 10000;
  (*s.mutable_resources_available())["CPU"] = 60000;
  (*s.mutable_resources_available())["memory"] = int64_t{16} * (1 << 30) * 10000;
  auto* slice = s.add_slices();
  slice->set_name("v6e-0");
  slice->set_accelerator_type("TPU-V6E");
  slice->set_topology("4x4");
  slice->set_pod_type("v6e-16");
  slice->set_expected_hosts(4);
  slice->set_hosts_alive(3);
  slice->set_state(rpc::DEGRADED);
  slice->set_reason("worker 3 dead (node v6e-0-w3)");
  return s;
}

TEST(FormatTest, StatusTable) {
  std::string out = FormatStatus(Sample(), "127.0.0.1:6380");
  EXPECT_NE(out.find("Cluster abc123 at 127.0.0.1:6380"), std::string::npos) << out;
  EXPECT_NE(out.find("Nodes: 1 alive, 1 dead"), std::string::npos) << out;
  EXPECT_NE(out.find("  CPU       2     8"), std::string::npos) << out;
  EXPECT_NE(out.find("  memory    0 B   16.0 GiB"), std::string::npos) << out;
  EXPECT_NE(out.find("v6e-0  TPU-V6E  4x4       v6e-16    3/4    DEGRADED  -        worker 3 dead (node v6e-0-w3)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("cpu-0  127.0.1.9  no heartbeat for 3100 ms"), std::string::npos) << out;
}

TEST(FormatTest, StatusShowsHoldersAndPendingGroups) {
  rpc::ClusterStatus s = Sample();
  s.mutable_slices(0)->set_state(rpc::RESERVED);
  s.mutable_slices(0)->set_reason("");
  s.mutable_slices(0)->set_reserved_by("pg-1234");
  auto* pending = s.add_pending();
  pending->set_id("pg-5678");
  pending->set_state("PENDING");
  pending->set_request("TPU-V6E 4x4 x1, per host");
  pending->set_reason("TPU-V6E 4x4 x1: 0 of 1 slices available (v6e-0 RESERVED by pg-1234)");
  std::string out = FormatStatus(s, "127.0.0.1:6380");
  EXPECT_NE(out.find("v6e-0  TPU-V6E  4x4       v6e-16    3/4    RESERVED  pg-1234"), std::string::npos) << out;
  EXPECT_NE(out.find("Pending placement groups (1)\n  pg-5678  PENDING  TPU-V6E 4x4 x1, per host\n"
                     "    TPU-V6E 4x4 x1: 0 of 1 slices available (v6e-0 RESERVED by pg-1234)\n"),
            std::string::npos)
      << out;
}

TEST(FormatTest, JsonUsesUnitsAndNames) {
  auto j = rpc::StatusToJson(Sample());
  EXPECT_EQ(j["nodes_alive"], 1);
  EXPECT_EQ(j["nodes_dead"], 1);
  EXPECT_EQ(j["resources_total"]["CPU"], 8);
  EXPECT_EQ(j["nodes"][0]["resources_available"]["CPU"], 6);
  EXPECT_EQ(j["nodes"][1]["state"], "DEAD");
  EXPECT_EQ(j["slices"][0]["state"], "DEGRADED");
  EXPECT_EQ(j["slices"][0]["expected_hosts"], 4);
}

TEST(FormatTest, Amounts) {
  EXPECT_EQ(FormatAmount("CPU", 15000), "1.5");
  EXPECT_EQ(FormatAmount("TPU", 40000), "4");
  EXPECT_EQ(FormatAmount("memory", int64_t{1536} * 1024 * 1024 * 10000), "1.5 GiB");
  EXPECT_EQ(FormatAmount("memory", 5000 * 10000), "4.9 KiB");
}

TEST(FormatTest, AutoscalerSection) {
  EXPECT_EQ(FormatAutoscaler(nlohmann::json{{"enabled", false}}, 0), "");
  const nlohmann::json a = nlohmann::json::parse(R"({
    "enabled": true,
    "node_types": [{"name": "v6e", "accelerator_type": "TPU-V6E", "topology": "4x4", "min_slices": 0,
                    "max_slices": 3, "capacity_classes": [{"class": "spot"}, {"class": "flex-start"}],
                    "slices": {"running": 1, "provisioning": 1}}],
    "slices": [{"name": "v6e-0a1b2", "node_type": "v6e", "capacity_class": "flex-start", "phase": "RUNNING",
                "launched_ms": 100000, "running_ms": 101000, "idle_since_ms": 110000},
               {"name": "v6e-3c4d5", "node_type": "v6e", "capacity_class": "flex-start", "phase": "PROVISIONING",
                "launched_ms": 115000, "running_ms": 0, "idle_since_ms": 0}],
    "pending": [{"group": "pg-1", "name": "big", "note": "autoscaler: waiting for slice v6e-3c4d5 to start"}],
    "failures": [{"node_type": "v6e", "capacity_class": "spot", "reason": "no capacity within 10 s",
                  "at_ms": 90000, "until_ms": 390000}],
    "events": []})");
  EXPECT_EQ(FormatAutoscaler(a, 120'000),
            "\nAutoscaler\n"
            "  NODE TYPE  SHAPE        CLASSES          RUNNING  PROVISIONING  MIN  MAX\n"
            "  v6e        TPU-V6E 4x4  spot>flex-start  1        1             0    3\n"
            "\n"
            "  SLICE      NODE TYPE  CLASS       PHASE         AGE    IDLE\n"
            "  v6e-0a1b2  v6e        flex-start  RUNNING       20.0s  10.0s\n"
            "  v6e-3c4d5  v6e        flex-start  PROVISIONING  5.0s   -\n"
            "\n  Waiting groups:\n"
            "    big: autoscaler: waiting for slice v6e-3c4d5 to start\n"
            "\n  Recent failures (the class is not tried again until the time shown):\n"
            "    v6e spot: no capacity within 10 s (30.0s ago; retried in 4m)\n");
}

}  // namespace format_test
}  // namespace torus::cli
