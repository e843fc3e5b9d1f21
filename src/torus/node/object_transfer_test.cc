#include "torus/node/object_transfer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

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

}  // namespace object_transfer_test
}  // namespace torus::node
