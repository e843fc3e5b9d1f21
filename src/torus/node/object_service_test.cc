#include "torus/node/object_service.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "absl/strings/str_cat.h"
#include "torus/node/worker_leases.h"
#include "torus/rpc/generic_call_test_util.h"

namespace torus::node {
namespace object_service_test {

constexpr char kToken[] = "secret-token";

// One agent's store and its service on an ephemeral loopback port.
struct Agent {
  explicit Agent(const std::string& name, uint64_t capacity) {
    dir = (std::filesystem::temp_directory_path() / absl::StrCat("object_service_test_", getpid(), "_", name)).string();
    store = *ObjectStore::Open(dir, capacity);
    service = std::make_unique<ObjectStoreServiceImpl>(store.get(), kToken, ReadBootId());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
    address = absl::StrCat("127.0.0.1:", port);
    EXPECT_TRUE(service->Start(address).ok());
    stub = core::ObjectStoreService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  }
  ~Agent() {
    server->Shutdown();
    service->Stop();
  }
  std::string dir;
  int port = 0;
  std::string address;
  std::unique_ptr<ObjectStore> store;
  std::unique_ptr<ObjectStoreServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<core::ObjectStoreService::Stub> stub;
};

std::unique_ptr<grpc::ClientContext> Context(const std::string& token = kToken) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->AddMetadata("authorization", "Bearer " + token);
  return ctx;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

core::ObjectOwner Owner(const std::string& address, pid_t pid = 0) {
  core::ObjectOwner owner;
  owner.set_address(address);
  owner.set_pid(pid);
  owner.set_boot_id(pid == 0 ? "" : ReadBootId());
  return owner;
}

// Creates, fills and seals an object through `agent`'s service.
void Put(Agent& agent, const std::string& id, const std::string& bytes, const core::ObjectOwner& owner) {
  core::CreateObjectRequest create;
  create.set_object_id(id);
  create.set_size(static_cast<int64_t>(bytes.size()));
  *create.mutable_owner() = owner;
  core::CreateObjectReply created;
  ASSERT_TRUE(agent.stub->CreateObject(Context().get(), create, &created).ok());
  std::ofstream(created.path(), std::ios::binary | std::ios::in | std::ios::out) << bytes;
  core::SealObjectRequest seal;
  seal.set_object_id(id);
  core::SealObjectReply sealed;
  ASSERT_TRUE(agent.stub->SealObject(Context().get(), seal, &sealed).ok());
}

grpc::Status Pull(Agent& agent, const std::string& id, const std::string& source, core::PullObjectReply* reply) {
  core::PullObjectRequest pull;
  pull.set_object_id(id);
  pull.set_source(source);
  *pull.mutable_owner() = Owner(source);  // a live gRPC server: the owner watch keeps its objects
  pull.set_wait_ms(5000);
  return agent.stub->PullObject(Context().get(), pull, reply);
}

std::string RandomBytes(size_t n) {
  std::mt19937_64 gen(42);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(gen());
  return out;
}

TEST(ObjectStoreService, AnObjectIsPulledToAnotherNodeBitForBit) {
  Agent a("a", 64 << 20), b("b", 64 << 20);
  // Spans several chunks and ends in a partial one.
  const std::string bytes = RandomBytes((9 << 20) + 12345);
  Put(a, "obj", bytes, Owner(a.address));
  core::PullObjectReply pulled;
  grpc::Status s = Pull(b, "obj", a.address, &pulled);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(pulled.size(), static_cast<int64_t>(bytes.size()));
  EXPECT_TRUE(pulled.path().starts_with(b.dir + "/"));
  EXPECT_TRUE(ReadAll(pulled.path()) == bytes);
  EXPECT_FALSE(b.store->Get("obj", std::chrono::steady_clock::now())->primary);
  // A second read on that node uses its copy (the source need not answer).
  a.server->Shutdown();
  core::PullObjectReply again;
  ASSERT_TRUE(Pull(b, "obj", a.address, &again).ok());
  EXPECT_EQ(again.path(), pulled.path());
}

TEST(ObjectStoreService, ADeletionAtTheSourceReachesTheCopies) {
  Agent a("a", 1 << 20), b("b", 1 << 20);
  Put(a, "obj", "some bytes", Owner(a.address));
  core::PullObjectReply pulled;
  ASSERT_TRUE(Pull(b, "obj", a.address, &pulled).ok());
  ASSERT_TRUE(b.store->Contains("obj"));
  core::DeleteObjectsRequest del;
  del.add_object_ids("obj");
  core::DeleteObjectsReply deleted;
  ASSERT_TRUE(a.stub->DeleteObjects(Context().get(), del, &deleted).ok());
  EXPECT_FALSE(a.store->Contains("obj"));
  EXPECT_FALSE(b.store->Contains("obj"));
  EXPECT_FALSE(std::filesystem::exists(pulled.path()));
}

TEST(ObjectStoreService, PullsOfMissingObjectsAndFullStoresSayWhy) {
  Agent a("a", 1 << 20), b("b", 1000);
  core::PullObjectReply reply;
  grpc::Status s = Pull(a, "nothing", a.address, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(),
            absl::StrCat("object ", ObjectFileName("nothing"), " is no longer in the store of node ", a.address));
  s = Pull(b, "nothing", a.address, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  Put(a, "big", std::string(5000, 'x'), Owner(a.address));
  s = Pull(b, "big", a.address, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(s.error_message().starts_with("object store full: an object of 4 KiB does not fit")) << s.error_message();
  EXPECT_FALSE(b.store->Contains("big"));
}

TEST(ObjectStoreService, RefusesAWrongTokenAndBadRequests) {
  Agent a("a", 1 << 20);
  core::CreateObjectRequest create;
  create.set_object_id("x");
  create.set_size(10);
  *create.mutable_owner() = Owner(a.address);
  core::CreateObjectReply reply;
  EXPECT_EQ(a.stub->CreateObject(Context("wrong").get(), create, &reply).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  create.set_size(-1);
  grpc::Status s = a.stub->CreateObject(Context().get(), create, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "size: must be >= 0, got -1");
  create.set_size(10);
  create.clear_owner();
  s = a.stub->CreateObject(Context().get(), create, &reply);
  EXPECT_EQ(s.error_message(), "owner.address: required (the owner's host:port)");
  core::PullObjectRequest pull;
  pull.set_object_id("x");
  pull.set_source("127.0.0.1:1");
  core::PullObjectReply pulled;
  s = a.stub->PullObject(Context().get(), pull, &pulled);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "owner.address: required (the owner's host:port)");
}

// Every method (from the service's descriptor, so that a new one is covered): refused without the token and with a
// wrong one, and an undecodable message is refused before the handler; nothing is stored and the service serves on.
TEST(ObjectStoreService, EveryMethodNeedsTheTokenAndRefusesUndecodableMessages) {
  Agent a("a", 1 << 20);
  auto channel = grpc::CreateChannel(a.address, grpc::InsecureChannelCredentials());
  const auto methods = rpc::testutil::ServiceMethods("torus.core.ObjectStoreService");
  ASSERT_EQ(methods.size(), 5u);  // a new method: check that it is covered as the others are
  for (const google::protobuf::MethodDescriptor* m : methods) {
    const std::string method = rpc::testutil::MethodPath(m);
    for (const std::string& token : {std::string(), std::string("wrong")}) {
      grpc::Status refused = rpc::testutil::GenericUnaryCall(channel, method, "", token);
      EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED) << method << ": " << refused.error_message();
    }
    grpc::Status garbled = rpc::testutil::GenericUnaryCall(channel, method, rpc::testutil::kUndecodableMessage, kToken);
    EXPECT_EQ(garbled.error_code(), grpc::StatusCode::INTERNAL) << method << ": " << garbled.error_message();
  }
  EXPECT_EQ(a.store->stats().objects, 0u);
  Put(a, "after", "still serving", Owner(a.address));
  EXPECT_TRUE(a.store->Contains("after"));
}

TEST(ObjectStoreService, TheObjectsOfAnOwnerThatIsGoneAreFreed) {
  Agent a("a", 1 << 20);
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  Put(a, "of-dead-local", "x", Owner("127.0.0.1:3", child));  // a pid that no longer exists on this machine
  Put(a, "of-live-local", "x", Owner("127.0.0.1:2", getpid()));
  Put(a, "of-remote", "x", Owner(a.address));  // answers probes (a live gRPC server)
  Put(a, "of-remote-gone", "x", Owner("127.0.0.1:1"));  // nothing listens on port 1
  a.service->SweepOwners();
  EXPECT_FALSE(a.store->Contains("of-dead-local"));
  EXPECT_TRUE(a.store->Contains("of-live-local"));
  EXPECT_TRUE(a.store->Contains("of-remote-gone"));  // one refused probe is not enough
  a.service->SweepOwners();
  EXPECT_FALSE(a.store->Contains("of-remote-gone"));
  EXPECT_TRUE(a.store->Contains("of-remote"));
  EXPECT_TRUE(a.store->Contains("of-live-local"));
}

}  // namespace object_service_test
}  // namespace torus::node
