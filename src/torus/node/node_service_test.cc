// The agent's worker RPCs over a real in-process gRPC server on loopback.
#include "torus/node/node_service.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "torus/rpc/auth.h"
#include "torus/rpc/generic_call_test_util.h"

namespace torus::node {
namespace node_service_test {

constexpr char kToken[] = "secret";

class NodeServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "torus_node_service_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    ResourceSet total;
    total.Set("CPU", 4);
    total.Set("TPU", 4);
    total.Set("GPU", 2);
    ledger_ = std::make_unique<BundleLedger>(&clock_, total, 4, 2);
    workers_ = std::make_unique<WorkerSupervisor>(&real_clock_, dir_ + "/workers", EnvMap{{"PATH", "/usr/bin:/bin"}},
                                                  [this](const WorkerExit& e) {
                                                    {
                                                      absl::MutexLock lock(&mu_);
                                                      exited_.push_back(e.worker_id);
                                                    }
                                                    cv_.SignalAll();
                                                  });
    std::filesystem::create_directories(dir_ + "/tpu");
    log_files_ = std::make_unique<LogFiles>(
        LogFilesOptions{.agent_log = "", .tpu_log_dir = dir_ + "/tpu", .worker_log_dir = dir_ + "/workers"});
    // A v6e host with 4 chips (and, for the test, 2 GPUs): workers on bundles get their devices.
    service_ = std::make_unique<NodeServiceImpl>(
        ledger_.get(), workers_.get(), "127.0.0.1", kToken, [] {}, log_files_.get(),
        HostDevices{.tpu_generation = TpuGeneration::kV6e, .chips = 4, .gpus = 2, .base_env = {}}, 1000);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
    stub_ = rpc::NodeService::NewStub(channel_);
  }
  void TearDown() override {
    server_->Shutdown();
    service_.reset();
    workers_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<grpc::ClientContext> Ctx(const std::string& token = kToken) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (!token.empty()) ctx->AddMetadata(rpc::kAuthMetadataKey, absl::StrCat("Bearer ", token));
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return ctx;
  }

  bool WaitExited(const std::string& id) {
    absl::MutexLock lock(&mu_);
    auto exited = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return std::find(exited_.begin(), exited_.end(), id) != exited_.end();
    };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!exited()) {
      if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) return exited();
    }
    return true;
  }

  grpc::Status Start(const std::string& id, std::vector<std::string> argv, rpc::StartWorkerReply* reply,
                     const std::string& owner = "job") {
    rpc::StartWorkerRequest request;
    request.set_worker_id(id);
    request.set_owner(owner);
    for (auto& a : argv) request.add_argv(a);
    return stub_->StartWorker(Ctx().get(), request, reply);
  }

  FakeClock clock_;       // the ledger's
  RealClock real_clock_;  // the supervisor's: it times real processes
  std::string dir_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::vector<std::string> exited_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<BundleLedger> ledger_;
  std::unique_ptr<WorkerSupervisor> workers_;
  std::unique_ptr<LogFiles> log_files_;
  std::unique_ptr<NodeServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<rpc::NodeService::Stub> stub_;
};

// Every method of NodeService (from its descriptor, so that a new one is covered): refused without the token and
// with a wrong one (UNAUTHENTICATED), and a message that cannot be decoded (a length-delimited field whose declared
// length runs past the end) is refused by gRPC before the handler (UNIMPLEMENTED, as its callback API answers);
// nothing is held or started.
TEST_F(NodeServiceTest, EveryMethodNeedsTheTokenAndRefusesUndecodableMessages) {
  auto call = [&](const std::string& method, const std::string& bytes, const std::string& token) {
    return rpc::testutil::GenericUnaryCall(channel_, method, bytes, token);
  };
  const auto methods = rpc::testutil::ServiceMethods("torus.rpc.NodeService");
  ASSERT_EQ(methods.size(), 14u);  // a new method: check that it is covered as the others are
  for (const google::protobuf::MethodDescriptor* m : methods) {
    const std::string method = rpc::testutil::MethodPath(m);
    for (const std::string& token : {std::string(), std::string("wrong")}) {
      grpc::Status refused = call(method, "", token);
      EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << method << " with token '" << token << "': " << refused.error_message();
    }
    grpc::Status garbled = call(method, rpc::testutil::kUndecodableMessage, kToken);
    EXPECT_EQ(garbled.error_code(), grpc::StatusCode::UNIMPLEMENTED) << method << ": " << garbled.error_message();
  }
  EXPECT_TRUE(ledger_->Entries().empty());
  EXPECT_TRUE(workers_->List().empty());
}

TEST_F(NodeServiceTest, StartListReadLog) {
  rpc::StartWorkerReply started;
  grpc::Status s = Start("w1", {"/bin/sh", "-c", "echo hello; exit 4"}, &started);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_GT(started.pid(), 0);
  EXPECT_EQ(started.log_path(), dir_ + "/workers/w1.log");
  ASSERT_TRUE(WaitExited("w1"));

  rpc::ListWorkersReply list;
  ASSERT_TRUE(stub_->ListWorkers(Ctx().get(), rpc::ListWorkersRequest(), &list).ok());
  ASSERT_EQ(list.workers_size(), 1);
  const rpc::WorkerView& view = list.workers(0);
  EXPECT_EQ(view.worker_id(), "w1");
  EXPECT_EQ(view.owner(), "job");
  EXPECT_EQ(view.pid(), started.pid());
  EXPECT_FALSE(view.running());
  EXPECT_EQ(view.exit_code(), 4);
  EXPECT_EQ(view.signal(), 0);
  EXPECT_EQ(view.log_path(), started.log_path());

  rpc::ReadWorkerLogRequest read;
  read.set_worker_id("w1");
  rpc::ReadWorkerLogReply log;
  ASSERT_TRUE(stub_->ReadWorkerLog(Ctx().get(), read, &log).ok());
  EXPECT_EQ(log.data(), "hello\n");
  EXPECT_EQ(log.next_offset(), 6);
  EXPECT_TRUE(log.finished());

  read.set_worker_id("absent");
  EXPECT_EQ(stub_->ReadWorkerLog(Ctx().get(), read, &log).error_code(), grpc::StatusCode::NOT_FOUND);
  read.set_worker_id("w1");
  read.set_offset(-1);
  EXPECT_EQ(stub_->ReadWorkerLog(Ctx().get(), read, &log).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// A start sent again by a head that took over never runs a worker twice: a worker this agent knows, even ended, is
// refused; a new one starts.
TEST_F(NodeServiceTest, AStartOnlyIfNewIsRefusedForAWorkerThatHasRunHere) {
  rpc::StartWorkerReply started;
  ASSERT_TRUE(Start("once", {"/bin/true"}, &started).ok());
  ASSERT_TRUE(WaitExited("once"));
  rpc::StartWorkerRequest again;
  again.set_worker_id("once");
  again.set_owner("job");
  again.add_argv("/bin/true");
  again.set_only_if_new(true);
  grpc::Status refused = stub_->StartWorker(Ctx().get(), again, &started);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(refused.error_message(), "worker once has run on this node already");
  again.set_worker_id("fresh");
  EXPECT_TRUE(stub_->StartWorker(Ctx().get(), again, &started).ok());
  EXPECT_GT(started.pid(), 0);
}

TEST_F(NodeServiceTest, AReadThatWaitsAnswersWithTheNextOutputOrTheExit) {
  rpc::StartWorkerReply started;
  grpc::Status s = Start("slow", {"/bin/sh", "-c", "sleep 0.3; echo late; sleep 0.3"}, &started);
  ASSERT_TRUE(s.ok()) << s.error_message();
  rpc::ReadWorkerLogRequest read;
  read.set_worker_id("slow");
  read.set_wait_ms(20'000);
  rpc::ReadWorkerLogReply log;
  ASSERT_TRUE(stub_->ReadWorkerLog(Ctx().get(), read, &log).ok());
  EXPECT_EQ(log.data(), "late\n");  // the wait ended with the output, not at its end
  EXPECT_FALSE(log.finished());
  read.set_offset(log.next_offset());
  ASSERT_TRUE(stub_->ReadWorkerLog(Ctx().get(), read, &log).ok());
  EXPECT_EQ(log.data(), "");  // then with the worker's exit
  EXPECT_TRUE(log.finished());

  read.set_wait_ms(60'001);
  grpc::Status refused = stub_->ReadWorkerLog(Ctx().get(), read, &log);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refused.error_message(), "wait_ms must be 0..60000");
}

// Several workers' logs in one call: each read answered on its own (a failing one with its error, and not waited
// on), and a wait that ends with the first one to write.
TEST_F(NodeServiceTest, ReadWorkerLogsAnswersEachReadAndWaitsForAnyOfThem) {
  rpc::StartWorkerReply started;
  ASSERT_TRUE(Start("quiet", {"/bin/sh", "-c", "echo up; exec sleep 30"}, &started).ok());
  ASSERT_TRUE(Start("talker", {"/bin/sh", "-c", "echo up; sleep 0.3; echo late; exec sleep 30"}, &started).ok());
  rpc::ReadWorkerLogsRequest request;
  for (const char* id : {"quiet", "talker", "absent", "bad/id"}) {
    rpc::ReadWorkerLogRequest* read = request.add_reads();
    read->set_worker_id(id);
    read->set_offset(3);  // after "up\n"
  }
  request.set_wait_ms(20'000);
  rpc::ReadWorkerLogsReply reply;
  // Nothing after "up" yet from the two that run: the wait ends when the talker writes, the quiet one still silent.
  // The unknown and the malformed read are answered with their errors and did not end the wait.
  ASSERT_TRUE(stub_->ReadWorkerLogs(Ctx().get(), request, &reply).ok());
  ASSERT_EQ(reply.results_size(), 4);
  EXPECT_EQ(reply.results(0).error_code(), 0);
  EXPECT_EQ(reply.results(0).chunk().data(), "");
  EXPECT_FALSE(reply.results(0).chunk().finished());
  EXPECT_EQ(reply.results(1).chunk().data(), "late\n");
  EXPECT_EQ(reply.results(1).chunk().next_offset(), 8);
  EXPECT_EQ(reply.results(2).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(reply.results(2).error(), "no worker absent on this node");
  EXPECT_EQ(reply.results(3).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(reply.results(3).error(), "worker_id 'bad/id' must be 1-128 characters of [0-9A-Za-z_.-]");

  // Only reads that fail: answered at once, nothing to wait on.
  request.mutable_reads()->DeleteSubrange(0, 2);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(stub_->ReadWorkerLogs(Ctx().get(), request, &reply).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(15));
  ASSERT_EQ(reply.results_size(), 2);

  request.set_wait_ms(60'001);
  grpc::Status refused = stub_->ReadWorkerLogs(Ctx().get(), request, &reply);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refused.error_message(), "wait_ms must be 0..60000");
}

// An exit without output does not end a wait of several reads while another of them runs; the exit of all does.
TEST_F(NodeServiceTest, ReadWorkerLogsWaitsForTheEndOfAllWhenNoneWrites) {
  rpc::StartWorkerReply started;
  ASSERT_TRUE(Start("brief", {"/bin/sh", "-c", "sleep 0.1"}, &started).ok());
  ASSERT_TRUE(Start("longer", {"/bin/sh", "-c", "sleep 0.6"}, &started).ok());
  rpc::ReadWorkerLogsRequest request;
  for (const char* id : {"brief", "longer"}) request.add_reads()->set_worker_id(id);
  request.set_wait_ms(20'000);
  rpc::ReadWorkerLogsReply reply;
  ASSERT_TRUE(stub_->ReadWorkerLogs(Ctx().get(), request, &reply).ok());
  ASSERT_EQ(reply.results_size(), 2);
  EXPECT_TRUE(reply.results(0).chunk().finished());
  EXPECT_TRUE(reply.results(1).chunk().finished());  // answered once the longer one ended too
}

TEST_F(NodeServiceTest, ListAndReadLogs) {
  std::ofstream(dir_ + "/tpu/tpu_driver.INFO") << "libtpu says hi\n";
  rpc::StartWorkerReply started;
  ASSERT_TRUE(Start("w1", {"/bin/sh", "-c", "echo hello"}, &started).ok());
  ASSERT_TRUE(WaitExited("w1"));

  rpc::ListLogsReply list;
  EXPECT_EQ(stub_->ListLogs(Ctx("").get(), rpc::ListLogsRequest(), &list).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(stub_->ListLogs(Ctx().get(), rpc::ListLogsRequest(), &list).ok());
  EXPECT_EQ(list.tpu_log_dir(), dir_ + "/tpu");
  ASSERT_EQ(list.files_size(), 2);
  EXPECT_EQ(list.files(0).name(), "tpu/tpu_driver.INFO");
  EXPECT_EQ(list.files(0).size(), 15);
  EXPECT_GT(list.files(0).modified_ms(), 0);
  EXPECT_EQ(list.files(1).name(), "workers/w1");

  rpc::ReadLogRequest read;
  read.set_name("tpu/tpu_driver.INFO");
  read.set_offset(-3);
  rpc::ReadLogReply reply;
  EXPECT_EQ(stub_->ReadLog(Ctx("wrong").get(), read, &reply).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(stub_->ReadLog(Ctx().get(), read, &reply).ok());
  EXPECT_EQ(reply.data(), "hi\n");
  EXPECT_EQ(reply.offset(), 12);
  EXPECT_EQ(reply.size(), 15);
  read.set_name("workers/w1");
  read.set_offset(0);
  ASSERT_TRUE(stub_->ReadLog(Ctx().get(), read, &reply).ok());
  EXPECT_EQ(reply.data(), "hello\n");

  read.set_name("../etc/passwd");
  grpc::Status bad = stub_->ReadLog(Ctx().get(), read, &reply);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("name '../etc/passwd'"), std::string::npos) << bad.error_message();
  read.set_name("workers/absent");
  EXPECT_EQ(stub_->ReadLog(Ctx().get(), read, &reply).error_code(), grpc::StatusCode::NOT_FOUND);
  read.set_name("agent");
  EXPECT_EQ(stub_->ReadLog(Ctx().get(), read, &reply).error_code(), grpc::StatusCode::NOT_FOUND);
  read.set_name("workers/w1");
  read.set_max_bytes(-5);
  EXPECT_EQ(stub_->ReadLog(Ctx().get(), read, &reply).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// Commits bundle `index` of `group` with these devices in the agent's ledger, as the head's reservation would.
void Reserve(BundleLedger& ledger, const std::string& group, int index, std::vector<int> chips, std::vector<int> gpus) {
  ResourceSet r;
  r.Set("CPU", 1);
  if (!chips.empty()) r.Set("TPU", static_cast<double>(chips.size()));
  if (!gpus.empty()) r.Set("GPU", static_cast<double>(gpus.size()));
  ASSERT_TRUE(ledger.Prepare(group, 1, {{index, r, chips, gpus}}, 60'000'000).ok());
  ASSERT_TRUE(ledger.Commit(group, 1).ok());
}

rpc::StartWorkerRequest OnBundle(const std::string& id, const std::string& group, int index,
                                 const std::string& command) {
  rpc::StartWorkerRequest request;
  request.set_worker_id(id);
  request.set_owner("run-a");
  request.add_argv("/bin/sh");
  request.add_argv("-c");
  request.add_argv(command);
  request.set_group_id(group);
  request.set_bundle_index(index);
  return request;
}

TEST_F(NodeServiceTest, AWorkerOnABundleGetsExactlyItsDevices) {
  Reserve(*ledger_, "pg-a/v6e-0", 0, {2, 3}, {1});
  rpc::StartWorkerRequest request = OnBundle("r0", "pg-a/v6e-0", 0, "sleep 30");
  (*request.mutable_env_set())["TORUS_RUN_ID"] = "run-a";
  (*request.mutable_env_set())["TPU_VISIBLE_CHIPS"] = "0,1,2,3";  // a worker's own claim loses to its bundle
  (*request.mutable_env_set())["CUDA_VISIBLE_DEVICES"] = "0";
  rpc::StartWorkerReply reply;
  ASSERT_TRUE(stub_->StartWorker(Ctx().get(), request, &reply).ok());
  std::vector<RunningWorker> running = workers_->Running();
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0].worker_id, "r0");
  EXPECT_EQ(running[0].pid, reply.pid());
  EXPECT_EQ(running[0].chips, (std::vector<int>{2, 3}));
  EXPECT_EQ(running[0].gpus, (std::vector<int>{1}));
  EXPECT_EQ(running[0].env_set.at("TORUS_RUN_ID"), "run-a");
  EXPECT_EQ(running[0].env_set.at("TPU_VISIBLE_CHIPS"), "2,3");
  EXPECT_EQ(running[0].env_set.at("TPU_CHIPS_PER_HOST_BOUNDS"), "1,2,1");
  EXPECT_EQ(running[0].env_set.at("CUDA_VISIBLE_DEVICES"), "1");

  rpc::ListWorkersReply listed;
  ASSERT_TRUE(stub_->ListWorkers(Ctx().get(), rpc::ListWorkersRequest(), &listed).ok());
  ASSERT_EQ(listed.workers_size(), 1);
  EXPECT_EQ(listed.workers(0).group_id(), "pg-a/v6e-0");
  EXPECT_EQ(listed.workers(0).bundle_index(), 0);
  EXPECT_EQ(std::vector<int>(listed.workers(0).chips().begin(), listed.workers(0).chips().end()),
            (std::vector<int>{2, 3}));
  workers_->Stop("r0", 0).IgnoreError();
  ASSERT_TRUE(WaitExited("r0"));
  EXPECT_TRUE(workers_->Running().empty());
}

TEST_F(NodeServiceTest, AWorkerWithoutChipsOnATpuHostIsKeptOffThem) {
  Reserve(*ledger_, "pg-cpu", 0, {}, {});
  rpc::StartWorkerRequest request = OnBundle("c0", "pg-cpu", 0, "sleep 30");
  rpc::StartWorkerReply reply;
  ASSERT_TRUE(stub_->StartWorker(Ctx().get(), request, &reply).ok());
  std::vector<RunningWorker> running = workers_->Running();
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0].env_set.at("JAX_PLATFORMS"), "cpu");
  EXPECT_EQ(running[0].env_set.at("CUDA_VISIBLE_DEVICES"), "");
  workers_->Stop("c0", 0).IgnoreError();
  ASSERT_TRUE(WaitExited("c0"));
}

TEST_F(NodeServiceTest, AWorkerIsStartedOnlyOnABundleCommittedToItsGroup) {
  rpc::StartWorkerReply reply;
  grpc::Status s = stub_->StartWorker(Ctx().get(), OnBundle("w", "pg-x", 0, "true"), &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "bundle 0 of group pg-x is not held on this host");
  ResourceSet r;
  r.Set("CPU", 1);
  ASSERT_TRUE(ledger_->Prepare("pg-x", 5, {{0, r, {}, {}}}, 60'000'000).ok());
  s = stub_->StartWorker(Ctx().get(), OnBundle("w", "pg-x", 0, "true"), &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "bundle 0 of group pg-x is prepared but not committed");
  rpc::StartWorkerRequest no_group = OnBundle("w", "", 0, "true");
  s = stub_->StartWorker(Ctx().get(), no_group, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "group_id is required with bundle_index");
  // Three chips cannot be isolated: refused, and the bundle keeps no binding.
  Reserve(*ledger_, "pg-3", 0, {0, 1, 2}, {});
  s = stub_->StartWorker(Ctx().get(), OnBundle("t3", "pg-3", 0, "true"), &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("bundle 0 of group pg-3: its chips cannot be isolated"), std::string::npos)
      << s.error_message();
  for (const LedgerEntry& e : ledger_->Entries()) EXPECT_TRUE(e.workers.empty()) << e.group_id;
  EXPECT_TRUE(workers_->List().empty());
}

// A prepare with `commit` (the group's only participant) holds the bundles committed at once: a worker may start on
// them with no CommitBundles; without it they are only prepared.
TEST_F(NodeServiceTest, APrepareThatCommitsHoldsTheBundlesCommitted) {
  auto prepare = [&](const std::string& group, bool commit) {
    rpc::PrepareBundlesRequest request;
    request.set_group_id(group);
    request.set_attempt(7);
    request.set_ttl_ms(60'000);
    request.set_commit(commit);
    rpc::BundleSpec* b = request.add_bundles();
    b->set_index(0);
    (*b->mutable_resources())["CPU"] = 10000;
    rpc::PrepareBundlesReply reply;
    return stub_->PrepareBundles(Ctx().get(), request, &reply);
  };
  ASSERT_TRUE(prepare("pg-one", true).ok());
  ASSERT_TRUE(prepare("pg-two", false).ok());
  std::map<std::string, bool> committed;
  for (const LedgerEntry& e : ledger_->Entries()) committed[e.group_id] = e.committed;
  EXPECT_EQ(committed, (std::map<std::string, bool>{{"pg-one", true}, {"pg-two", false}}));
  rpc::StartWorkerReply reply;
  EXPECT_TRUE(stub_->StartWorker(Ctx().get(), OnBundle("w1", "pg-one", 0, "true"), &reply).ok());
  EXPECT_EQ(stub_->StartWorker(Ctx().get(), OnBundle("w2", "pg-two", 0, "true"), &reply).error_message(),
            "bundle 0 of group pg-two is prepared but not committed");
  EXPECT_TRUE(WaitExited("w1"));
}

TEST_F(NodeServiceTest, ReleasingABundleStopsItsWorkersAndFreesItOnceTheyAreGone) {
  Reserve(*ledger_, "pg-r", 0, {0}, {});
  rpc::StartWorkerReply reply;
  ASSERT_TRUE(stub_->StartWorker(Ctx().get(), OnBundle("r", "pg-r", 0, "trap '' TERM; sleep 30"), &reply).ok());
  rpc::ReleaseBundlesRequest release;
  release.set_group_id("pg-r");
  release.set_grace_ms(500);
  rpc::ReleaseBundlesReply released;
  ASSERT_TRUE(stub_->ReleaseBundles(Ctx().get(), release, &released).ok());
  EXPECT_EQ(released.released(), 1);
  // Still held, marked released, while its worker ignores SIGTERM.
  rpc::LedgerView ledger;
  ASSERT_TRUE(stub_->GetLedger(Ctx().get(), rpc::GetLedgerRequest(), &ledger).ok());
  ASSERT_EQ(ledger.entries_size(), 1);
  EXPECT_TRUE(ledger.entries(0).released());
  EXPECT_EQ(ledger.entries(0).workers(0), "r");
  EXPECT_EQ(std::vector<int>(ledger.busy_chips().begin(), ledger.busy_chips().end()), (std::vector<int>{0}));
  ASSERT_TRUE(WaitExited("r"));  // SIGKILL after the grace
  // The agent's exit path unbinds the worker (here by hand, as the agent's main wires it).
  EXPECT_TRUE(ledger_->Unbind("r"));
  EXPECT_TRUE(ledger_->Entries().empty());
}

TEST_F(NodeServiceTest, StartErrors) {
  rpc::StartWorkerReply reply;
  grpc::Status s = Start("bad/id", {"true"}, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "worker_id 'bad/id' must be 1-128 characters of [0-9A-Za-z_.-]");
  s = Start("w", {}, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  s = Start("w", {"no-such-binary-xyz"}, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("no-such-binary-xyz"), std::string::npos) << s.error_message();
  ASSERT_TRUE(Start("w", {"sleep", "30"}, &reply).ok());
  EXPECT_EQ(Start("w", {"true"}, &reply).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  // A duplicate start on a bundle leaves the running worker bound.
  Reserve(*ledger_, "pg-d", 0, {}, {});
  ASSERT_TRUE(stub_->StartWorker(Ctx().get(), OnBundle("d", "pg-d", 0, "sleep 30"), &reply).ok());
  EXPECT_EQ(stub_->StartWorker(Ctx().get(), OnBundle("d", "pg-d", 0, "sleep 30"), &reply).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(ledger_->Entries()[0].workers, (std::set<std::string>{"d"}));
}

TEST_F(NodeServiceTest, StopWorkerAndOwner) {
  rpc::StartWorkerReply reply;
  ASSERT_TRUE(Start("a", {"sleep", "30"}, &reply, "A").ok());
  ASSERT_TRUE(Start("b", {"sleep", "30"}, &reply, "B").ok());

  rpc::StopWorkerRequest stop;
  stop.set_worker_id("a");
  stop.set_grace_ms(-1);
  rpc::StopWorkerReply stopped;
  EXPECT_EQ(stub_->StopWorker(Ctx().get(), stop, &stopped).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  stop.set_grace_ms(5000);
  ASSERT_TRUE(stub_->StopWorker(Ctx().get(), stop, &stopped).ok());
  EXPECT_TRUE(stopped.was_running());
  ASSERT_TRUE(WaitExited("a"));
  stop.set_worker_id("nobody");
  EXPECT_EQ(stub_->StopWorker(Ctx().get(), stop, &stopped).error_code(), grpc::StatusCode::NOT_FOUND);

  rpc::StopOwnerRequest by_owner;
  rpc::StopOwnerReply owner_reply;
  EXPECT_EQ(stub_->StopOwner(Ctx().get(), by_owner, &owner_reply).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  by_owner.set_owner("B");
  by_owner.set_grace_ms(5000);
  ASSERT_TRUE(stub_->StopOwner(Ctx().get(), by_owner, &owner_reply).ok());
  EXPECT_EQ(owner_reply.stopped(), 1);
  ASSERT_TRUE(WaitExited("b"));
}

TEST_F(NodeServiceTest, FreePortIsBindableAndNotReserved) {
  rpc::FreePortReply reply;
  ASSERT_TRUE(stub_->FreePort(Ctx().get(), rpc::FreePortRequest(), &reply).ok());
  EXPECT_GT(reply.port(), 0);
  EXPECT_LT(reply.port(), 65536);
  EXPECT_FALSE(IsReservedPort(reply.port()));

  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(reply.port());
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
}

TEST(FreePortTest, ReservedPorts) {
  for (int port : {8431, 8435, 8438, 8471, 8476, 8479, 8081}) EXPECT_TRUE(IsReservedPort(port)) << port;
  for (int port : {8430, 8439, 8470, 8480, 8080, 8082, 6380}) EXPECT_FALSE(IsReservedPort(port)) << port;
}

TEST(FreePortTest, PortIsFreeOnTheWildcardAddress) {
  // Frameworks bind their rendezvous to every address, so the port must be free there, not only on the node's IP.
  auto port = PickFreePort("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_FALSE(IsReservedPort(*port));
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  any.sin_port = htons(*port);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof(any)), 0) << *port;
  close(fd);
}

}  // namespace node_service_test
}  // namespace torus::node
