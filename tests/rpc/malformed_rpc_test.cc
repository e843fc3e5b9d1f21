// Malformed and hostile input against a real torus-head process: garbage bytes on the socket, undecodable
// messages on every method, semantically invalid requests, missing and wrong tokens. The head must answer each
// with an error, register nothing, and keep serving.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>

#include "grpcpp/grpcpp.h"
#include "torus/client/client.h"
#include "torus/core.grpc.pb.h"
#include "torus/head.grpc.pb.h"
#include "torus/rpc/auth.h"
#include "torus/package/pack.h"
#include "torus/package/zip.h"
#include "torus/rpc/generic_call_test_util.h"

extern char** environ;

namespace malformed_rpc_test {

class HeadProcess {
 public:
  HeadProcess() {
    char tmpl[] = "/tmp/torus_malformed_rpc_XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::string bin = std::string(TORUS_BIN_DIR) + "/torus-head";
    std::vector<std::string> args = {bin, "--session-dir", dir_, "--port", "0", "--dashboard-port", "0"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    std::string log = dir_ + "/head.log";
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    posix_spawn(&pid_, bin.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    for (int i = 0; i < 500 && address_.empty(); ++i) {
      std::ifstream in(dir_ + "/head_address");
      std::getline(in, address_);
      if (address_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    token_ = *torus::rpc::ReadTokenFile(dir_ + "/token");
  }
  ~HeadProcess() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    std::filesystem::remove_all(dir_);
  }
  bool Alive() { return waitpid(pid_, nullptr, WNOHANG) == 0; }
  const std::string& address() const { return address_; }
  const std::string& token() const { return token_; }
  std::string dashboard() const {
    std::string address;
    std::ifstream in(dir_ + "/dashboard_address");
    std::getline(in, address);
    return address;
  }
  int port() const { return std::stoi(address_.substr(address_.rfind(':') + 1)); }

 private:
  std::string dir_;
  pid_t pid_ = 0;
  std::string address_;
  std::string token_;
};

class MalformedRpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(head_.address().empty()) << "torus-head did not start";
    channel_ = grpc::CreateChannel(head_.address(), grpc::InsecureChannelCredentials());
    stub_ = torus::rpc::HeadService::NewStub(channel_);
  }

  void Prepare(grpc::ClientContext& ctx, const std::string& token) {
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  int AliveNodes() {
    grpc::ClientContext ctx;
    Prepare(ctx, head_.token());
    torus::rpc::ClusterStatus status;
    grpc::Status s = stub_->GetClusterStatus(&ctx, {}, &status);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return status.nodes_size();
  }

  HeadProcess head_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<torus::rpc::HeadService::Stub> stub_;
};

TEST_F(MalformedRpcTest, GarbageBytesOnTheSocket) {
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(head_.port());
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    std::string payload;
    if (round == 0) payload = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    if (round == 1) payload = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\xff\xff\xff\xff\xff\xff\xff\xff\xff";
    for (int i = 0; i < 1 + static_cast<int>(rng() % 4096); ++i) payload.push_back(static_cast<char>(rng()));
    ssize_t sent = send(fd, payload.data(), payload.size(), MSG_NOSIGNAL);
    (void)sent;
    close(fd);
  }
  EXPECT_TRUE(head_.Alive());
  EXPECT_EQ(AliveNodes(), 0);
}

// Every method of HeadService (from its descriptor, so that a new method is covered), called with a message that
// cannot be decoded (a length-delimited field 1 whose declared length runs past the end), without the token, and
// with a wrong one: each is refused — the undecodable message by gRPC before any handler, the token with
// UNAUTHENTICATED — and the head keeps serving with nothing registered.
TEST_F(MalformedRpcTest, UndecodableMessagesAndBadTokensOnEveryMethod) {
  auto call = [&](const std::string& method, const std::string& bytes, const std::string& token) {
    return torus::rpc::testutil::GenericUnaryCall(channel_, method, bytes, token, std::chrono::seconds(5));
  };
  using torus::rpc::testutil::kUndecodableMessage;
  const auto methods = torus::rpc::testutil::ServiceMethods("torus.rpc.HeadService");
  ASSERT_EQ(methods.size(), 20u);  // a new method: check that it is covered as the others are
  for (const google::protobuf::MethodDescriptor* m : methods) {
    const std::string method = torus::rpc::testutil::MethodPath(m);
    grpc::Status garbled = call(method, kUndecodableMessage, head_.token());
    if (m->client_streaming()) {
      // A stream's read cannot tell a message it could not decode from the agent closing its side: the stream ends,
      // with nothing written back.
      EXPECT_TRUE(garbled.ok() || garbled.error_code() == grpc::StatusCode::INTERNAL)
          << method << ": " << garbled.error_code() << " " << garbled.error_message();
    } else {
      // gRPC's callback API answers a request it cannot decode before any handler runs, with UNIMPLEMENTED.
      EXPECT_EQ(garbled.error_code(), grpc::StatusCode::UNIMPLEMENTED) << method << ": " << garbled.error_message();
    }
    for (const std::string& token : {std::string(), std::string("wrong")}) {
      grpc::Status refused = call(method, "", token);
      EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << method << " with token '" << token << "': " << refused.error_message();
    }
  }
  grpc::Status unknown = call("/torus.rpc.HeadService/NoSuchMethod", kUndecodableMessage, head_.token());
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  // The head answers as the owner of detached actors (ResolveActor, KillActor of the core worker's service): the
  // same refusals; it runs no tasks and holds no objects (the other methods are UNIMPLEMENTED).
  for (const google::protobuf::MethodDescriptor* m : torus::rpc::testutil::ServiceMethods("torus.core.CoreWorkerService")) {
    const std::string method = torus::rpc::testutil::MethodPath(m);
    const bool served = m->name() == "ResolveActor" || m->name() == "KillActor";
    EXPECT_EQ(call(method, kUndecodableMessage, head_.token()).error_code(), grpc::StatusCode::UNIMPLEMENTED) << method;
    for (const std::string& token : {std::string(), std::string("wrong")}) {
      EXPECT_EQ(call(method, "", token).error_code(),
                served ? grpc::StatusCode::UNAUTHENTICATED : grpc::StatusCode::UNIMPLEMENTED)
          << method << " with token '" << token << "'";
    }
  }
  EXPECT_TRUE(head_.Alive());
  EXPECT_EQ(AliveNodes(), 0);
}

// A detached actor's creation is checked before anything is registered: its id, and the creation it carries.
TEST_F(MalformedRpcTest, CreateActorRefusesAMalformedCreationWithTheField) {
  auto create = [&](const std::string& id, const std::string& creation) {
    torus::rpc::CreateActorRequest request;
    request.mutable_actor()->set_actor_id(id);
    request.mutable_actor()->set_class_name("Keeper");
    request.set_creation(creation);
    grpc::ClientContext ctx;
    Prepare(ctx, head_.token());
    torus::rpc::ActorView reply;
    return stub_->CreateActor(&ctx, request, &reply);
  };
  torus::core::ActorCreation good;
  good.mutable_creation()->set_function("pickled class");
  torus::core::ActorCreation with_ref = good;
  with_ref.mutable_creation()->add_args()->mutable_ref()->set_object_id("x");
  torus::core::ActorCreation negative = good;
  (*negative.mutable_resources())["TPU"] = -10000;
  const std::string id(32, 'a');
  struct Case {
    std::string id;
    std::string creation;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {id, "\x0a\xff", "creation: not a serialized ActorCreation"},
           {id, torus::core::ActorCreation().SerializeAsString(), "creation.creation.function: required"},
           {id, with_ref.SerializeAsString(),
            "creation.creation.args: every argument must be a value carried in the request (no refs, nothing stored)"},
           {id, negative.SerializeAsString(), "creation.resources[\"TPU\"]: negative"},
           {"XYZ", good.SerializeAsString(), "actor_id: 32 lowercase hex digits are required, got \"XYZ\""}}) {
    grpc::Status s = create(c.id, c.creation);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.message;
    EXPECT_EQ(s.error_message(), c.message);
  }
  grpc::Status huge = create(id, std::string(9 << 20, 'x'));
  EXPECT_EQ(huge.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(huge.error_message().find("at most 8 MiB"), std::string::npos) << huge.error_message();
  grpc::ClientContext get_ctx;
  Prepare(get_ctx, head_.token());
  torus::rpc::GetActorRequest get;
  get.set_actor_id(id);
  torus::rpc::ActorView view;
  EXPECT_EQ(stub_->GetActor(&get_ctx, get, &view).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(head_.Alive());
}

// The actor directory refuses malformed actors and updates with the field, and the name of a live actor is taken;
// task reports must name their owner.
TEST_F(MalformedRpcTest, ActorDirectoryCallsAreCheckedAndNamesAreUnique) {
  auto register_actor = [&](const std::function<void(torus::rpc::ActorView&)>& mutate) {
    torus::rpc::RegisterActorRequest request;
    auto* a = request.mutable_actor();
    a->set_actor_id("ab12");
    a->set_name("learner");
    a->set_namespace_("rl");
    a->set_class_name("Learner");
    a->set_owner_address("127.0.0.1:1");
    mutate(*a);
    grpc::ClientContext ctx;
    Prepare(ctx, head_.token());
    torus::rpc::ActorView reply;
    return stub_->RegisterActor(&ctx, request, &reply);
  };
  struct Case {
    std::function<void(torus::rpc::ActorView&)> mutate;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {[](auto& a) { a.set_actor_id("not hex"); },
            "actor_id: 1 to 64 lowercase hex digits are required, got \"not hex\""},
           {[](auto& a) { a.set_class_name(""); }, "class_name: required"},
           {[](auto& a) { a.set_owner_address(""); }, "owner_address: required (the owner's host:port)"},
           {[](auto& a) { a.set_max_restarts(-7); }, "max_restarts: -1 (without limit) or more is required, got -7"},
           {[](auto& a) { (*a.mutable_resources())["CPU"] = -1; }, "resources[\"CPU\"]: must not be negative"}}) {
    grpc::Status s = register_actor(c.mutate);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.message;
    EXPECT_EQ(s.error_message(), c.message);
  }
  ASSERT_TRUE(register_actor([](auto&) {}).ok());
  grpc::Status taken = register_actor([](auto& a) { a.set_actor_id("cd34"); });
  EXPECT_EQ(taken.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(taken.error_message(), "the name \"learner\" is taken in namespace \"rl\" by actor ab12 (PENDING_CREATION)");

  torus::rpc::UpdateActorRequest update;
  update.set_actor_id("ab12");
  update.set_state("SLEEPING");
  grpc::ClientContext update_ctx;
  Prepare(update_ctx, head_.token());
  torus::rpc::ActorView view;
  grpc::Status bad_state = stub_->UpdateActor(&update_ctx, update, &view);
  EXPECT_EQ(bad_state.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad_state.error_message(),
            "state: \"SLEEPING\" is not a state; use PENDING_CREATION, ALIVE, RESTARTING or DEAD");

  grpc::ClientContext get_ctx;
  Prepare(get_ctx, head_.token());
  grpc::Status no_key = stub_->GetActor(&get_ctx, torus::rpc::GetActorRequest(), &view);
  EXPECT_EQ(no_key.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  torus::rpc::GetActorRequest by_name;
  by_name.set_name("learner");
  by_name.set_namespace_("rl");
  grpc::ClientContext named_ctx;
  Prepare(named_ctx, head_.token());
  ASSERT_TRUE(stub_->GetActor(&named_ctx, by_name, &view).ok());
  EXPECT_EQ(view.actor_id(), "ab12");
  EXPECT_EQ(view.state(), "PENDING_CREATION");

  // Task reports name their owner; malformed events in a batch are skipped.
  torus::rpc::ReportTasksRequest report;
  auto* event = report.add_events();
  event->set_task_id("t1");
  event->set_state("NOT_A_STATE");
  grpc::ClientContext anonymous_ctx;
  Prepare(anonymous_ctx, head_.token());
  torus::rpc::ReportTasksReply reported;
  grpc::Status anonymous = stub_->ReportTasks(&anonymous_ctx, report, &reported);
  EXPECT_EQ(anonymous.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(anonymous.error_message(), "owner_address: required");
  report.set_owner_address("127.0.0.1:1");
  grpc::ClientContext report_ctx;
  Prepare(report_ctx, head_.token());
  EXPECT_TRUE(stub_->ReportTasks(&report_ctx, report, &reported).ok());
  EXPECT_TRUE(head_.Alive());
}

// Agents read packages in pieces; bad reads get a reason, and a good one the bytes uploaded (PUT over HTTP).
TEST_F(MalformedRpcTest, ReadPackageServesPiecesAndRefusesBadReads) {
  const std::string path = std::filesystem::temp_directory_path() / ("torus_rpc_pkg_" + std::to_string(getpid()));
  {
    auto writer = torus::package::ZipWriter::Create(path);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Add("main.py", torus::package::EntryKind::kFile, 0644, 1'700'000'000, "print(1)\n").ok());
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  std::ifstream in(path, std::ios::binary);
  const std::string zip((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  httplib::Client http("http://" + head_.dashboard());
  http.set_bearer_token_auth(head_.token());
  auto put = http.Put("/api/packages/gcs/_ray_pkg_rpc.zip", zip, "application/zip");
  ASSERT_TRUE(put);
  ASSERT_EQ(put->status, 200) << put->body;

  auto read = [&](const std::string& name, uint64_t offset, uint32_t max_bytes, torus::rpc::ReadPackageReply* reply) {
    grpc::ClientContext ctx;
    Prepare(ctx, head_.token());
    torus::rpc::ReadPackageRequest request;
    request.set_name(name);
    request.set_offset(offset);
    request.set_max_bytes(max_bytes);
    return stub_->ReadPackage(&ctx, request, reply);
  };
  torus::rpc::ReadPackageReply first, rest;
  ASSERT_TRUE(read("_ray_pkg_rpc.zip", 0, 10, &first).ok());
  ASSERT_TRUE(read("_ray_pkg_rpc.zip", 10, 0, &rest).ok());
  EXPECT_EQ(first.data() + rest.data(), zip);
  EXPECT_EQ(first.size(), zip.size());
  EXPECT_EQ(first.sha256(), torus::package::Sha256Hex(zip));

  torus::rpc::ReadPackageReply reply;
  grpc::Status past = read("_ray_pkg_rpc.zip", zip.size() + 1, 10, &reply);
  EXPECT_EQ(past.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  grpc::Status missing = read("_ray_pkg_none.zip", 0, 10, &reply);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(missing.error_message(), "package _ray_pkg_none.zip is not stored on the head");
  grpc::Status bad = read("../../etc/passwd", 0, 10, &reply);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("use 1-128 of [A-Za-z0-9_.-] ending in \".zip\""), std::string::npos);
  EXPECT_TRUE(head_.Alive());
}

TEST_F(MalformedRpcTest, MadeUpMethodsDoNotGrowTheRequestCounters) {
  for (int i = 0; i < 50; ++i) {
    const std::string method = i % 2 ? "/evil.Svc/m" + std::to_string(i) : "/torus.rpc.HeadService/evil" + std::to_string(i);
    EXPECT_EQ(torus::rpc::testutil::GenericUnaryCall(channel_, method, "x", "", std::chrono::seconds(5)).error_code(),
              grpc::StatusCode::UNIMPLEMENTED)
        << method;
  }
  AliveNodes();  // one real call
  const std::string dashboard = head_.dashboard();
  httplib::Client http(dashboard.substr(0, dashboard.rfind(':')), std::stoi(dashboard.substr(dashboard.rfind(':') + 1)));
  auto res = http.Get("/metrics", {{"Authorization", "Bearer " + head_.token()}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->body.find("evil"), std::string::npos);
  EXPECT_NE(res->body.find("torus_grpc_requests_total{method=\"unknown\",code=\"UNIMPLEMENTED\"} 50"),
            std::string::npos)
      << res->body;
  EXPECT_NE(res->body.find("torus_grpc_requests_total{method=\"/torus.rpc.HeadService/GetClusterStatus\",code=\"OK\"}"),
            std::string::npos);
}

TEST_F(MalformedRpcTest, InvalidRegistrationsAreRefusedWithTheField) {
  struct Case {
    std::string name;
    std::function<void(torus::rpc::RegisterNodeRequest&)> mutate;
    std::string message_part;
  };
  std::vector<Case> cases = {
      {"empty id", [](auto& r) { r.mutable_node()->set_node_id(""); }, "node_id"},
      {"long id", [](auto& r) { r.mutable_node()->set_node_id(std::string(500, 'a')); }, "node_id"},
      {"no address", [](auto& r) { r.mutable_node()->set_address(""); }, "address"},
      {"negative", [](auto& r) { (*r.mutable_node()->mutable_resources_total())["CPU"] = -5; }, "negative"},
      {"bad resource name", [](auto& r) { (*r.mutable_node()->mutable_resources_total())["a b"] = 1; }, "a b"},
      {"bad label", [](auto& r) { (*r.mutable_node()->mutable_labels())[std::string(300, 'k')] = "v"; }, "label"},
      {"bad label value", [](auto& r) { (*r.mutable_node()->mutable_labels())["k"] = "\x01\x02"; }, "label"},
  };
  for (const Case& c : cases) {
    torus::rpc::RegisterNodeRequest request;
    request.mutable_node()->set_node_id("n1");
    request.mutable_node()->set_address("127.0.0.1");
    c.mutate(request);
    grpc::ClientContext ctx;
    Prepare(ctx, head_.token());
    torus::rpc::RegisterNodeReply reply;
    grpc::Status s = stub_->RegisterNode(&ctx, request, &reply);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.name;
    EXPECT_NE(s.error_message().find(c.message_part), std::string::npos) << c.name << ": " << s.error_message();
  }
  EXPECT_EQ(AliveNodes(), 0);

  torus::rpc::HeartbeatRequest hb;
  hb.set_node_id("n1");
  hb.set_has_resources_available(true);
  (*hb.mutable_resources_available())["CPU"] = -1;
  grpc::ClientContext ctx;
  Prepare(ctx, head_.token());
  torus::rpc::HeartbeatReply hb_reply;
  EXPECT_EQ(stub_->Heartbeat(&ctx, hb, &hb_reply).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(head_.Alive());
}

TEST_F(MalformedRpcTest, MissingOrWrongTokenChangesNothing) {
  for (const std::string& token : {std::string(), std::string("wrong"), head_.token() + "x"}) {
    torus::rpc::RegisterNodeRequest request;
    request.mutable_node()->set_node_id("intruder");
    request.mutable_node()->set_address("127.0.0.1");
    grpc::ClientContext ctx;
    Prepare(ctx, token);
    torus::rpc::RegisterNodeReply reply;
    EXPECT_EQ(stub_->RegisterNode(&ctx, request, &reply).error_code(), grpc::StatusCode::UNAUTHENTICATED);

    grpc::ClientContext ctx2;
    Prepare(ctx2, token);
    torus::rpc::MarkNodeDeadRequest mark;
    mark.set_node_id("intruder");
    torus::rpc::MarkNodeDeadReply mark_reply;
    EXPECT_EQ(stub_->MarkNodeDead(&ctx2, mark, &mark_reply).error_code(), grpc::StatusCode::UNAUTHENTICATED);

    grpc::ClientContext ctx3;
    Prepare(ctx3, token);
    torus::rpc::ClusterStatus status;
    EXPECT_EQ(stub_->GetClusterStatus(&ctx3, {}, &status).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(AliveNodes(), 0);
}

TEST_F(MalformedRpcTest, UnknownNodesAreToldToRegister) {
  torus::rpc::HeartbeatRequest hb;
  hb.set_node_id("ghost");
  hb.set_incarnation(42);
  grpc::ClientContext ctx;
  Prepare(ctx, head_.token());
  torus::rpc::HeartbeatReply reply;
  ASSERT_TRUE(stub_->Heartbeat(&ctx, hb, &reply).ok());
  EXPECT_EQ(reply.action(), torus::rpc::HeartbeatReply::REREGISTER);

  torus::rpc::MarkNodeDeadRequest mark;
  mark.set_node_id("ghost");
  grpc::ClientContext ctx2;
  Prepare(ctx2, head_.token());
  torus::rpc::MarkNodeDeadReply mark_reply;
  EXPECT_EQ(stub_->MarkNodeDead(&ctx2, mark, &mark_reply).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(AliveNodes(), 0);
}

// Heartbeat streams: the head accepts one only with the token (its initial metadata says so), keeps a node alive
// on it past the node timeout, tells an unknown incarnation to register again, and ends a stream that changes node
// or carries a malformed availability with INVALID_ARGUMENT naming the field — and keeps serving.
TEST_F(MalformedRpcTest, HeartbeatStreamsKeepNodesAliveAndRefuseWhatIsWrong) {
  using Stream = grpc::ClientReaderWriter<torus::rpc::HeartbeatRequest, torus::rpc::HeartbeatReply>;
  auto heartbeat = [](const std::string& node, uint64_t incarnation) {
    torus::rpc::HeartbeatRequest hb;
    hb.set_node_id(node);
    hb.set_incarnation(incarnation);
    return hb;
  };
  auto accepted = [](grpc::ClientContext& ctx, Stream& stream) {
    stream.WaitForInitialMetadata();
    return ctx.GetServerInitialMetadata().contains(torus::rpc::kHeartbeatAcceptedKey);
  };
  {
    grpc::ClientContext ctx;
    Prepare(ctx, "wrong");
    auto stream = stub_->HeartbeatStream(&ctx);
    EXPECT_FALSE(accepted(ctx, *stream));
    stream->WritesDone();
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    Prepare(ctx, head_.token());
    auto stream = stub_->HeartbeatStream(&ctx);
    EXPECT_TRUE(accepted(ctx, *stream));
    ASSERT_TRUE(stream->Write(heartbeat("ghost", 42)));
    torus::rpc::HeartbeatReply reply;
    ASSERT_TRUE(stream->Read(&reply));
    EXPECT_EQ(reply.action(), torus::rpc::HeartbeatReply::REREGISTER);
    EXPECT_FALSE(stream->Read(&reply));
    EXPECT_TRUE(stream->Finish().ok());
  }

  torus::rpc::RegisterNodeRequest request;
  request.mutable_node()->set_node_id("n1");
  request.mutable_node()->set_address("127.0.0.1");
  torus::rpc::RegisterNodeReply registered;
  {
    grpc::ClientContext ctx;
    Prepare(ctx, head_.token());
    ASSERT_TRUE(stub_->RegisterNode(&ctx, request, &registered).ok());
  }
  {
    // 4 s of heartbeats on one stream, past the 3 s node timeout.
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + head_.token());  // no deadline: the stream outlives Prepare's
    auto stream = stub_->HeartbeatStream(&ctx);
    EXPECT_TRUE(accepted(ctx, *stream));
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(stream->Write(heartbeat("n1", registered.incarnation())));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    EXPECT_EQ(AliveNodes(), 1);
    // Another node on the same stream ends it.
    ASSERT_TRUE(stream->Write(heartbeat("n2", registered.incarnation())));
    torus::rpc::HeartbeatReply reply;
    EXPECT_FALSE(stream->Read(&reply));
    grpc::Status ended = stream->Finish();
    EXPECT_EQ(ended.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(ended.error_message().find("node_id"), std::string::npos) << ended.error_message();
  }
  {
    grpc::ClientContext ctx;
    Prepare(ctx, head_.token());
    auto stream = stub_->HeartbeatStream(&ctx);
    torus::rpc::HeartbeatRequest hb = heartbeat("n1", registered.incarnation());
    hb.set_has_resources_available(true);
    (*hb.mutable_resources_available())["CPU"] = -1;
    ASSERT_TRUE(stream->Write(hb));
    torus::rpc::HeartbeatReply reply;
    EXPECT_FALSE(stream->Read(&reply));
    grpc::Status ended = stream->Finish();
    EXPECT_EQ(ended.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(ended.error_message().find("resources_available"), std::string::npos) << ended.error_message();
  }
  EXPECT_TRUE(head_.Alive());
  EXPECT_EQ(AliveNodes(), 1);
}

// The event stream of a real head: a watch opened over gRPC sees a job submitted over HTTP, and the head refuses
// a watch without the token or from another epoch, and keeps serving.
TEST_F(MalformedRpcTest, AWatchSeesAJobSubmittedOverHttpAndRefusalsLeaveTheHeadServing) {
  auto client = torus::client::Client::Connect({head_.address(), head_.token()});
  ASSERT_TRUE(client.ok());
  httplib::Client http("http://" + head_.dashboard());
  http.set_bearer_token_auth(head_.token().c_str());
  // Watch from the revision before the submission, so that it is seen however soon it comes.
  auto now = http.Get("/api/v0/events/revision");
  ASSERT_TRUE(now);
  ASSERT_EQ(now->status, 200) << now->body;
  const std::string body = now->body;
  auto number = [&body](const std::string& key) {
    const size_t at = body.find("\"" + key + "\"");
    return std::stoull(body.substr(body.find(':', at) + 1));
  };
  torus::client::EventCursor cursor{number("epoch"), number("revision")};
  std::string seen;
  std::thread watcher([&] {
    absl::Status watched = (*client)->Watch(&cursor, {.kinds = {"job"}, .ids = {"watched-job"}},
                                            [&](const torus::rpc::Event& e) {
                                              seen = e.type() + " " + e.status();
                                              return false;
                                            });
    EXPECT_TRUE(watched.ok()) << watched;
  });
  auto res = http.Post("/api/jobs/", R"({"entrypoint": "true", "submission_id": "watched-job"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  watcher.join();
  EXPECT_EQ(seen, "JobSubmitted PENDING");
  EXPECT_GT(cursor.epoch, 0u);

  torus::client::EventCursor other{cursor.epoch + 1, 0};
  absl::Status refused = (*client)->Watch(&other, {}, [](const torus::rpc::Event&) { return false; });
  EXPECT_EQ(refused.code(), absl::StatusCode::kOutOfRange);
  auto stranger = torus::client::Client::Connect({head_.address(), "wrong-token"});
  torus::client::EventCursor from_now;
  absl::Status unauthenticated = (*stranger)->Watch(&from_now, {}, [](const torus::rpc::Event&) { return false; });
  EXPECT_EQ(unauthenticated.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(head_.Alive());
  EXPECT_EQ(AliveNodes(), 0);
}


// Clients that send their request a byte a second (slowloris) each hold one HTTP connection open for as long as
// they keep sending; 200 of them do not keep another client from being answered, and the head keeps serving.
TEST_F(MalformedRpcTest, SlowHttpClientsDoNotHoldUpOthers) {
  const std::string dashboard = head_.dashboard();
  const int port = std::stoi(dashboard.substr(dashboard.rfind(':') + 1));
  std::vector<int> slow;
  for (int i = 0; i < 200; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
    const std::string start = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ";
    ASSERT_EQ(send(fd, start.data(), start.size(), MSG_NOSIGNAL), static_cast<ssize_t>(start.size()));
    slow.push_back(fd);
  }
  // Each keeps its connection alive with a byte a second (the server closes one silent for 5 s).
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    while (!stop) {
      for (int fd : slow) send(fd, "a", 1, MSG_NOSIGNAL);
      for (int i = 0; i < 10 && !stop; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(2));  // every slow connection accepted and being read

  httplib::Client http("http://" + dashboard);
  http.set_read_timeout(20, 0);
  auto res = http.Get("/healthz");
  stop = true;
  trickle.join();
  ASSERT_TRUE(res) << "no answer while 200 slow clients were connected: " << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "ok\n");
  for (int fd : slow) close(fd);
  EXPECT_TRUE(head_.Alive());
}

}  // namespace malformed_rpc_test
