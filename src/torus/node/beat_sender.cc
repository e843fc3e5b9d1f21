#include "torus/node/beat_sender.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace torus::node {

absl::StatusOr<std::unique_ptr<BeatSender>> BeatSender::Connect(const std::string& head_peer, int port,
                                                               std::string key, std::string node_id,
                                                               uint64_t incarnation) {
  // Newer gRPC percent-encodes the brackets of an IPv6 peer.
  const std::string peer =
      absl::StrReplaceAll(head_peer, {{"%5B", "["}, {"%5D", "]"}, {"%5b", "["}, {"%5d", "]"}});
  absl::string_view rest = peer;
  sockaddr_storage address{};
  socklen_t length = 0;
  if (port <= 0 || port > 65535) return absl::InvalidArgumentError(absl::StrCat("beat port ", port, " (1-65535)"));
  if (absl::ConsumePrefix(&rest, "ipv4:")) {
    const std::string host(rest.substr(0, rest.rfind(':')));
    auto* in = reinterpret_cast<sockaddr_in*>(&address);
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &in->sin_addr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("head peer '", head_peer, "': not an IPv4 address"));
    }
    length = sizeof(sockaddr_in);
  } else if (absl::ConsumePrefix(&rest, "ipv6:[")) {
    std::string host(rest.substr(0, rest.find(']')));
    if (size_t scope = host.find("%25"); scope != std::string::npos) host.erase(scope);  // a link-local scope
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&address);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("head peer '", head_peer, "': not an IPv6 address"));
    }
    length = sizeof(sockaddr_in6);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("head peer '", head_peer, "': not ipv4:ADDRESS:PORT or ipv6:[ADDRESS]:PORT"));
  }
  const int fd = socket(address.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("heartbeat datagram socket: ", std::strerror(errno)));
  // Connected: the kernel drops datagrams from any other address.
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    const int error = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("heartbeat datagrams to ", head_peer, " port ", port, ": ",
                                               std::strerror(error)));
  }
  return std::unique_ptr<BeatSender>(new BeatSender(fd, std::move(key), std::move(node_id), incarnation));
}

BeatSender::BeatSender(int fd, std::string key, std::string node_id, uint64_t incarnation)
    : fd_(fd), mac_(key), node_id_(std::move(node_id)), incarnation_(incarnation) {}

BeatSender::~BeatSender() { close(fd_); }

void BeatSender::Send() {
  rpc::BeatDatagram beat;
  beat.kind = rpc::BeatKind::kBeat;
  beat.incarnation = incarnation_;
  beat.sequence = ++sequence_;
  beat.node_id = node_id_;
  const std::string bytes = mac_.Encode(beat);
  (void)send(fd_, bytes.data(), bytes.size(), MSG_DONTWAIT);
}

std::optional<rpc::BeatAction> BeatSender::Poll() {
  std::optional<rpc::BeatAction> said;
  std::array<char, rpc::kMaxBeatDatagramBytes + 1> buffer{};
  while (true) {
    const ssize_t got = recv(fd_, buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (got < 0) {
      if (errno == ECONNREFUSED) continue;  // an earlier datagram was refused (reported once); read on
      break;                                // EAGAIN: nothing more waiting
    }
    const std::string_view bytes(buffer.data(), static_cast<size_t>(got));
    auto answer = rpc::PeekBeat(bytes);
    if (!answer.ok() || answer->kind != rpc::BeatKind::kAnswer || answer->node_id != node_id_ ||
        answer->incarnation != incarnation_ || answer->sequence != sequence_ || !mac_.Signed(bytes)) {
      continue;
    }
    if (answer->action == rpc::BeatAction::kOk) {
      answered_ok_ = answer->sequence;
    } else {
      said = answer->action;
    }
  }
  return said;
}

}  // namespace torus::node
