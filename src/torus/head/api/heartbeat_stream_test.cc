#include "torus/head/api/heartbeat_stream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace torus::head {
namespace heartbeat_stream_test {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

rpc::HeartbeatRequest WithReport() {
  rpc::HeartbeatRequest request;
  request.set_node_id("n1");
  request.set_incarnation(1);
  request.set_has_resources_available(true);
  (*request.mutable_resources_available())["CPU"] = 30'000;
  return request;
}

TEST(ParseHeartbeatTest, AHeartbeatWithoutAReportChangesNothing) {
  rpc::HeartbeatRequest request;
  request.set_node_id("n1");
  absl::StatusOr<std::optional<HeartbeatReport>> parsed = ParseHeartbeat(request);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->has_value());
}

TEST(ParseHeartbeatTest, LeaseHoldingsComeWithTheAvailability) {
  rpc::HeartbeatRequest request = WithReport();
  (*request.mutable_leased()->mutable_resources())["TPU"] = 20'000;
  request.mutable_leased()->add_chips(3);
  request.mutable_leased()->add_chips(2);
  request.mutable_leased()->add_gpus(0);
  absl::StatusOr<std::optional<HeartbeatReport>> parsed = ParseHeartbeat(request);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->has_value());
  EXPECT_EQ((*parsed)->available.Get("CPU"), 3);
  EXPECT_EQ((*parsed)->leased.resources.Get("TPU"), 2);
  EXPECT_THAT((*parsed)->leased.chips, ElementsAre(2, 3));
  EXPECT_THAT((*parsed)->leased.gpus, ElementsAre(0));
}

TEST(ParseHeartbeatTest, BadLeaseHoldingsAreRefusedNamingTheField) {
  struct Case {
    std::function<void(rpc::HeartbeatRequest&)> spoil;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](rpc::HeartbeatRequest& r) { r.mutable_leased()->add_chips(-1); },
       "leased.chips: -1 is not a device index (0-4095)"},
      {[](rpc::HeartbeatRequest& r) { r.mutable_leased()->add_gpus(5000); },
       "leased.gpus: 5000 is not a device index (0-4095)"},
      {[](rpc::HeartbeatRequest& r) {
         r.mutable_leased()->add_chips(1);
         r.mutable_leased()->add_chips(1);
       },
       "leased.chips: an index is listed twice"},
      {[](rpc::HeartbeatRequest& r) { (*r.mutable_leased()->mutable_resources())["TPU"] = -5; }, "leased.resources"},
  };
  for (const Case& c : cases) {
    rpc::HeartbeatRequest request = WithReport();
    c.spoil(request);
    absl::StatusOr<std::optional<HeartbeatReport>> parsed = ParseHeartbeat(request);
    ASSERT_FALSE(parsed.ok()) << c.message;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(c.message));
  }
}

TEST(ApplyHeartbeatTest, StoresWhatLeasesHoldForTheConfirmedNode) {
  FakeClock clock;
  Liveness liveness(&clock);
  liveness.Registered(NodeId("n1"), 1, ResourceSet());
  rpc::HeartbeatRequest request = WithReport();
  (*request.mutable_leased()->mutable_resources())["TPU"] = 10'000;
  request.mutable_leased()->add_chips(0);
  absl::StatusOr<rpc::HeartbeatReply::Action> action = ApplyHeartbeat(request, liveness);
  ASSERT_TRUE(action.ok()) << action.status();
  EXPECT_EQ(*action, rpc::HeartbeatReply::OK);
  ASSERT_EQ(liveness.Leased().count(NodeId("n1")), 1u);
  EXPECT_THAT(liveness.Leased().at(NodeId("n1")).chips, ElementsAre(0));
}

}  // namespace heartbeat_stream_test
}  // namespace torus::head
