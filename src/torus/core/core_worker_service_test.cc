// The core worker's gRPC service, served by a real CoreWorker on loopback: every method of CoreWorkerService (from
// core.proto's descriptor, so that a new one is covered) refuses a call without the cluster token, or with a wrong
// one, UNAUTHENTICATED; and a push of no tasks with the token is refused INVALID_ARGUMENT, naming the field.
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "torus/core/core_worker.h"
#include "torus/rpc/generic_call_test_util.h"

namespace torus::core {
namespace core_worker_service_test {

constexpr char kToken[] = "core-worker-service-test-token";

class CoreWorkerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto w = CoreWorker::Start({.job_id = "auth-test", .local_agent = "127.0.0.1:1", .token = kToken});
    ASSERT_TRUE(w.ok()) << w.status();
    worker_ = *std::move(w);
    channel_ = grpc::CreateChannel(worker_->address(), grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    if (worker_) worker_->Shutdown();
  }

  std::unique_ptr<CoreWorker> worker_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(CoreWorkerServiceTest, EveryMethodRefusesAMissingOrWrongToken) {
  ASSERT_EQ(rpc::testutil::ServiceMethods("torus.core.CoreWorkerService").size(), 8u);  // a new method too
  EXPECT_EQ(rpc::testutil::MethodsNotRefusingBadTokens(channel_, "torus.core.CoreWorkerService"),
            std::vector<std::string>{});
}

TEST_F(CoreWorkerServiceTest, APushOfNoTasksIsRefusedNamingTheField) {
  grpc::Status s = rpc::testutil::GenericUnaryCall(channel_, "/torus.core.CoreWorkerService/PushTasks", "", kToken,
                                                   std::chrono::seconds(5));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_EQ(s.error_message(), "tasks: a push needs at least one task");
}

}  // namespace core_worker_service_test
}  // namespace torus::core
