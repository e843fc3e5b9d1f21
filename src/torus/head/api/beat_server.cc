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
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
      last_error = std::strerror(errno);
      close(fd);
      continue;
    }
    freeaddrinfo(found);
    // Room for bursts: 10,000 nodes beating at once is about a megabyte of datagrams.
    int buffer = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
    sockaddr_storage bound{};
    socklen_t length = sizeof(bound);
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
    const int bound_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                                       : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake < 0) {
      close(fd);
      return absl::UnavailableError(absl::StrCat("heartbeat datagrams: eventfd: ", std::strerror(errno)));
    }
    return std::unique_ptr<BeatServer>(new BeatServer(fd, wake, bound_port, liveness, callers));
  }
  freeaddrinfo(found);
  return absl::UnavailableError(
      absl::StrCat("heartbeat datagrams: cannot bind UDP ", host, ":", port, ": ", last_error));
}

BeatServer::BeatServer(int fd, int wake_fd, int port, Liveness* liveness, const NodeCallers* callers)
    : fd_(fd), wake_fd_(wake_fd), port_(port), liveness_(liveness), callers_(callers) {}

BeatServer::~BeatServer() {
  Stop();
  close(fd_);
  close(wake_fd_);
}

std::string BeatServer::Issue(const std::string& node_id, uint64_t incarnation) {
  std::string key = rpc::NewBeatKey();
  auto mac = std::make_unique<rpc::BeatMac>(key);
  absl::MutexLock lock(&mu_);
  keys_[node_id] = Key{.mac = std::move(mac), .incarnation = incarnation, .last_sequence = 0};
  return key;
}

void BeatServer::Forget(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  keys_.erase(node_id);
}

void BeatServer::Start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Serve(); });
}

void BeatServer::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) spdlog::warn("heartbeat datagrams: cannot wake the reader");
  thread_.join();
}

BeatServer::Counts BeatServer::counts() const {
  return Counts{.applied = applied_.load(), .refused = refused_.load(), .dropped = dropped_.load()};
}

rpc::BeatAction BeatServer::Take(const std::string& node_id, uint64_t incarnation) {
  if (!callers_->MaySpeakFor(node_id, node_id).ok()) {
    ++refused_;
    return rpc::BeatAction::kRefused;
  }
  ++applied_;
  return liveness_->Heartbeat(NodeId(node_id), incarnation, nullptr) == Liveness::Beat::kOk
             ? rpc::BeatAction::kOk
             : rpc::BeatAction::kReregister;
}

void BeatServer::Serve() {
  // One batch of datagrams in, one of answers out.
  std::array<std::array<char, rpc::kMaxBeatDatagramBytes + 1>, kBatch> in{};
  std::array<sockaddr_storage, kBatch> from{};
  std::array<iovec, kBatch> in_io{};
  std::array<mmsghdr, kBatch> in_msgs{};
  std::vector<std::string> answers(kBatch);
  std::array<iovec, kBatch> out_io{};
  std::array<mmsghdr, kBatch> out_msgs{};
  pollfd waits[2] = {{.fd = fd_, .events = POLLIN, .revents = 0}, {.fd = wake_fd_, .events = POLLIN, .revents = 0}};
  while (true) {
    if (poll(waits, 2, -1) < 0 && errno != EINTR) {
      spdlog::error("heartbeat datagrams: poll: {}", std::strerror(errno));
      return;
    }
    if (waits[1].revents != 0) return;
    while (true) {
      for (int i = 0; i < kBatch; ++i) {
        in_io[i] = {.iov_base = in[i].data(), .iov_len = in[i].size()};
        in_msgs[i].msg_hdr = msghdr{};
        in_msgs[i].msg_hdr.msg_iov = &in_io[i];
        in_msgs[i].msg_hdr.msg_iovlen = 1;
        in_msgs[i].msg_hdr.msg_name = &from[i];
        in_msgs[i].msg_hdr.msg_namelen = sizeof(from[i]);
      }
      const int got = recvmmsg(fd_, in_msgs.data(), kBatch, MSG_DONTWAIT, nullptr);
      if (got <= 0) break;  // EAGAIN: drained (other errors: an ICMP report of an earlier answer; poll again)
      int answered = 0;
      for (int i = 0; i < got; ++i) {
        const std::string_view bytes(in[i].data(), in_msgs[i].msg_len);
        auto beat = rpc::PeekBeat(bytes);
        if (!beat.ok() || beat->kind != rpc::BeatKind::kBeat) {
          ++dropped_;
          continue;
        }
        rpc::BeatDatagram answer = *std::move(beat);
        answer.kind = rpc::BeatKind::kAnswer;
        {
          // The node's keyed MAC is used and replaced under the lock (Issue runs on gRPC's threads).
          absl::MutexLock lock(&mu_);
          auto it = keys_.find(answer.node_id);
          if (it == keys_.end() || it->second.incarnation != answer.incarnation ||
              answer.sequence <= it->second.last_sequence || !it->second.mac->Signed(bytes)) {
            ++dropped_;
            continue;
          }
          it->second.last_sequence = answer.sequence;
          answer.action = Take(answer.node_id, answer.incarnation);
          answers[answered] = it->second.mac->Encode(answer);
        }
        out_io[answered] = {.iov_base = answers[answered].data(), .iov_len = answers[answered].size()};
        out_msgs[answered].msg_hdr = msghdr{};
        out_msgs[answered].msg_hdr.msg_iov = &out_io[answered];
        out_msgs[answered].msg_hdr.msg_iovlen = 1;
        out_msgs[answered].msg_hdr.msg_name = &from[i];
        out_msgs[answered].msg_hdr.msg_namelen = in_msgs[i].msg_hdr.msg_namelen;
        ++answered;
      }
      // An answer that cannot be sent now (a full buffer) is not retried: the node's next beat gets one.
      for (int sent = 0; sent < answered;) {
        const int n = sendmmsg(fd_, out_msgs.data() + sent, answered - sent, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        sent += n > 0 ? n : 1;  // an answer its address refuses is skipped
      }
      if (got < kBatch) break;
    }
  }
}

}  // namespace torus::head
