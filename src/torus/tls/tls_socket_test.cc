#include "torus/tls/tls_socket.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <future>
#include <string>

#include "torus/tls/pki.h"

namespace torus::tls {
namespace {

class TlsSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);  // as in the agent: a write to a peer that left fails instead
    std::string pattern = ::testing::TempDir() + "tls_socket_XXXXXX";
    dir_ = mkdtemp(pattern.data());
    ca_ = *CreateAuthority("torus cluster CA", time(nullptr), 86'400);
    ASSERT_TRUE(WritePrivateFile(dir_ + "/ca.crt", ca_.cert_pem, 0644).ok());
  }

  // A key and certificate for `identity` from `ca`, written as <name>.key/.crt.
  TlsFiles Issue(const std::string& name, const std::string& identity, const KeyAndCertificate& ca) {
    const std::string key = *GeneratePrivateKey();
    auto cert = IssueCertificate(ca, *CreateSigningRequest(key, identity),
                                 {.common_name = identity, .now_s = time(nullptr), .validity_s = 3600});
    EXPECT_TRUE(cert.ok()) << cert.status();
    TlsFiles files{.ca = dir_ + "/ca.crt", .cert = dir_ + "/" + name + ".crt", .key = dir_ + "/" + name + ".key"};
    EXPECT_TRUE(WritePrivateFile(files.key, key, 0600).ok());
    EXPECT_TRUE(WritePrivateFile(files.cert, *cert, 0644).ok());
    return files;
  }
  TlsFiles Issue(const std::string& name, const std::string& identity) { return Issue(name, identity, ca_); }

  struct Pair {
    absl::StatusOr<std::unique_ptr<TlsSocket>> server;
    absl::StatusOr<std::unique_ptr<TlsSocket>> client;
  };
  // A handshake over a socket pair; the sockets are closed with the test.
  Pair Handshake(const TlsSocketContext& server, const std::string& server_expects, const TlsSocketContext& client,
                 const std::string& client_expects) {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    fds_.push_back(fds[0]);
    fds_.push_back(fds[1]);
    auto accepted = std::async(std::launch::async, [&] {
      auto s = server.Accept(fds[0], server_expects);
      if (!s.ok()) shutdown(fds[0], SHUT_RDWR);  // the client's handshake ends too
      return s;
    });
    auto connected = client.Connect(fds[1], client_expects);
    if (!connected.ok()) shutdown(fds[1], SHUT_RDWR);
    return {accepted.get(), std::move(connected)};
  }
  void TearDown() override {
    for (int fd : fds_) close(fd);
    std::system(("rm -rf " + dir_).c_str());
  }

  std::string dir_;
  KeyAndCertificate ca_;
  std::vector<int> fds_;
};

TEST_F(TlsSocketTest, BothSidesSeeTheOthersIdentityAndBytesCrossBothWays) {
  auto server = TlsSocketContext::ForServer(Issue("a", "torus-node:a"));
  auto client = TlsSocketContext::ForClient(Issue("b", "torus-node:b"));
  ASSERT_TRUE(server.ok() && client.ok()) << server.status() << client.status();
  Pair p = Handshake(**server, "torus-node:", **client, "torus-node:a");
  ASSERT_TRUE(p.server.ok()) << p.server.status();
  ASSERT_TRUE(p.client.ok()) << p.client.status();
  EXPECT_EQ((*p.server)->peer_identity(), "torus-node:b");
  EXPECT_EQ((*p.client)->peer_identity(), "torus-node:a");
  const std::string big(3 << 20, 'x');
  auto sent = std::async(std::launch::async, [&] { return (*p.server)->WriteAll(big.data(), big.size()); });
  std::string got(big.size(), '\0');
  EXPECT_TRUE((*p.client)->ReadAll(got.data(), got.size()));
  EXPECT_TRUE(sent.get());
  EXPECT_EQ(got, big);
  ASSERT_TRUE((*p.client)->WriteAll("ticket", 6));
  char ticket[6];
  ASSERT_TRUE((*p.server)->ReadAll(ticket, sizeof(ticket)));
  EXPECT_EQ(std::string(ticket, 6), "ticket");
}

TEST_F(TlsSocketTest, APeerWithAnotherIdentityIsRefusedByName) {
  auto server = TlsSocketContext::ForServer(Issue("a", "torus-node:a"));
  auto worker = TlsSocketContext::ForClient(Issue("w", "torus-worker:0123"));
  Pair p = Handshake(**server, "torus-node:", **worker, "torus-node:a");
  ASSERT_EQ(p.server.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(p.server.status().message(), "the peer is 'torus-worker:0123', not torus-node:");

  auto client = TlsSocketContext::ForClient(Issue("b", "torus-node:b"));
  Pair q = Handshake(**server, "torus-node:", **client, "torus-node:other");
  ASSERT_EQ(q.client.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(q.client.status().message(), "the peer is 'torus-node:a', not torus-node:other");
}

TEST_F(TlsSocketTest, ACertificateOfAnotherCaIsRefusedOnBothSides) {
  const KeyAndCertificate other = *CreateAuthority("another CA", time(nullptr), 86'400);
  auto server = TlsSocketContext::ForServer(Issue("a", "torus-node:a"));
  auto foreign = TlsSocketContext::ForClient(Issue("f", "torus-node:b", other));
  Pair p = Handshake(**server, "", **foreign, "");
  EXPECT_EQ(p.server.status().code(), absl::StatusCode::kUnavailable);
  // With TLS 1.3 the client finishes its side before the server checks its certificate: its first read fails.
  char byte;
  EXPECT_TRUE(!p.client.ok() || !(*p.client)->ReadAll(&byte, 1));
  auto foreign_server = TlsSocketContext::ForServer(Issue("g", "torus-node:a", other));
  auto client = TlsSocketContext::ForClient(Issue("b", "torus-node:b"));
  Pair q = Handshake(**foreign_server, "", **client, "");
  EXPECT_EQ(q.client.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(q.client.status().message().find("certificate verify failed"), std::string::npos)
      << q.client.status().message();
}

TEST_F(TlsSocketTest, ARenewedServerCertificateIsPresentedAtTheNextHandshake) {
  const TlsFiles files = Issue("a", "torus-node:a");
  auto server = TlsSocketContext::ForServer(files);
  auto client = TlsSocketContext::ForClient(Issue("b", "torus-node:b"));
  ASSERT_TRUE(Handshake(**server, "", **client, "torus-node:a").client.ok());
  sleep(1);  // the files are looked at once a second at most
  Issue("a", "torus-node:renamed");
  Pair p = Handshake(**server, "", **client, "");
  ASSERT_TRUE(p.client.ok()) << p.client.status();
  EXPECT_EQ((*p.client)->peer_identity(), "torus-node:renamed");
}

TEST_F(TlsSocketTest, BadFilesAreNamed) {
  TlsFiles files = Issue("a", "torus-node:a");
  files.key = Issue("b", "torus-node:b").key;
  auto client = TlsSocketContext::ForClient(files);
  EXPECT_EQ(client.status().message(), files.key + " and " + files.cert + " are not a key and its certificate");
  auto server = TlsSocketContext::ForServer({.ca = dir_ + "/ca.crt", .cert = dir_ + "/none.crt", .key = files.key});
  EXPECT_EQ(server.status().message(), "cannot read " + dir_ + "/none.crt");
}

}  // namespace
}  // namespace torus::tls
