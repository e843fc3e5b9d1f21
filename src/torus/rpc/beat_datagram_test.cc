#include "torus/rpc/beat_datagram.h"

#include <gtest/gtest.h>

namespace torus::rpc {
namespace {

BeatDatagram Beat() {
  BeatDatagram beat;
  beat.kind = BeatKind::kBeat;
  beat.incarnation = 0x0102030405060708ULL;
  beat.sequence = 42;
  beat.node_id = "tpu-host-7";
  return beat;
}

TEST(BeatDatagramTest, ARoundTripKeepsEveryFieldAndTheMacOfItsKey) {
  const std::string key = NewBeatKey();
  BeatDatagram answer = Beat();
  answer.kind = BeatKind::kAnswer;
  answer.action = BeatAction::kReregister;
  const std::string bytes = EncodeBeat(answer, key);
  EXPECT_EQ(bytes.size(), kBeatHeaderBytes + answer.node_id.size() + kBeatMacBytes);
  auto peeked = PeekBeat(bytes);
  ASSERT_TRUE(peeked.ok()) << peeked.status();
  EXPECT_EQ(peeked->kind, BeatKind::kAnswer);
  EXPECT_EQ(peeked->action, BeatAction::kReregister);
  EXPECT_EQ(peeked->incarnation, 0x0102030405060708ULL);
  EXPECT_EQ(peeked->sequence, 42u);
  EXPECT_EQ(peeked->node_id, "tpu-host-7");
  EXPECT_TRUE(BeatSignedWith(bytes, key));
}

TEST(BeatDatagramTest, KeysAreFreshAndAnotherKeyOrAnyChangedByteFailsTheMac) {
  const std::string key = NewBeatKey();
  EXPECT_EQ(key.size(), kBeatKeyBytes);
  EXPECT_NE(NewBeatKey(), key);
  const std::string bytes = EncodeBeat(Beat(), key);
  EXPECT_FALSE(BeatSignedWith(bytes, NewBeatKey()));
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string changed = bytes;
    changed[i] = static_cast<char>(changed[i] ^ 0x01);
    EXPECT_FALSE(BeatSignedWith(changed, key)) << "byte " << i;
  }
}

TEST(BeatDatagramTest, MalformedDatagramsAreRefusedSayingWhatIsWrong) {
  const std::string good = EncodeBeat(Beat(), NewBeatKey());
  EXPECT_EQ(PeekBeat(good.substr(0, 20)).status().message(), "heartbeat datagram: 20 bytes, shorter than 40");
  std::string magic = good;
  magic[0] = 'X';
  EXPECT_EQ(PeekBeat(magic).status().message(), "heartbeat datagram: does not begin with TBT1");
  std::string kind = good;
  kind[4] = 7;
  EXPECT_EQ(PeekBeat(kind).status().message(), "heartbeat datagram: kind 7 is not 1 (beat) or 2 (answer)");
  std::string action = good;
  action[5] = 3;
  EXPECT_EQ(PeekBeat(action).status().message(), "heartbeat datagram: action 3 is not 0, 1 or 2");
  std::string empty_id = good;
  empty_id[6] = 0;
  EXPECT_EQ(PeekBeat(empty_id).status().message(), "heartbeat datagram: node id of 0 bytes (1-256)");
  EXPECT_EQ(PeekBeat(good + "x").status().message(),
            "heartbeat datagram: 51 bytes where its node id of 10 makes 50");
  EXPECT_EQ(PeekBeat(good.substr(0, good.size() - 1)).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace torus::rpc
