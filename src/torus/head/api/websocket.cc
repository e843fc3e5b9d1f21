#include "torus/head/api/websocket.h"

#include <openssl/sha.h>

#include <algorithm>

#include "absl/strings/escaping.h"
#include "torus/common/utf8.h"

namespace torus::head {
namespace {

constexpr std::string_view kGuid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

std::string_view TrimHeaderValue(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x >= 'A' && x <= 'Z' ? x - 'A' + 'a' : x) == (y >= 'A' && y <= 'Z' ? y - 'A' + 'a' : y);
         });
}

// Whether the comma-separated header value lists `token` (case-insensitive), as Connection: keep-alive, Upgrade.
bool ListsToken(std::string_view value, std::string_view token) {
  while (true) {
    const size_t comma = value.find(',');
    if (EqualsIgnoringCase(TrimHeaderValue(value.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) return false;
    value.remove_prefix(comma + 1);
  }
}

}  // namespace

absl::Status CheckWebSocketUpgrade(std::string_view upgrade, std::string_view connection, std::string_view version,
                                   std::string_view key) {
  if (!ListsToken(upgrade, "websocket")) {
    return absl::InvalidArgumentError(
        "this is a WebSocket endpoint: the request needs the header Upgrade: websocket (and Connection: Upgrade)");
  }
  if (!ListsToken(connection, "upgrade")) {
    return absl::InvalidArgumentError("header Connection must name Upgrade for a WebSocket handshake");
  }
  if (TrimHeaderValue(version) != "13") {
    return absl::InvalidArgumentError("header Sec-WebSocket-Version must be 13");
  }
  std::string decoded;
  const std::string_view trimmed = TrimHeaderValue(key);
  if (!absl::Base64Unescape(absl::string_view(trimmed.data(), trimmed.size()), &decoded) || decoded.size() != 16) {
    return absl::InvalidArgumentError("header Sec-WebSocket-Key must be 16 bytes in base64");
  }
  return absl::OkStatus();
}

std::string WebSocketAccept(std::string_view key) {
  const std::string input = std::string(TrimHeaderValue(key)) + std::string(kGuid);
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(input.data()), input.size(), digest);
  return absl::Base64Escape(absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
}

std::string WebSocketFrame(WsOpcode opcode, std::string_view payload) {
  if (static_cast<uint8_t>(opcode) >= 0x8) payload = payload.substr(0, 125);
  std::string frame;
  frame.reserve(payload.size() + 10);
  frame.push_back(static_cast<char>(0x80 | static_cast<uint8_t>(opcode)));
  const uint64_t n = payload.size();
  if (n < 126) {
    frame.push_back(static_cast<char>(n));
  } else if (n <= 0xFFFF) {
    frame.push_back(static_cast<char>(126));
    frame.push_back(static_cast<char>(n >> 8));
    frame.push_back(static_cast<char>(n & 0xFF));
  } else {
    frame.push_back(static_cast<char>(127));
    for (int shift = 56; shift >= 0; shift -= 8) frame.push_back(static_cast<char>((n >> shift) & 0xFF));
  }
  frame.append(payload);
  return frame;
}

std::string WebSocketCloseFrame(uint16_t code, std::string_view reason) {
  std::string payload;
  payload.push_back(static_cast<char>(code >> 8));
  payload.push_back(static_cast<char>(code & 0xFF));
  payload.append(reason.substr(0, 123));
  // A reason cut inside a character would not be UTF-8: drop the cut sequence.
  Utf8Text text;
  std::string whole = text.Next(std::string_view(payload).substr(2));
  return WebSocketFrame(WsOpcode::kClose, payload.substr(0, 2) + whole);
}

std::string Utf8Text::Next(std::string_view bytes) {
  std::string in = pending_;
  in.append(bytes);
  pending_.clear();
  std::string out;
  out.reserve(in.size());
  std::string_view rest(in);
  while (!rest.empty()) {
    // ASCII runs first, in one step.
    const size_t ascii = std::find_if(rest.begin(), rest.end(), [](char c) { return c & 0x80; }) - rest.begin();
    out.append(rest.substr(0, ascii));
    rest.remove_prefix(ascii);
    if (rest.empty()) break;
    const int length = Utf8SequenceAt(rest);
    if (length > 0) {
      out.append(rest.substr(0, static_cast<size_t>(length)));
      rest.remove_prefix(static_cast<size_t>(length));
    } else if (length == 0) {
      pending_ = std::string(rest);
      break;
    } else {
      out.append(kReplacement);
      rest.remove_prefix(1);
    }
  }
  return out;
}

std::string Utf8Text::Finish() {
  const bool had = !pending_.empty();
  pending_.clear();
  return had ? std::string(kReplacement) : std::string();
}

}  // namespace torus::head
