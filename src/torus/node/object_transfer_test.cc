#include "torus/node/object_transfer.h"

#include <fcntl.h>
#include <signal.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <ctime>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "torus/tls/pki.h"

namespace torus::node {
namespace object_transfer_test {

class ObjectTransferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / absl::StrCat("object_transfer_test_", getpid(), "_", n_++);
    std::filesystem::create_directories(dir_);
    auto server = TransferServer::Start("127.0.0.1");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  // A file of `size` zero bytes to receive into; its descriptor.
  int Target(const std::string& name, uint64_t size) {
    const std::string path = (dir_ / name).string();
    int fd = open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size)), 0);
    return fd;
  }
  std::string Read(const std::string& name) {
    std::ifstream in(dir_ / name, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::filesystem::path dir_;
  std::unique_ptr<TransferServer> server_;
  static inline int n_ = 0;
};

TEST_F(ObjectTransferTest, ATicketReadsTheFileOnceIntoTheTarget) {
  std::string bytes;
  for (int i = 0; i < 3'000'000; ++i) bytes.push_back(static_cast<char>(i * 7 + i / 251));
  std::ofstream(dir_ / "source", std::ios::binary) << bytes;
  const std::string ticket = server_->Issue((dir_ / "source").string(), bytes.size());
  ASSERT_EQ(ticket.size(), kTicketBytes);
  int fd = Target("copy", bytes.size());
  absl::Status s = FetchTransfer("127.0.0.1", server_->port(), ticket, fd, bytes.size());
  close(fd);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(Read("copy") == bytes);
  // Used up: a second read gets nothing.
  fd = Target("again", bytes.size());
  s = FetchTransfer("127.0.0.1", server_->port(), ticket, fd, bytes.size());
  close(fd);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), absl::StrCat("the transfer from 127.0.0.1:", server_->port(), " ended after 0 of ",
                                      bytes.size(), " bytes"));
}

TEST_F(ObjectTransferTest, AnUnknownTicketGetsNothingAndAClosedPortIsNamed) {
  std::ofstream(dir_ / "source", std::ios::binary) << "secret";
  server_->Issue((dir_ / "source").string(), 6);
  int fd = Target("copy", 6);
  absl::Status s = FetchTransfer("127.0.0.1", server_->port(), std::string(kTicketBytes, 'x'), fd, 6);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Read("copy"), std::string(6, '\0'));
  const int port = server_->port();
  server_->Stop();
  s = FetchTransfer("127.0.0.1", port, std::string(kTicketBytes, 'x'), fd, 6);
  close(fd);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StartsWith(s.message(), absl::StrCat("cannot connect to the object transfer port 127.0.0.1:", port)))
      << s.message();
}

// Certificates of one CA for agents and a worker, in `dir`.
struct ClusterFiles {
  tls::TlsFiles holder, reader, worker;
};

ClusterFiles WriteCertificates(const std::filesystem::path& dir) {
  const int64_t now = time(nullptr);
  const tls::KeyAndCertificate ca = *tls::CreateAuthority("torus cluster CA", now, 86'400);
  const std::string ca_file = (dir / "ca.crt").string();
  EXPECT_TRUE(tls::WritePrivateFile(ca_file, ca.cert_pem, 0644).ok());
  auto issue = [&](const std::string& name, const std::string& identity) {
    const std::string key = *tls::GeneratePrivateKey();
    const std::string cert = *tls::IssueCertificate(ca, *tls::CreateSigningRequest(key, identity),
                                                    {.common_name = identity, .now_s = now, .validity_s = 3600});
    tls::TlsFiles files{.ca = ca_file, .cert = (dir / (name + ".crt")).string(), .key = (dir / (name + ".key")).string()};
    EXPECT_TRUE(tls::WritePrivateFile(files.key, key, 0600).ok());
    EXPECT_TRUE(tls::WritePrivateFile(files.cert, cert, 0644).ok());
    return files;
  };
  return {issue("holder", "torus-node:holder"), issue("reader", "torus-node:reader"),
          issue("worker", "torus-worker:0011223344556677")};
}

TEST_F(ObjectTransferTest, WithTlsAgentsTransferOverMutualTlsAndOthersGetNothing) {
  signal(SIGPIPE, SIG_IGN);  // as the agent does
  const ClusterFiles files = WriteCertificates(dir_);
  auto server = TransferServer::Start("127.0.0.1", &files.holder);
  ASSERT_TRUE(server.ok()) << server.status();
  std::string bytes;
  for (int i = 0; i < 3'000'000; ++i) bytes.push_back(static_cast<char>(i * 13 + i / 509));
  std::ofstream(dir_ / "source", std::ios::binary) << bytes;

  int fd = Target("copy", bytes.size());
  absl::Status s = FetchTransfer("127.0.0.1", (*server)->port(), (*server)->Issue((dir_ / "source").string(),
                                 bytes.size()), fd, bytes.size(), &files.reader);
  close(fd);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(Read("copy") == bytes);

  // A worker's certificate is not an agent's: refused with a valid ticket.
  fd = Target("by-worker", bytes.size());
  s = FetchTransfer("127.0.0.1", (*server)->port(), (*server)->Issue((dir_ / "source").string(), bytes.size()), fd,
                    bytes.size(), &files.worker);
  close(fd);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(Read("by-worker"), std::string(bytes.size(), '\0'));
  // Plaintext with a valid ticket: nothing (the ticket is not even read as one).
  fd = Target("plain", 6);
  s = FetchTransfer("127.0.0.1", (*server)->port(), (*server)->Issue((dir_ / "source").string(), 6), fd, 6);
  close(fd);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Read("plain"), std::string(6, '\0'));
  // An agent that dials a server that is not an agent refuses it by name.
  auto impostor = TransferServer::Start("127.0.0.1", &files.worker);
  ASSERT_TRUE(impostor.ok());
  fd = Target("from-impostor", 6);
  s = FetchTransfer("127.0.0.1", (*impostor)->port(), (*impostor)->Issue((dir_ / "source").string(), 6), fd, 6,
                    &files.reader);
  close(fd);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), absl::StrCat("the object transfer port 127.0.0.1:", (*impostor)->port(),
                                      ": the peer is 'torus-worker:0011223344556677', not torus-node:"));
}

}  // namespace object_transfer_test
}  // namespace torus::node
