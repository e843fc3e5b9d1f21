#include "torus/node/beat_sender.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace torus::node {
namespace {

using rpc::BeatAction;
using rpc::BeatDatagram;
using rpc::BeatKind;

// A socket standing in for the head: receives the beats, answers them.
class BeatSenderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    head_fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    timeval wait{.tv_sec = 5, .tv_usec = 0};
    setsockopt(head_fd_, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    sockaddr_in any{};
    any.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &any.sin_addr);
    ASSERT_EQ(bind(head_fd_, reinterpret_cast<sockaddr*>(&any), sizeof(any)), 0);
    socklen_t length = sizeof(any);
    getsockname(head_fd_, reinterpret_cast<sockaddr*>(&any), &length);
    port_ = ntohs(any.sin_port);
    auto sender = BeatSender::Connect("ipv4:127.0.0.1:6380", port_, key_, "n1", 5);
    ASSERT_TRUE(sender.ok()) << sender.status();
    sender_ = *std::move(sender);
  }
  void TearDown() override { close(head_fd_); }

  // The next beat the head got; remembers where it came from.
  std::string ReceiveBeat() {
    char buffer[rpc::kMaxBeatDatagramBytes + 1];
    from_length_ = sizeof(from_);
    const ssize_t got = recvfrom(head_fd_, buffer, sizeof(buffer), 0, reinterpret_cast<sockaddr*>(&from_), &from_length_);
    EXPECT_GT(got, 0) << "no beat";
    return got > 0 ? std::string(buffer, static_cast<size_t>(got)) : "";
  }
  void Answer(BeatAction action, uint64_t sequence, const std::string& key, uint64_t incarnation = 5) {
    const std::string bytes = rpc::EncodeBeat(BeatDatagram{.kind = BeatKind::kAnswer, .action = action,
                                                           .incarnation = incarnation, .sequence = sequence,
                                                           .node_id = "n1"},
                                              key);
    ASSERT_GT(sendto(head_fd_, bytes.data(), bytes.size(), 0, reinterpret_cast<sockaddr*>(&from_), from_length_), 0);
  }
  // Polls until an answer has been taken (loopback delivers at once; the loop only guards against a slow machine).
  std::optional<BeatAction> PollUntil(bool (*done)(const BeatSender&)) {
    std::optional<BeatAction> said;
    for (int i = 0; i < 500 && !said && !done(*sender_); ++i) {
      said = sender_->Poll();
      if (!said && !done(*sender_)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return said;
  }
  static bool Answered(const BeatSender& s) { return s.LatestAnswered(); }
  static bool Never(const BeatSender&) { return false; }

  const std::string key_ = rpc::NewBeatKey();
  int head_fd_ = -1;
  int port_ = 0;
  sockaddr_storage from_{};
  socklen_t from_length_ = 0;
  std::unique_ptr<BeatSender> sender_;
};

TEST_F(BeatSenderTest, BeatsGoToTheHeadsAddressSignedWithGrowingSequenceNumbers) {
  sender_->Send();
  sender_->Send();
  for (uint64_t expected : {1u, 2u}) {
    const std::string bytes = ReceiveBeat();
    auto beat = rpc::PeekBeat(bytes);
    ASSERT_TRUE(beat.ok()) << beat.status();
    EXPECT_EQ(beat->kind, BeatKind::kBeat);
    EXPECT_EQ(beat->node_id, "n1");
    EXPECT_EQ(beat->incarnation, 5u);
    EXPECT_EQ(beat->sequence, expected);
    EXPECT_TRUE(rpc::BeatSignedWith(bytes, key_));
  }
}

TEST_F(BeatSenderTest, OnlyTheLatestBeatAnsweredOkCountsAsAnswered) {
  EXPECT_FALSE(sender_->LatestAnswered());
  sender_->Send();
  ReceiveBeat();
  Answer(BeatAction::kOk, 1, key_);
  EXPECT_EQ(PollUntil(Answered), std::nullopt);
  EXPECT_TRUE(sender_->LatestAnswered());
  // The next beat is lost: the agent's next beat goes on its stream.
  sender_->Send();
  ReceiveBeat();
  EXPECT_EQ(sender_->Poll(), std::nullopt);
  EXPECT_FALSE(sender_->LatestAnswered());
  // An answer to the earlier beat (late, or replayed) does not count.
  Answer(BeatAction::kOk, 1, key_);
  sender_->Send();
  ReceiveBeat();
  Answer(BeatAction::kOk, 3, key_);
  EXPECT_EQ(PollUntil(Answered), std::nullopt);
  EXPECT_TRUE(sender_->LatestAnswered());
}

TEST_F(BeatSenderTest, AnswersWithAnotherKeyIncarnationOrAnUnsentSequenceAreIgnored) {
  sender_->Send();
  ReceiveBeat();
  Answer(BeatAction::kReregister, 1, rpc::NewBeatKey());   // forged
  Answer(BeatAction::kReregister, 1, key_, /*incarnation=*/4);
  Answer(BeatAction::kRefused, 2, key_);                    // a beat not sent yet
  Answer(BeatAction::kOk, 1, key_);                         // the real one, last
  EXPECT_EQ(PollUntil(Answered), std::nullopt);
  EXPECT_TRUE(sender_->LatestAnswered());
}

TEST_F(BeatSenderTest, ReregisterAndRefusedAnswersAreSaid) {
  sender_->Send();
  ReceiveBeat();
  Answer(BeatAction::kReregister, 1, key_);
  EXPECT_EQ(PollUntil(Never), BeatAction::kReregister);
  sender_->Send();
  ReceiveBeat();
  Answer(BeatAction::kRefused, 2, key_);
  EXPECT_EQ(PollUntil(Never), BeatAction::kRefused);
  EXPECT_FALSE(sender_->LatestAnswered());
}

TEST(BeatSenderConnectTest, PeersThatAreNotIpAddressesAreRefusedByName) {
  const std::string key = rpc::NewBeatKey();
  EXPECT_EQ(BeatSender::Connect("unix:/tmp/head.sock", 6380, key, "n1", 1).status().message(),
            "head peer 'unix:/tmp/head.sock': not ipv4:ADDRESS:PORT or ipv6:[ADDRESS]:PORT");
  EXPECT_EQ(BeatSender::Connect("ipv4:head:6380", 6380, key, "n1", 1).status().message(),
            "head peer 'ipv4:head:6380': not an IPv4 address");
  EXPECT_EQ(BeatSender::Connect("ipv4:127.0.0.1:6380", 0, key, "n1", 1).status().message(), "beat port 0 (1-65535)");
  EXPECT_EQ(BeatSender::Connect("ipv6:[fe80::zz]:6380", 6380, key, "n1", 1).status().message(),
            "head peer 'ipv6:[fe80::zz]:6380': not an IPv6 address");
  // Percent-encoded brackets, as newer gRPC writes them.
  EXPECT_NE(BeatSender::Connect("ipv6:%5B::1%5D:6380", 6380, key, "n1", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  // An IPv6 peer parses (the socket may still be refused where the machine has no IPv6).
  EXPECT_NE(BeatSender::Connect("ipv6:[::1]:6380", 6380, key, "n1", 1).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace torus::node
