// Heartbeat datagrams: an agent's heartbeats that carry nothing new go as one UDP datagram each, answered by one; what
// changed (availability, leases) still goes on its HeartbeatStream. A datagram costs the head a fraction of a
// stream message (no HTTP/2 framing, no completion queue hand-off, many read and answered per system call).
//
// Each registration gets a fresh key from the head (RegisterNodeReply.beat_key, 32 random bytes, sent over the
// authenticated — with TLS, encrypted — channel). Both directions carry HMAC-SHA256(key, header and node id) cut to
// 16 bytes; a datagram's sequence number must grow, so a recorded one cannot be replayed.
//
// Layout (little-endian): "TBT1", kind (1 beat, 2 answer), action (answers: 0 OK, 1 REREGISTER, 2 REFUSED),
// node id length (uint16), incarnation (uint64), sequence (uint64), the node id, the MAC.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <openssl/types.h>

#include "absl/status/statusor.h"

namespace torus::rpc {

inline constexpr size_t kBeatKeyBytes = 32;
inline constexpr size_t kBeatMacBytes = 16;
inline constexpr size_t kBeatHeaderBytes = 4 + 1 + 1 + 2 + 8 + 8;
inline constexpr size_t kMaxBeatNodeIdBytes = 256;
inline constexpr size_t kMaxBeatDatagramBytes = kBeatHeaderBytes + kMaxBeatNodeIdBytes + kBeatMacBytes;

enum class BeatKind : uint8_t { kBeat = 1, kAnswer = 2 };
enum class BeatAction : uint8_t { kOk = 0, kReregister = 1, kRefused = 2 };

struct BeatDatagram {
  BeatKind kind = BeatKind::kBeat;
  BeatAction action = BeatAction::kOk;
  uint64_t incarnation = 0;
  uint64_t sequence = 0;
  std::string node_id;
};

// A fresh random key for one registration.
std::string NewBeatKey();

// The MAC of one key, keyed once (a keyed HMAC context: a datagram's MAC then costs a fifth of a one-shot HMAC).
// Not thread-safe: one user at a time.
class BeatMac {
 public:
  explicit BeatMac(std::string_view key);
  ~BeatMac();
  BeatMac(const BeatMac&) = delete;
  BeatMac& operator=(const BeatMac&) = delete;

  // The datagram signed with this key. `beat.node_id` must be 1..kMaxBeatNodeIdBytes long.
  std::string Encode(const BeatDatagram& beat);
  // Whether `bytes` (a datagram PeekBeat accepted) carries this key's MAC. Constant time.
  bool Signed(std::string_view bytes);

 private:
  std::string Mac(std::string_view signed_part);
  EVP_MAC_CTX* ctx_;
};

// The datagram signed with `key`. `node_id` must be 1..kMaxBeatNodeIdBytes long.
std::string EncodeBeat(const BeatDatagram& beat, std::string_view key);

// The header of `bytes` without checking its MAC (to find the node's key), or INVALID_ARGUMENT saying what is wrong.
absl::StatusOr<BeatDatagram> PeekBeat(std::string_view bytes);

// Whether `bytes` (a datagram PeekBeat accepted) carries the MAC of `key`. Constant time.
bool BeatSignedWith(std::string_view bytes, std::string_view key);

}  // namespace torus::rpc
