// WebSocket (RFC 6455) for a server that only sends: the opening handshake's checks and answer, server frames
// (never masked), and the UTF-8 a text frame must carry.
//
// Thread-safety: pure functions; a Utf8Text is used by one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace torus::head {

// The handshake's checks on a GET's headers (empty when absent): Upgrade: websocket, Connection naming Upgrade,
// Sec-WebSocket-Version: 13, Sec-WebSocket-Key of 16 bytes in base64. InvalidArgument names the header and the form
// it must have.
absl::Status CheckWebSocketUpgrade(std::string_view upgrade, std::string_view connection, std::string_view version,
                                   std::string_view key);

// Sec-WebSocket-Accept for a client's Sec-WebSocket-Key: base64(SHA-1(key + the RFC's GUID)).
std::string WebSocketAccept(std::string_view key);

enum class WsOpcode : uint8_t { kText = 0x1, kBinary = 0x2, kClose = 0x8, kPing = 0x9, kPong = 0xA };

// One whole (FIN) unmasked frame. Control frames (close, ping, pong) carry at most 125 bytes: longer payloads are cut.
std::string WebSocketFrame(WsOpcode opcode, std::string_view payload);
// A close frame with a status code (1000 normal, 1011 server error) and a reason.
std::string WebSocketCloseFrame(uint16_t code, std::string_view reason);

// A byte stream as UTF-8 text, piece by piece: each invalid byte (or truncated sequence) becomes U+FFFD, and a
// sequence cut by the end of one piece is completed by the next.
class Utf8Text {
 public:
  // The text of `bytes` after what came before, less an incomplete sequence at its end (kept for the next piece).
  std::string Next(std::string_view bytes);
  // What is left at the end of the stream: U+FFFD for a sequence never completed, else "".
  std::string Finish();

 private:
  std::string pending_;  // the start of a sequence, at most 3 bytes
};

}  // namespace torus::head
