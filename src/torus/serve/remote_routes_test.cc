#include "torus/serve/remote_routes.h"

#include <gtest/gtest.h>

namespace torus::serve::remote_routes_test {

TEST(RemoteRoutesTest, RoutesKeepOnlyReadyReplicasWithAnAddressAndTheSpecsLimits) {
  const nlohmann::json services = nlohmann::json::parse(R"([
    {"name": "llm", "route_prefix": "/llm",
     "spec": {"request_timeout_s": 2.5, "queue_timeout_s": 0, "max_request_bytes": 1024, "max_queued_requests": 7},
     "replicas": [{"run_id": "run-a", "state": "READY", "address": "10.0.0.1:4000"},
                  {"run_id": "run-b", "state": "STARTING", "address": "10.0.0.2:4000"},
                  {"run_id": "run-c", "state": "READY", "address": ""},
                  {"run_id": "run-d", "state": "READY", "address": "[fd00::1]:4001"}]},
    {"name": "empty", "route_prefix": "/", "replicas": []}])");
  auto routes = RoutesFromServicesJson(services);
  ASSERT_TRUE(routes.ok()) << routes.status();
  ASSERT_EQ(routes->size(), 2u);
  const ServiceRoute& llm = (*routes)[0];
  EXPECT_EQ(llm.name, "llm");
  EXPECT_EQ(llm.prefix, "/llm");
  EXPECT_EQ(llm.request_timeout_ms, 2500);
  EXPECT_EQ(llm.queue_timeout_ms, 0);
  EXPECT_EQ(llm.max_request_bytes, 1024);
  EXPECT_EQ(llm.max_queued_requests, 7);
  EXPECT_EQ(llm.ready, (std::vector<ReplicaEndpoint>{{"run-a", "10.0.0.1", 4000}, {"run-d", "fd00::1", 4001}}));
  EXPECT_TRUE((*routes)[1].ready.empty());
  EXPECT_EQ(RoutesFromServicesJson(nlohmann::json::object()).status().message(), "services: expected a list");
  EXPECT_EQ(RoutesFromServicesJson(nlohmann::json::parse(R"([{"name": "x"}])")).status().message(),
            "services[0]: expected an object with name and route_prefix");
}

TEST(RemoteRoutesTest, LoadRoundTripsAndMalformedBodiesNameTheField) {
  IngressLoad load;
  load.ingress = "10.0.0.5:8000";
  load.services["llm"].in_flight = 3;
  load.services["llm"].queued = 1;
  load.services["llm"].replicas = {{"run-a", 2}, {"run-b", 1}};
  auto back = IngressLoadFromJson(IngressLoadToJson(load));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ingress, "10.0.0.5:8000");
  EXPECT_EQ(back->services["llm"].in_flight, 3);
  EXPECT_EQ(back->services["llm"].queued, 1);
  EXPECT_EQ(back->services["llm"].replicas, (std::map<std::string, int>{{"run-a", 2}, {"run-b", 1}}));

  EXPECT_EQ(IngressLoadFromJson("[").status().message(), "expected a JSON object");
  EXPECT_EQ(IngressLoadFromJson(R"({"services": {}})").status().message(),
            "ingress: expected the reporting ingress's host:port (1-256 characters)");
  EXPECT_EQ(IngressLoadFromJson(R"({"ingress": "a:1"})").status().message(), "services: expected an object");
  EXPECT_EQ(IngressLoadFromJson(R"({"ingress": "a:1", "services": {"x": {"in_flight": -1}}})").status().message(),
            "services.x.in_flight: expected a whole number from 0 to 1000000");
  EXPECT_EQ(IngressLoadFromJson(R"({"ingress": "a:1", "services": {"x": {"replicas": {"r": "2"}}}})")
                .status()
                .message(),
            "services.x.replicas.r: expected a whole number from 0 to 1000000");
}

}  // namespace torus::serve::remote_routes_test
