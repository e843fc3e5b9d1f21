#include "torus/head/node_registry.h"

#include <gtest/gtest.h>

namespace torus::head {
namespace {

NodeRegistration Node(std::string id) {
  NodeRegistration r;
  r.node_id = std::move(id);
  r.address = "127.0.0.1";
  r.total.Set("CPU", 4);
  r.available.Set("CPU", 4);
  r.labels = {{"team", "ml"}};
  return r;
}

class NodeRegistryTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  NodeRegistry registry_{&clock_, {.node_timeout_micros = 3'000'000, .max_dead_nodes = 2}};
};

TEST_F(NodeRegistryTest, RegisterAndHeartbeat) {
  auto inc = registry_.Register(Node("a"));
  ASSERT_TRUE(inc.ok());
  EXPECT_EQ(registry_.AliveCount(), 1u);
  EXPECT_EQ(*registry_.Heartbeat("a", *inc, nullptr), HeartbeatOutcome::kOk);
  EXPECT_EQ(*registry_.Heartbeat("a", *inc + 1, nullptr), HeartbeatOutcome::kReregister);
  EXPECT_EQ(*registry_.Heartbeat("nobody", 1, nullptr), HeartbeatOutcome::kReregister);
}

TEST_F(NodeRegistryTest, HeartbeatUpdatesAvailability) {
  auto inc = *registry_.Register(Node("a"));
  ResourceSet avail;
  avail.Set("CPU", 1.5);
  ASSERT_TRUE(registry_.Heartbeat("a", inc, &avail).ok());
  EXPECT_EQ(registry_.Records(false)[0].available.GetFixed("CPU"), 15000);
}

TEST_F(NodeRegistryTest, SilentNodeDiesAfterTimeoutOnly) {
  auto inc = *registry_.Register(Node("a"));
  std::vector<std::string> deaths;
  registry_.SetDeathListener([&](const std::string& id, const std::string&) { deaths.push_back(id); });
  clock_.AdvanceMillis(2900);
  EXPECT_TRUE(registry_.ExpireSilentNodes().empty());
  ASSERT_EQ(*registry_.Heartbeat("a", inc, nullptr), HeartbeatOutcome::kOk);
  clock_.AdvanceMillis(3000);
  EXPECT_TRUE(registry_.ExpireSilentNodes().empty());
  clock_.AdvanceMillis(1);
  EXPECT_EQ(registry_.ExpireSilentNodes(), std::vector<std::string>{"a"});
  EXPECT_EQ(deaths, std::vector<std::string>{"a"});
  EXPECT_EQ(registry_.AliveCount(), 0u);
  auto records = registry_.Records(true);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].state, NodeState::kDead);
  EXPECT_EQ(records[0].death_reason, "no heartbeat for 3001 ms");
  // A dead node's heartbeat asks it to register again.
  EXPECT_EQ(*registry_.Heartbeat("a", inc, nullptr), HeartbeatOutcome::kReregister);
}

TEST_F(NodeRegistryTest, ReregistrationIsNewIncarnationNotDuplicate) {
  auto first = *registry_.Register(Node("a"));
  ASSERT_TRUE(*registry_.MarkDead("a", "preempted"));
  auto second = *registry_.Register(Node("a"));
  EXPECT_GT(second, first);
  EXPECT_EQ(registry_.AliveCount(), 1u);
  EXPECT_EQ(registry_.Records(true).size(), 1u);
  EXPECT_EQ(*registry_.Heartbeat("a", first, nullptr), HeartbeatOutcome::kReregister);
  EXPECT_EQ(*registry_.Heartbeat("a", second, nullptr), HeartbeatOutcome::kOk);
  // Registering again while alive (head lost a reply) also replaces, never adds.
  ASSERT_TRUE(registry_.Register(Node("a")).ok());
  EXPECT_EQ(registry_.AliveCount(), 1u);
}

TEST_F(NodeRegistryTest, MarkDeadIsImmediateAndIdempotent) {
  registry_.Register(Node("a")).IgnoreError();
  EXPECT_TRUE(*registry_.MarkDead("a", "host preempted"));
  EXPECT_FALSE(*registry_.MarkDead("a", "again"));
  EXPECT_EQ(registry_.Records(true)[0].death_reason, "marked dead: host preempted");
  EXPECT_EQ(registry_.MarkDead("zzz", "").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(NodeRegistryTest, UnregisterOfStaleIncarnationIsIgnored) {
  auto first = *registry_.Register(Node("a"));
  auto second = *registry_.Register(Node("a"));
  ASSERT_TRUE(registry_.Unregister("a", first, "old").ok());
  EXPECT_EQ(registry_.AliveCount(), 1u);
  ASSERT_TRUE(registry_.Unregister("a", second, "shutdown").ok());
  EXPECT_EQ(registry_.AliveCount(), 0u);
  EXPECT_EQ(registry_.Records(true)[0].death_reason, "unregistered: shutdown");
}

TEST_F(NodeRegistryTest, OldestDeadRecordsArePruned) {
  for (std::string id : {"a", "b", "c"}) {
    registry_.Register(Node(id)).IgnoreError();
    clock_.AdvanceMillis(1);
    registry_.MarkDead(id, "").IgnoreError();
  }
  auto records = registry_.Records(true);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].info.node_id, "b");
}

TEST_F(NodeRegistryTest, InvalidRegistrationsNameTheField) {
  struct Case {
    std::string name;
    std::function<void(NodeRegistration&)> mutate;
    std::string message_part;
  };
  std::vector<Case> cases = {
      {"empty id", [](auto& r) { r.node_id = ""; }, "node_id"},
      {"bad id", [](auto& r) { r.node_id = "a b"; }, "node_id \"a b\""},
      {"no address", [](auto& r) { r.address = ""; }, "address"},
      {"bad label", [](auto& r) { r.labels = {{"-bad", "x"}}; }, "-bad"},
      {"bad resource", [](auto& r) { r.total.Set("bad name!", 1); }, "bad name!"},
  };
  for (auto& c : cases) {
    NodeRegistration r = Node("a");
    c.mutate(r);
    auto s = registry_.Register(r);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(s.status().message().find(c.message_part), std::string::npos) << c.name << ": " << s.status();
  }
  EXPECT_EQ(registry_.AliveCount(), 0u);
}

TEST_F(NodeRegistryTest, SnapshotReportsAliveness) {
  registry_.Register(Node("a")).IgnoreError();
  registry_.Register(Node("b")).IgnoreError();
  registry_.MarkDead("b", "").IgnoreError();
  EXPECT_EQ(registry_.Snapshot(false).size(), 1u);
  auto all = registry_.Snapshot(true);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_TRUE(all[0].alive);
  EXPECT_FALSE(all[1].alive);
}

}  // namespace
}  // namespace torus::head
