#include "torus/head/api/beat_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <set>

#include "torus/common/clock.h"
#include "torus/rpc/beat_datagram.h"

namespace torus::head {
namespace beat_server_test {

using rpc::BeatAction;
using rpc::BeatDatagram;
using rpc::BeatKind;

// A real BeatServer on loopback and a node's socket connected to it.
class BeatServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto bound = BeatServer::Bind("127.0.0.1", 0, &liveness_, &callers_);
    ASSERT_TRUE(bound.ok()) << bound.status();
    server_ = *std::move(bound);
    server_->Start();
    server_->StreamOpened("n1");
    server_->StreamOpened("n2");
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    timeval wait{.tv_sec = 5, .tv_usec = 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    sockaddr_in head{};
    head.sin_family = AF_INET;
    head.sin_port = htons(static_cast<uint16_t>(server_->port()));
    inet_pton(AF_INET, "127.0.0.1", &head.sin_addr);
    ASSERT_EQ(connect(fd_, reinterpret_cast<sockaddr*>(&head), sizeof(head)), 0);
  }
  void TearDown() override {
    server_.reset();
    close(fd_);
  }

  static std::string Beat(const std::string& node, uint64_t incarnation, uint64_t sequence, const std::string& key) {
    return rpc::EncodeBeat(
        BeatDatagram{.kind = BeatKind::kBeat, .incarnation = incarnation, .sequence = sequence, .node_id = node},
        key);
  }
  void Send(const std::string& bytes) { ASSERT_EQ(send(fd_, bytes.data(), bytes.size(), 0), ssize_t(bytes.size())); }
  // The next answer, with whether it carries `key`'s MAC.
  std::pair<BeatDatagram, bool> Answer(const std::string& key) {
    char buffer[rpc::kMaxBeatDatagramBytes + 1];
    const ssize_t got = recv(fd_, buffer, sizeof(buffer), 0);
    EXPECT_GT(got, 0) << "no answer";
    if (got <= 0) return {};
    const std::string_view bytes(buffer, static_cast<size_t>(got));
    auto answer = rpc::PeekBeat(bytes);
    EXPECT_TRUE(answer.ok()) << answer.status();
    if (!answer.ok()) return {};
    return {*answer, rpc::BeatSignedWith(bytes, key)};
  }

  FakeClock clock_;
  Liveness liveness_{&clock_};
  NodeCallers callers_{"token", /*certificates=*/true};
  std::unique_ptr<BeatServer> server_;
  int fd_ = -1;
};

TEST_F(BeatServerTest, ABeatOfTheRegisteredIncarnationIsHeardAndAnsweredOkWithItsKey) {
  liveness_.Registered(NodeId("n1"), 3, ResourceSet());
  const std::string key = server_->Issue("n1", 3);
  clock_.AdvanceMillis(2000);
  EXPECT_EQ(liveness_.SilentMicros(NodeId("n1")), 2'000'000);
  Send(Beat("n1", 3, 1, key));
  auto [answer, signed_ok] = Answer(key);
  EXPECT_TRUE(signed_ok);
  EXPECT_EQ(answer.kind, BeatKind::kAnswer);
  EXPECT_EQ(answer.action, BeatAction::kOk);
  EXPECT_EQ(answer.node_id, "n1");
  EXPECT_EQ(answer.incarnation, 3u);
  EXPECT_EQ(answer.sequence, 1u);
  EXPECT_EQ(liveness_.SilentMicros(NodeId("n1")), 0);
  EXPECT_EQ(server_->counts().ok, 1u);
}

TEST_F(BeatServerTest, ForgedReplayedStaleAndUnknownDatagramsAreDroppedUnansweredAndUnheard) {
  liveness_.Registered(NodeId("n1"), 3, ResourceSet());
  const std::string key = server_->Issue("n1", 3);
  Send(Beat("n1", 3, 5, key));
  EXPECT_EQ(Answer(key).first.sequence, 5u);
  clock_.AdvanceMillis(2000);

  Send(Beat("n1", 3, 1000, rpc::NewBeatKey()));  // another key (its sequence must not count)
  Send(Beat("n1", 3, 5, key));                   // replayed
  Send(Beat("n1", 3, 4, key));                // older
  Send(Beat("n1", 2, 7, key));                // another incarnation
  Send(Beat("n2", 3, 7, key));                // a node given no key
  Send("not a heartbeat");                    // malformed
  BeatDatagram answer_kind{.kind = BeatKind::kAnswer, .incarnation = 3, .sequence = 8, .node_id = "n1"};
  Send(rpc::EncodeBeat(answer_kind, key));  // an answer sent to the head
  // Datagrams from one socket arrive in order: the next answer is for the next good beat.
  Send(Beat("n1", 3, 9, key));
  auto [answer, signed_ok] = Answer(key);
  EXPECT_TRUE(signed_ok);
  EXPECT_EQ(answer.sequence, 9u);
  EXPECT_EQ(server_->counts().dropped, 7u);
  EXPECT_EQ(server_->counts().ok, 2u);
}

TEST_F(BeatServerTest, ANewRegistrationsKeyReplacesTheOldOneAndForgetDropsTheNode) {
  liveness_.Registered(NodeId("n1"), 3, ResourceSet());
  const std::string old_key = server_->Issue("n1", 3);
  liveness_.Registered(NodeId("n1"), 4, ResourceSet());
  const std::string key = server_->Issue("n1", 4);
  Send(Beat("n1", 3, 1, old_key));
  Send(Beat("n1", 4, 1, key));
  auto [answer, signed_ok] = Answer(key);
  EXPECT_TRUE(signed_ok);
  EXPECT_EQ(answer.incarnation, 4u);
  EXPECT_EQ(server_->counts().dropped, 1u);

  server_->Forget("n1", 3);  // a late unregistration of the earlier incarnation changes nothing
  Send(Beat("n1", 4, 2, key));
  EXPECT_EQ(Answer(key).first.sequence, 2u);
  server_->Forget("n1", 4);
  Send(Beat("n1", 4, 3, key));
  liveness_.Registered(NodeId("n2"), 1, ResourceSet());
  const std::string other = server_->Issue("n2", 1);
  Send(Beat("n2", 1, 1, other));
  EXPECT_EQ(Answer(other).first.node_id, "n2");
  EXPECT_EQ(server_->counts().dropped, 2u);
}

TEST_F(BeatServerTest, AnIncarnationTheHeadNoLongerKnowsIsAskedToRegisterAgain) {
  liveness_.Registered(NodeId("n1"), 3, ResourceSet());
  const std::string key = server_->Issue("n1", 3);
  liveness_.Forget(NodeId("n1"), 3);  // declared dead
  Send(Beat("n1", 3, 1, key));
  auto [answer, signed_ok] = Answer(key);
  EXPECT_TRUE(signed_ok);
  EXPECT_EQ(answer.action, BeatAction::kReregister);
  EXPECT_FALSE(liveness_.SilentMicros(NodeId("n1")).has_value());
  EXPECT_EQ(server_->counts().reregister, 1u);
  EXPECT_EQ(server_->counts().ok, 0u);
}

TEST_F(BeatServerTest, ARevokedNodeIsRefusedAndNotHeard) {
  liveness_.Registered(NodeId("n1"), 3, ResourceSet());
  const std::string key = server_->Issue("n1", 3);
  callers_.Revoke("n1");
  clock_.AdvanceMillis(1000);
  Send(Beat("n1", 3, 1, key));
  auto [answer, signed_ok] = Answer(key);
  EXPECT_TRUE(signed_ok);
  EXPECT_EQ(answer.action, BeatAction::kRefused);
  EXPECT_EQ(liveness_.SilentMicros(NodeId("n1")), 1'000'000);
  EXPECT_EQ(server_->counts().refused, 1u);
}

TEST_F(BeatServerTest, ANodeWithoutAnOpenHeartbeatStreamIsNotHeardByDatagram) {
  liveness_.Registered(NodeId("n3"), 1, ResourceSet());
  const std::string key = server_->Issue("n3", 1);
  clock_.AdvanceMillis(1000);
  liveness_.Registered(NodeId("n2"), 1, ResourceSet());
  const std::string other = server_->Issue("n2", 1);
  Send(Beat("n3", 1, 1, key));  // no stream yet: a datagram recorded earlier cannot stand in for a live agent
  // Datagrams from one socket are taken in order: n2's answer means n3's beat was dropped already.
  Send(Beat("n2", 1, 1, other));
  EXPECT_EQ(Answer(other).first.node_id, "n2");
  server_->StreamOpened("n3");
  server_->StreamOpened("n3");  // a new stream may open before the broken one ends
  server_->StreamClosed("n3");
  Send(Beat("n3", 1, 2, key));
  EXPECT_EQ(Answer(key).first.sequence, 2u);
  EXPECT_EQ(server_->counts().dropped, 1u);
  EXPECT_EQ(liveness_.SilentMicros(NodeId("n3")), 0);

  server_->StreamClosed("n3");  // the agent's process ended
  clock_.AdvanceMillis(1000);
  Send(Beat("n3", 1, 3, key));
  Send(Beat("n2", 1, 2, other));
  EXPECT_EQ(Answer(other).first.node_id, "n2");
  EXPECT_EQ(server_->counts().dropped, 2u);
  EXPECT_EQ(liveness_.SilentMicros(NodeId("n3")), 1'000'000);
}

// What a BeatServer needs, for tests of its binding.
class BeatServerBindTest : public ::testing::Test {
 protected:
  FakeClock clock;
  Liveness liveness{&clock};
  NodeCallers callers{"token", false};
};

TEST_F(BeatServerBindTest, APortInUseIsRefusedNamingTheAddress) {
  auto first = BeatServer::Bind("127.0.0.1", 0, &liveness, &callers);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = BeatServer::Bind("127.0.0.1", (*first)->port(), &liveness, &callers);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(), "heartbeat datagrams: cannot bind UDP 127.0.0.1:" +
                                           std::to_string((*first)->port()) + ": Address already in use");
  EXPECT_EQ(BeatServer::Bind("no such host.invalid", 0, &liveness, &callers).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(BeatServerBindTest, EveryAddressOfTheHostIsServedOnOnePort) {
  auto bound = BeatServer::Bind("localhost", 0, &liveness, &callers);
  ASSERT_TRUE(bound.ok()) << bound.status();
  liveness.Registered(NodeId("n1"), 1, ResourceSet());
  const std::string key = (*bound)->Issue("n1", 1);
  (*bound)->StreamOpened("n1");
  (*bound)->Start();
  // Whichever of 127.0.0.1 and ::1 "localhost" names here answers on the one port.
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  ASSERT_EQ(getaddrinfo("localhost", std::to_string((*bound)->port()).c_str(), &hints, &found), 0);
  uint64_t sequence = 0;
  std::set<int> answered;  // address families
  uint64_t answers = 0;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (a->ai_family == AF_INET6 && (fd < 0 || connect(fd, a->ai_addr, a->ai_addrlen) != 0)) {
      close(fd);  // a machine without IPv6: only ::1 may be missing
      continue;
    }
    ASSERT_GE(fd, 0);
    ASSERT_EQ(connect(fd, a->ai_addr, a->ai_addrlen), 0);
    timeval wait{.tv_sec = 5, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
    const std::string beat = rpc::EncodeBeat(
        BeatDatagram{.kind = BeatKind::kBeat, .incarnation = 1, .sequence = ++sequence, .node_id = "n1"}, key);
    ASSERT_GT(send(fd, beat.data(), beat.size(), 0), 0);
    char buffer[rpc::kMaxBeatDatagramBytes];
    if (recv(fd, buffer, sizeof(buffer), 0) > 0) {
      answered.insert(a->ai_family);
      ++answers;
    }
    close(fd);
  }
  freeaddrinfo(found);
  EXPECT_TRUE(answered.contains(AF_INET));  // 127.0.0.1 always
  EXPECT_EQ(answers, sequence);             // and every other address tried
  EXPECT_EQ((*bound)->counts().ok, sequence);
}

}  // namespace beat_server_test
}  // namespace torus::head
