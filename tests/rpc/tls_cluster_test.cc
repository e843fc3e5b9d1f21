// A cluster with TLS, as real processes on loopback: torus-head --tls and two torus-node agents that join with the
// join token. What each identity may do: a client holding only the user token, one agent's certificate against
// another node's calls and another agent, a revoked node; and what crosses the wire (captured on the loopback
// interface): no token and no request body in clear text.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "torus/client/client.h"
#include "torus/common/resources.h"
#include "torus/core/channels.h"
#include "torus/core/worker_certificate.h"
#include "torus/head.grpc.pb.h"
#include "torus/node.grpc.pb.h"
#include "torus/rpc/auth.h"
#include "torus/tls/credentials.h"
#include "torus/tls/pki.h"

extern char** environ;

namespace tls_cluster_test {

pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<char*> argv;
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  posix_spawn(&pid, copy[0].c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

template <typename F>
bool WaitFor(F done, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

class TlsClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/torus_tls_cluster_XXXXXX";
    dir_ = mkdtemp(tmpl);
    const std::string bin = TORUS_BIN_DIR;
    head_pid_ = Spawn({bin + "/torus-head", "--session-dir", dir_ + "/s", "--port", "0", "--dashboard-port", "0",
                       "--serve-port", "-1", "--tls", "--heartbeat-period-ms", "200"},
                      dir_ + "/head.log");
    ASSERT_TRUE(WaitFor([] { return !ReadFile(dir_ + "/s/head_address").empty(); })) << ReadFile(dir_ + "/head.log");
    address_ = ReadFile(dir_ + "/s/head_address");
    address_.erase(address_.find_last_not_of("\n") + 1);
    token_ = *torus::rpc::ReadTokenFile(dir_ + "/s/token");
    for (const std::string node : {"n1", "n2"}) {
      node_pids_.push_back(Spawn({bin + "/torus-node", "--address", address_, "--token-file", dir_ + "/s/token",
                                  "--node-id", node, "--tls-ca", dir_ + "/s/ca.crt", "--join-token-file",
                                  dir_ + "/s/join_token", "--work-dir", dir_ + "/" + node, "--metadata-url", "off",
                                  "--metrics-period-ms", "0", "--num-cpus", "2"},
                                 dir_ + "/" + node + ".log"));
    }
    ASSERT_TRUE(WaitFor([] { return AliveNodes() == 2; })) << ReadFile(dir_ + "/head.log") << ReadFile(dir_ + "/n1.log");
  }
  static void TearDownTestSuite() {
    for (pid_t pid : node_pids_) kill(pid, SIGTERM);
    for (pid_t pid : node_pids_) waitpid(pid, nullptr, 0);
    kill(head_pid_, SIGTERM);
    waitpid(head_pid_, nullptr, 0);
    std::filesystem::remove_all(dir_);
  }

  static std::unique_ptr<torus::client::Client> Client() {
    auto client = torus::client::Client::Connect({.address = address_, .token = token_, .tls_ca = Ca()});
    return client.ok() ? *std::move(client) : nullptr;
  }
  static std::string Ca() { return dir_ + "/s/ca.crt"; }
  static int AliveNodes() {
    auto client = Client();
    auto status = client ? client->GetClusterStatus(false) : absl::UnavailableError("");
    return status.ok() ? status->nodes_size() : -1;
  }
  // The agent of `node`'s NodeService address.
  static std::string AgentAddress(const std::string& node) {
    auto status = Client()->GetClusterStatus(false);
    for (const auto& n : status->nodes()) {
      if (n.info().node_id() == node) return n.info().address() + ":" + std::to_string(n.info().agent_port());
    }
    return "";
  }
  // The files of `node`'s own certificate, as its agent keeps them.
  static torus::tls::TlsFiles NodeFiles(const std::string& node) {
    return {.ca = Ca(), .cert = dir_ + "/" + node + "/tls/node.crt", .key = dir_ + "/" + node + "/tls/node.key"};
  }
  static grpc::ClientContext* Prepare(grpc::ClientContext* ctx) {
    ctx->AddMetadata(torus::rpc::kAuthMetadataKey, "Bearer " + token_);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return ctx;
  }

  static std::string dir_, address_, token_;
  static pid_t head_pid_;
  static std::vector<pid_t> node_pids_;
};
std::string TlsClusterTest::dir_, TlsClusterTest::address_, TlsClusterTest::token_;
pid_t TlsClusterTest::head_pid_ = 0;
std::vector<pid_t> TlsClusterTest::node_pids_;

TEST_F(TlsClusterTest, ATokenOnlyClientCannotStartAWorkerOnAnAgentButMayReadItsLedger) {
  auto channel = grpc::CreateChannel(AgentAddress("n1"), torus::tls::ChannelCredentials({.ca = Ca()}, "torus-node:n1"));
  auto agent = torus::rpc::NodeService::NewStub(channel);
  grpc::ClientContext ctx;
  torus::rpc::StartWorkerRequest start;
  start.set_worker_id("w-intruder");
  start.add_argv("/bin/true");
  torus::rpc::StartWorkerReply started;
  grpc::Status s = agent->StartWorker(Prepare(&ctx), start, &started);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_EQ(s.error_message(),
            "only the head may reserve bundles or start and stop workers here (the cluster token is not enough: the "
            "call must carry the head's certificate)");
  grpc::ClientContext read;
  torus::rpc::LedgerView ledger;
  grpc::Status r = agent->GetLedger(Prepare(&read), torus::rpc::GetLedgerRequest(), &ledger);
  EXPECT_TRUE(r.ok()) << r.error_message();
}

TEST_F(TlsClusterTest, AnAgentsCertificateCannotCallAnotherAgent) {
  auto channel = grpc::CreateChannel(AgentAddress("n2"),
                                     torus::tls::ChannelCredentials(NodeFiles("n1"), "torus-node:n2"));
  auto agent = torus::rpc::NodeService::NewStub(channel);
  grpc::ClientContext ctx;
  torus::rpc::PrepareBundlesRequest prepare;
  prepare.set_group_id("stolen");
  torus::rpc::PrepareBundlesReply reply;
  grpc::Status s = agent->PrepareBundles(Prepare(&ctx), prepare, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_EQ(s.error_message(), "only the head may reserve bundles or start and stop workers here, not 'torus-node:n1'");
}

TEST_F(TlsClusterTest, AnAgentsCertificateCannotHeartbeatOrRegisterAsAnotherNode) {
  auto head = torus::rpc::HeadService::NewStub(
      grpc::CreateChannel(address_, torus::tls::ChannelCredentials(NodeFiles("n1"), torus::tls::kHeadIdentity)));
  grpc::ClientContext ctx;
  torus::rpc::HeartbeatRequest beat;
  beat.set_node_id("n2");
  beat.set_incarnation(1);
  torus::rpc::HeartbeatReply reply;
  grpc::Status s = head->Heartbeat(Prepare(&ctx), beat, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_EQ(s.error_message(), "node n1's certificate cannot make calls for node n2");

  grpc::ClientContext reg;
  torus::rpc::RegisterNodeRequest request;
  request.mutable_node()->set_node_id("n2");
  torus::rpc::RegisterNodeReply registered;
  s = head->RegisterNode(Prepare(&reg), request, &registered);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();

  // The user token alone makes no node calls at all.
  auto token_only = torus::rpc::HeadService::NewStub(
      grpc::CreateChannel(address_, torus::tls::ChannelCredentials({.ca = Ca()}, torus::tls::kHeadIdentity)));
  grpc::ClientContext plain;
  beat.set_node_id("n1");
  s = token_only->Heartbeat(Prepare(&plain), beat, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_NE(s.error_message().find("need the node's certificate"), std::string::npos) << s.error_message();
}

TEST_F(TlsClusterTest, TheJoinTokenIsCheckedAndCannotTakeOverALiveNode) {
  auto admission = torus::rpc::NodeAdmissionService::NewStub(
      grpc::CreateChannel(address_, torus::tls::ChannelCredentials({.ca = Ca()}, torus::tls::kHeadIdentity)));
  const std::string csr = *torus::tls::CreateSigningRequest(*torus::tls::GeneratePrivateKey(), "x");
  auto join = [&](const std::string& token, const std::string& node) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    torus::rpc::JoinClusterRequest request;
    request.set_join_token(token);
    request.set_node_id(node);
    request.set_csr_pem(csr);
    torus::rpc::NodeCertificateReply reply;
    return admission->JoinCluster(&ctx, request, &reply);
  };
  EXPECT_EQ(join(token_, "n9").error_code(), grpc::StatusCode::PERMISSION_DENIED);  // the user token is not it
  const std::string join_token = *torus::rpc::ReadTokenFile(dir_ + "/s/join_token");
  grpc::Status alive = join(join_token, "n1");
  EXPECT_EQ(alive.error_code(), grpc::StatusCode::ALREADY_EXISTS) << alive.error_message();
  EXPECT_TRUE(join(join_token, "n9").ok());
}

TEST_F(TlsClusterTest, AWorkerCertificateNeedsTheTokenAndGrantsNoNodeOrHeadCalls) {
  auto admission = torus::rpc::NodeAdmissionService::NewStub(
      grpc::CreateChannel(address_, torus::tls::ChannelCredentials({.ca = Ca()}, torus::tls::kHeadIdentity)));
  const std::string key = *torus::tls::GeneratePrivateKey();
  torus::rpc::IssueWorkerCertificateRequest request;
  request.set_csr_pem(*torus::tls::CreateSigningRequest(key, "torus-head"));  // asks for more than it gets
  torus::rpc::NodeCertificateReply reply;
  grpc::ClientContext no_token;
  no_token.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  EXPECT_EQ(admission->IssueWorkerCertificate(&no_token, request, &reply).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext ctx;
  grpc::Status s = admission->IssueWorkerCertificate(Prepare(&ctx), request, &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  auto info = torus::tls::ReadCertificate(reply.cert_pem());
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->common_name.rfind(torus::tls::kWorkerIdentityPrefix, 0), 0u) << info->common_name;
  EXPECT_EQ(info->common_name.size(), std::string(torus::tls::kWorkerIdentityPrefix).size() + 16);

  // With it: no control call on an agent, no node call on the head.
  const std::string ca_pem = ReadFile(Ca());
  auto agent = torus::rpc::NodeService::NewStub(grpc::CreateChannel(
      AgentAddress("n1"), torus::tls::ChannelCredentialsFromPem(ca_pem, reply.cert_pem(), key, "torus-node:n1")));
  grpc::ClientContext start_ctx;
  torus::rpc::StartWorkerRequest start;
  start.set_worker_id("w-intruder");
  start.add_argv("/bin/true");
  torus::rpc::StartWorkerReply started;
  s = agent->StartWorker(Prepare(&start_ctx), start, &started);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_EQ(s.error_message(), "only the head may reserve bundles or start and stop workers here, not '" +
                                   info->common_name + "'");
  auto head = torus::rpc::HeadService::NewStub(grpc::CreateChannel(
      address_, torus::tls::ChannelCredentialsFromPem(ca_pem, reply.cert_pem(), key, torus::tls::kHeadIdentity)));
  grpc::ClientContext beat_ctx;
  torus::rpc::HeartbeatRequest beat;
  beat.set_node_id("n1");
  beat.set_incarnation(1);
  torus::rpc::HeartbeatReply beat_reply;
  s = head->Heartbeat(Prepare(&beat_ctx), beat, &beat_reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_EQ(s.error_message(), "'" + info->common_name + "' is not a node; a node's calls need the node's certificate");
}

TEST_F(TlsClusterTest, ACoreWorkersCertificateLivesInMemoryAndARenewalReplacesItAtTheSamePath) {
  torus::core::Channels channels(token_, Ca());
  auto cert = torus::core::WorkerCertificate::Obtain(&channels, address_, Ca());
  ASSERT_TRUE(cert.ok()) << cert.status();
  const torus::tls::TlsFiles files = (*cert)->files();
  EXPECT_EQ(files.cert.rfind("/proc/self/fd/", 0), 0u) << files.cert;  // a memfd: nothing on disk
  const std::string first = ReadFile(files.cert), key = ReadFile(files.key);
  auto info = torus::tls::ReadCertificate(first);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->common_name, (*cert)->identity());
  EXPECT_TRUE(torus::tls::CheckKeyMatches(key, first).ok());
  EXPECT_EQ(ReadFile(files.ca), ReadFile(Ca()));

  ASSERT_TRUE((*cert)->Renew().ok());
  EXPECT_EQ((*cert)->files().cert, files.cert);
  const std::string second = ReadFile(files.cert);
  EXPECT_NE(torus::tls::ReadCertificate(second)->serial_hex, info->serial_hex);
  EXPECT_TRUE(torus::tls::CheckKeyMatches(ReadFile(files.key), second).ok());  // same key, new certificate

  cert->reset();
  EXPECT_FALSE(std::filesystem::exists(files.key));  // closed with it
}

TEST_F(TlsClusterTest, APlaintextClientIsRefused) {
  auto head = torus::rpc::HeadService::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  torus::rpc::ClusterStatus status;
  grpc::Status s = head->GetClusterStatus(Prepare(&ctx), torus::rpc::GetClusterStatusRequest(), &status);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
}

// Captures TCP payloads to or from `port` on the loopback interface while `body` runs (root only: a raw socket).
class LoopbackCapture {
 public:
  explicit LoopbackCapture(int port) : port_(port) {
    fd_ = socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_IP));
    if (fd_ < 0) return;
    sockaddr_ll addr{};
    addr.sll_family = AF_PACKET;
    addr.sll_protocol = htons(ETH_P_IP);
    addr.sll_ifindex = static_cast<int>(if_nametoindex("lo"));
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    timeval tv{0, 50'000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    reader_ = std::thread([this] {
      std::vector<char> buf(70'000);
      while (!stop_) {
        const ssize_t n = recv(fd_, buf.data(), buf.size(), 0);
        if (n < static_cast<ssize_t>(sizeof(iphdr))) continue;
        const auto* ip = reinterpret_cast<const iphdr*>(buf.data());
        if (ip->protocol != IPPROTO_TCP) continue;
        const size_t ip_len = ip->ihl * 4;
        const auto* tcp = reinterpret_cast<const tcphdr*>(buf.data() + ip_len);
        if (ntohs(tcp->source) != port_ && ntohs(tcp->dest) != port_) continue;
        const size_t offset = ip_len + tcp->doff * 4;
        if (static_cast<size_t>(n) > offset) payload_.append(buf.data() + offset, static_cast<size_t>(n) - offset);
      }
    });
  }
  ~LoopbackCapture() { Stop(); }
  bool ok() const { return fd_ >= 0; }
  const std::string& Stop() {
    stop_ = true;
    if (reader_.joinable()) reader_.join();
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
    return payload_;
  }

 private:
  const int port_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread reader_;
  std::string payload_;
};

TEST_F(TlsClusterTest, CapturedTrafficShowsNoTokenOrRequestBodyInClearText) {
  const int port = std::stoi(address_.substr(address_.rfind(':') + 1));
  LoopbackCapture capture(port);
  if (!capture.ok()) GTEST_SKIP() << "capturing on lo needs root (CAP_NET_RAW)";
  const std::string marker = "tls-capture-marker-7f3a";
  auto client = Client();
  torus::rpc::PlacementGroupSpec spec;
  spec.set_name(marker);
  (*spec.add_bundles()->mutable_resources())["CPU"] = torus::kResourceScale;  // 1 CPU
  auto created = client->CreatePlacementGroup(spec);
  ASSERT_TRUE(created.ok()) << created.status();
  auto removed = client->RemovePlacementGroup(created->id());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // heartbeats pass too
  const std::string& seen = capture.Stop();
  ASSERT_GT(seen.size(), 1000u) << "nothing captured";
  EXPECT_EQ(seen.find(token_), std::string::npos) << "the token crossed in clear text";
  EXPECT_EQ(seen.find(marker), std::string::npos) << "a request body crossed in clear text";
  EXPECT_EQ(seen.find("torus.rpc.HeadService"), std::string::npos) << "a method name crossed in clear text";
}

// Last: it revokes n2 for good.
TEST_F(TlsClusterTest, ZRevokedNodeIsRefusedAtItsNextHeartbeatAndCannotJoinAgain) {
  auto client = Client();
  auto was_alive = client->MarkNodeDead("n2", "stolen", /*revoke=*/true);
  ASSERT_TRUE(was_alive.ok()) << was_alive.status();
  EXPECT_TRUE(*was_alive);
  // The agent is refused at its next call and stops (exit code 3): it does not come back.
  int status = 0;
  ASSERT_TRUE(WaitFor([&] { return waitpid(node_pids_[1], &status, WNOHANG) == node_pids_[1]; }))
      << ReadFile(dir_ + "/n2.log");
  node_pids_.pop_back();
  EXPECT_EQ(WEXITSTATUS(status), 3) << ReadFile(dir_ + "/n2.log");
  EXPECT_EQ(AliveNodes(), 1);
  // Its certificate is refused for any node call, and the join token gets it no new one.
  auto head = torus::rpc::HeadService::NewStub(
      grpc::CreateChannel(address_, torus::tls::ChannelCredentials(NodeFiles("n2"), torus::tls::kHeadIdentity)));
  grpc::ClientContext ctx;
  torus::rpc::HeartbeatRequest beat;
  beat.set_node_id("n2");
  torus::rpc::HeartbeatReply reply;
  grpc::Status s = head->Heartbeat(Prepare(&ctx), beat, &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), "node n2 is revoked");
  auto admission = torus::rpc::NodeAdmissionService::NewStub(
      grpc::CreateChannel(address_, torus::tls::ChannelCredentials({.ca = Ca()}, torus::tls::kHeadIdentity)));
  grpc::ClientContext join_ctx;
  torus::rpc::JoinClusterRequest join;
  join.set_join_token(*torus::rpc::ReadTokenFile(dir_ + "/s/join_token"));
  join.set_node_id("n2");
  join.set_csr_pem(*torus::tls::CreateSigningRequest(*torus::tls::GeneratePrivateKey(), "x"));
  torus::rpc::NodeCertificateReply joined;
  s = admission->JoinCluster(&join_ctx, join, &joined);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(), "node n2 is revoked; the host may join again under another --node-id");
  // The other node keeps working: its renewal goes through.
  auto n1 = torus::rpc::NodeAdmissionService::NewStub(
      grpc::CreateChannel(address_, torus::tls::ChannelCredentials(NodeFiles("n1"), torus::tls::kHeadIdentity)));
  grpc::ClientContext renew_ctx;
  torus::rpc::RenewNodeCertificateRequest renew;
  renew.set_csr_pem(*torus::tls::CreateSigningRequest(ReadFile(NodeFiles("n1").key), "x"));
  torus::rpc::NodeCertificateReply renewed;
  s = n1->RenewNodeCertificate(&renew_ctx, renew, &renewed);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(torus::tls::ReadCertificate(renewed.cert_pem())->common_name, "torus-node:n1");
}

}  // namespace tls_cluster_test
