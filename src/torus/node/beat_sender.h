// BeatSender: an agent's heartbeat datagrams (rpc/beat_datagram.h) for one registration: a UDP socket connected to
// the head's address and the port its registration named, the registration's key, and the next sequence number.
//
// The agent sends a datagram for a beat that reports nothing new only when the head answered the latest one
// (LatestAnswered), and otherwise beats on its stream — so one lost datagram (UDP blocked between them, a full
// buffer, or a head that restarted and no longer knows the key) moves the next beat to the stream, and the head
// never goes more than two periods without hearing the node.
//
// Thread-safety: not thread-safe; the agent's heartbeat loop owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "torus/rpc/beat_datagram.h"

namespace torus::node {

class BeatSender {
 public:
  // `head_peer` is where the registration went, as gRPC names a call's peer ("ipv4:10.0.0.2:6380",
  // "ipv6:[::1]:6380", or percent-encoded "ipv6:%5B::1%5D:6380"); datagrams go to that address at `port`. INVALID_ARGUMENT for a peer that is not an IP
  // address, UNAVAILABLE when no socket can be made.
  static absl::StatusOr<std::unique_ptr<BeatSender>> Connect(const std::string& head_peer, int port, std::string key,
                                                            std::string node_id, uint64_t incarnation);
  ~BeatSender();
  BeatSender(const BeatSender&) = delete;
  BeatSender& operator=(const BeatSender&) = delete;

  // Sends the next beat (a failure to send shows as no answer).
  void Send();
  // Reads every answer waiting, without blocking. An answer counts when it carries this registration's MAC and
  // answers the latest beat sent (older answers, and replays of them, are ignored); returns kReregister or kRefused
  // when one says so, nullopt otherwise.
  std::optional<rpc::BeatAction> Poll();
  // Whether the latest beat sent was answered OK.
  bool LatestAnswered() const { return sequence_ > 0 && answered_ok_ == sequence_; }

 private:
  BeatSender(int fd, std::string key, std::string node_id, uint64_t incarnation);

  const int fd_;
  rpc::BeatMac mac_;
  const std::string node_id_;
  const uint64_t incarnation_;
  uint64_t sequence_ = 0;     // of the latest beat sent
  uint64_t answered_ok_ = 0;  // the sequence of the latest beat answered OK
};

}  // namespace torus::node
