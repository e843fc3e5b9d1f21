// LeaseServiceImpl over a real gRPC server on loopback: every method (from core.proto's descriptor, so that a new one
// is covered) refuses a call without the cluster token or with a wrong one, UNAUTHENTICATED, before anything else;
// with the token and no WorkerLeases attached yet, each answers UNAVAILABLE "the agent is starting".
#include "torus/node/lease_service.h"

#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "torus/rpc/generic_call_test_util.h"

namespace torus::node {
namespace lease_service_test {

constexpr char kToken[] = "lease-service-test-token";

class LeaseServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  }
  void TearDown() override { server_->Shutdown(); }

  grpc::Status Call(const std::string& method, const std::string& token) {
    return rpc::testutil::GenericUnaryCall(channel_, method, "", token, std::chrono::seconds(5));
  }

  LeaseServiceImpl service_{kToken, "n1"};
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(LeaseServiceTest, EveryMethodRefusesAMissingOrWrongToken) {
  ASSERT_EQ(rpc::testutil::ServiceMethods("torus.core.LeaseService").size(), 6u);  // a new method is covered too
  EXPECT_EQ(rpc::testutil::MethodsNotRefusingBadTokens(channel_, "torus.core.LeaseService"),
            std::vector<std::string>{});
}

TEST_F(LeaseServiceTest, WithTheTokenEveryMethodWaitsForTheAgentToStart) {
  for (const auto* m : rpc::testutil::ServiceMethods("torus.core.LeaseService")) {
    const std::string method = rpc::testutil::MethodPath(m);
    grpc::Status s = Call(method, kToken);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << method << ": " << s.error_message();
    EXPECT_EQ(s.error_message(), "the agent is starting") << method;
  }
}

}  // namespace lease_service_test
}  // namespace torus::node
