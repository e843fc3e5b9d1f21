#include "torus/head/api/websocket.h"

#include <gtest/gtest.h>

namespace torus::head {
namespace websocket_test {

constexpr std::string_view kKey = "dGhlIHNhbXBsZSBub25jZQ==";  // RFC 6455 §1.3's example

TEST(WebSocketTest, AcceptIsTheRfcExample) {
  EXPECT_EQ(WebSocketAccept(kKey), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
}

TEST(WebSocketTest, UpgradeChecksNameTheHeader) {
  EXPECT_TRUE(CheckWebSocketUpgrade("websocket", "Upgrade", "13", kKey).ok());
  EXPECT_TRUE(CheckWebSocketUpgrade("WebSocket", "keep-alive, Upgrade", "13", kKey).ok());
  EXPECT_EQ(CheckWebSocketUpgrade("", "", "", "").message(),
            "this is a WebSocket endpoint: the request needs the header Upgrade: websocket (and Connection: Upgrade)");
  EXPECT_EQ(CheckWebSocketUpgrade("websocket", "keep-alive", "13", kKey).message(),
            "header Connection must name Upgrade for a WebSocket handshake");
  EXPECT_EQ(CheckWebSocketUpgrade("websocket", "Upgrade", "8", kKey).message(),
            "header Sec-WebSocket-Version must be 13");
  EXPECT_EQ(CheckWebSocketUpgrade("websocket", "Upgrade", "13", "c2hvcnQ=").message(),
            "header Sec-WebSocket-Key must be 16 bytes in base64");
  EXPECT_EQ(CheckWebSocketUpgrade("websocket", "Upgrade", "13", "not base64!").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(WebSocketTest, FramesCarryTheirLengthInTheShortestForm) {
  EXPECT_EQ(WebSocketFrame(WsOpcode::kText, ""), std::string("\x81\x00", 2));
  EXPECT_EQ(WebSocketFrame(WsOpcode::kText, "hi"), "\x81\x02hi");
  const std::string f125 = WebSocketFrame(WsOpcode::kBinary, std::string(125, 'a'));
  EXPECT_EQ(f125.substr(0, 2), "\x82\x7d");
  EXPECT_EQ(f125.size(), 127u);
  const std::string f126 = WebSocketFrame(WsOpcode::kText, std::string(126, 'a'));
  EXPECT_EQ(f126.substr(0, 4), std::string("\x81\x7e\x00\x7e", 4));
  const std::string f65535 = WebSocketFrame(WsOpcode::kText, std::string(65535, 'a'));
  EXPECT_EQ(f65535.substr(0, 4), "\x81\x7e\xff\xff");
  const std::string f65536 = WebSocketFrame(WsOpcode::kText, std::string(65536, 'a'));
  EXPECT_EQ(f65536.substr(0, 10), std::string("\x81\x7f\x00\x00\x00\x00\x00\x01\x00\x00", 10));
  EXPECT_EQ(f65536.size(), 65546u);
  // Control frames hold at most 125 bytes.
  EXPECT_EQ(WebSocketFrame(WsOpcode::kPing, std::string(300, 'p')).size(), 127u);
}

TEST(WebSocketTest, CloseFramesCarryTheCodeAndAWholeUtf8Reason) {
  EXPECT_EQ(WebSocketCloseFrame(1000, "job ended"), std::string("\x88\x0b\x03\xe8job ended", 13));
  // 122 ASCII bytes and a 3-byte character would be cut at 123: the cut character is dropped.
  const std::string frame = WebSocketCloseFrame(1011, std::string(122, 'x') + "\xe2\x82\xac");
  EXPECT_EQ(frame.size(), 2u + 2u + 122u);
  EXPECT_EQ(frame.substr(2, 2), "\x03\xf3");
}

TEST(WebSocketTest, Utf8TextKeepsValidTextAndReplacesWhatIsNot) {
  Utf8Text text;
  EXPECT_EQ(text.Next("plain \xc3\xa9t\xc3\xa9 \xf0\x9f\x9a\x80\n"), "plain \xc3\xa9t\xc3\xa9 \xf0\x9f\x9a\x80\n");
  EXPECT_EQ(text.Next("bad \xff byte"), "bad \xef\xbf\xbd byte");
  EXPECT_EQ(text.Next("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // a surrogate is not UTF-8
  EXPECT_EQ(text.Next("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");                  // nor an overlong form
  EXPECT_EQ(text.Finish(), "");
}

TEST(WebSocketTest, Utf8TextJoinsACharacterSplitBetweenPieces) {
  Utf8Text text;
  EXPECT_EQ(text.Next("a\xf0\x9f"), "a");
  EXPECT_EQ(text.Next("\x9a"), "");
  EXPECT_EQ(text.Next("\x80z"), "\xf0\x9f\x9a\x80z");
  EXPECT_EQ(text.Next("end \xe2\x82"), "end ");
  EXPECT_EQ(text.Finish(), "\xef\xbf\xbd");
}

}  // namespace websocket_test
}  // namespace torus::head
