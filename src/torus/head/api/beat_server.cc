#include "torus/head/api/beat_server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "spdlog/spdlog.h"
#include "torus/rpc/beat_datagram.h"

namespace torus::head {
namespace {

constexpr int kBatch = 64;

}  // namespace

absl::StatusOr<std::unique_ptr<BeatServer>> BeatServer::Bind(const std::string& host, int port, Liveness* liveness,
                                                            const NodeCallers* callers) {
  absl::string_view bare = host;
  if (absl::ConsumePrefix(&bare, "[")) absl::ConsumeSuffix(&bare, "]");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string node(bare);
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(node.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(absl::StrCat("heartbeat datagrams: cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  // Every address the host names (localhost: 127.0.0.1 and ::1, as gRPC listens on both), on one port: the first
  // bind chooses it when `port` is 0.
  std::vector<int> fds;
  int bound_port = port;
  std::string error;
  std::string skipped;  // an address this machine cannot serve (no IPv6): fine while another one is served
  for (addrinfo* a = found; a != nullptr && error.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      skipped = std::strerror(errno);
      continue;
    }
    const int one = 1;
    // With several addresses, an IPv6 one must not take the IPv4 port too; alone ("::") it serves both, as gRPC does.
    if (a->ai_family == AF_INET6 && (found->ai_next != nullptr)) {
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    }
    if (a->ai_family == AF_INET6) {
      reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_port = htons(static_cast<uint16_t>(bound_port));
    } else {
      reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_port = htons(static_cast<uint16_t>(bound_port));
    }
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
      const int bind_error = errno;
      close(fd);
      if (bind_error == EADDRNOTAVAIL || bind_error == EAFNOSUPPORT) {
        skipped = std::strerror(bind_error);
        continue;
      }
      error = std::strerror(bind_error);
      break;
    }
    // Room for bursts: 10,000 nodes beating at once is about a megabyte of datagrams (capped by net.core.rmem_max).
    int buffer = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
    sockaddr_storage bound{};
    socklen_t length = sizeof(bound);
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
    bound_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                             : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    fds.push_back(fd);
  }
  freeaddrinfo(found);
  if (error.empty() && fds.empty()) error = skipped.empty() ? "no address" : skipped;
  const int wake = error.empty() ? eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK) : -1;
  if (error.empty() && wake < 0) error = absl::StrCat("eventfd: ", std::strerror(errno));
  if (!error.empty()) {
    for (int fd : fds) close(fd);
    return absl::UnavailableError(absl::StrCat("heartbeat datagrams: cannot bind UDP ", host, ":", port, ": ", error));
  }
  return std::unique_ptr<BeatServer>(new BeatServer(std::move(fds), wake, bound_port, liveness, callers));
}

BeatServer::BeatServer(std::vector<int> fds, int wake_fd, int port, Liveness* liveness, const NodeCallers* callers)
    : fds_(std::move(fds)), wake_fd_(wake_fd), port_(port), liveness_(liveness), callers_(callers) {}

BeatServer::~BeatServer() {
  Stop();
  for (int fd : fds_) close(fd);
  close(wake_fd_);
}

std::string BeatServer::Issue(const std::string& node_id, uint64_t incarnation) {
  std::string key = rpc::NewBeatKey();
  auto mac = std::make_unique<rpc::BeatMac>(key);
  absl::MutexLock lock(&mu_);
  keys_[node_id] = Key{.mac = std::move(mac), .incarnation = incarnation, .last_sequence = 0};
  return key;
}

void BeatServer::Forget(const std::string& node_id, uint64_t incarnation) {
  absl::MutexLock lock(&mu_);
  auto it = keys_.find(node_id);
  if (it != keys_.end() && it->second.incarnation == incarnation) keys_.erase(it);
}

void BeatServer::StreamOpened(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  ++streams_[node_id];
}

void BeatServer::StreamClosed(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(node_id);
  if (it != streams_.end() && --it->second <= 0) streams_.erase(it);
}

void BeatServer::Start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Serve(); });
}

void BeatServer::Stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) spdlog::warn("heartbeat datagrams: cannot wake the reader");
  thread_.join();
}

BeatServer::Counts BeatServer::counts() const {
  return Counts{.ok = ok_.load(), .reregister = reregister_.load(), .refused = refused_.load(),
                .dropped = dropped_.load()};
}

std::optional<std::string> BeatServer::Answer(std::string_view bytes) {
  auto beat = rpc::PeekBeat(bytes);
  if (!beat.ok() || beat->kind != rpc::BeatKind::kBeat) {
    ++dropped_;
    return std::nullopt;
  }
  rpc::BeatDatagram answer = *std::move(beat);
  answer.kind = rpc::BeatKind::kAnswer;
  // The node's keyed MAC is used and replaced under the lock (Issue runs on gRPC's threads). Lock order: this
  // server's, then NodeCallers' and Liveness's.
  absl::MutexLock lock(&mu_);
  auto it = keys_.find(answer.node_id);
  if (it == keys_.end() || it->second.incarnation != answer.incarnation || !streams_.contains(answer.node_id) ||
      answer.sequence <= it->second.last_sequence || !it->second.mac->Signed(bytes)) {
    ++dropped_;
    return std::nullopt;
  }
  it->second.last_sequence = answer.sequence;
  if (!callers_->MaySpeakFor(answer.node_id, answer.node_id).ok()) {
    answer.action = rpc::BeatAction::kRefused;
    ++refused_;
  } else if (liveness_->Heartbeat(NodeId(answer.node_id), answer.incarnation, nullptr) == Liveness::Beat::kOk) {
    answer.action = rpc::BeatAction::kOk;
    ++ok_;
  } else {
    answer.action = rpc::BeatAction::kReregister;
    ++reregister_;
  }
  return it->second.mac->Encode(answer);
}

void BeatServer::Serve() {
  std::vector<pollfd> waits;
  for (int fd : fds_) waits.push_back({.fd = fd, .events = POLLIN, .revents = 0});
  waits.push_back({.fd = wake_fd_, .events = POLLIN, .revents = 0});
  while (!stopping_) {
    if (poll(waits.data(), waits.size(), -1) < 0 && errno != EINTR) {
      spdlog::error("heartbeat datagrams: poll: {}; agents heartbeat on their streams from now on",
                    std::strerror(errno));
      return;
    }
    for (size_t i = 0; i + 1 < waits.size(); ++i) {
      if (waits[i].revents != 0) Drain(waits[i].fd);
    }
  }
}

void BeatServer::Drain(int fd) {
  // One batch of datagrams in, one of answers out, until the socket is empty (or Stop).
  std::array<std::array<char, rpc::kMaxBeatDatagramBytes + 1>, kBatch> in{};
  std::array<sockaddr_storage, kBatch> from{};
  std::array<iovec, kBatch> in_io{};
  std::array<mmsghdr, kBatch> in_msgs{};
  std::array<std::string, kBatch> answers;
  std::array<iovec, kBatch> out_io{};
  std::array<mmsghdr, kBatch> out_msgs{};
  while (!stopping_) {
    for (int i = 0; i < kBatch; ++i) {
      in_io[i] = {.iov_base = in[i].data(), .iov_len = in[i].size()};
      in_msgs[i].msg_hdr = msghdr{};
      in_msgs[i].msg_hdr.msg_iov = &in_io[i];
      in_msgs[i].msg_hdr.msg_iovlen = 1;
      in_msgs[i].msg_hdr.msg_name = &from[i];
      in_msgs[i].msg_hdr.msg_namelen = sizeof(from[i]);
    }
    const int got = recvmmsg(fd, in_msgs.data(), kBatch, MSG_DONTWAIT, nullptr);
    if (got <= 0) return;  // EAGAIN: drained (other errors: an ICMP report of an earlier answer; poll again)
    int answered = 0;
    for (int i = 0; i < got; ++i) {
      std::optional<std::string> answer = Answer(std::string_view(in[i].data(), in_msgs[i].msg_len));
      if (!answer) continue;
      answers[answered] = *std::move(answer);
      out_io[answered] = {.iov_base = answers[answered].data(), .iov_len = answers[answered].size()};
      out_msgs[answered].msg_hdr = msghdr{};
      out_msgs[answered].msg_hdr.msg_iov = &out_io[answered];
      out_msgs[answered].msg_hdr.msg_iovlen = 1;
      out_msgs[answered].msg_hdr.msg_name = &from[i];
      out_msgs[answered].msg_hdr.msg_namelen = in_msgs[i].msg_hdr.msg_namelen;
      ++answered;
    }
    // An answer that cannot be sent now (a full buffer) is not retried: the node's next beat goes on its stream.
    for (int sent = 0; sent < answered;) {
      const int n = sendmmsg(fd, out_msgs.data() + sent, answered - sent, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      sent += n > 0 ? n : 1;  // an answer its address refuses is skipped
    }
    if (got < kBatch) return;
  }
}

}  // namespace torus::head
