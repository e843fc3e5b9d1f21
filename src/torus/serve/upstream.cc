#include "torus/serve/upstream.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace torus::serve {
namespace {

constexpr size_t kMaxIdlePerKey = 256;
constexpr int64_t kResolveTtlMs = 30'000;

}  // namespace

Upstream::Upstream(UpstreamPool* pool, std::string host, int port, std::vector<Address> addresses)
    : pool_(pool),
      host_(std::move(host)),
      port_(port),
      key_(absl::StrCat(host_, ":", port_)),
      addresses_(std::move(addresses)) {}

absl::Status Upstream::ConnectNext() {
  std::string error = absl::StrCat("cannot connect to ", key_, ": no address");
  while (next_ < addresses_.size()) {
    const Address& a = addresses_[next_++];
    const int fd = ::socket(a.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      error = absl::StrCat("cannot connect to ", key_, ": ", std::strerror(errno));
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&a.addr), a.len);
    if (rc != 0 && errno != EINPROGRESS) {
      error = absl::StrCat("cannot connect to ", key_, ": ", std::strerror(errno));
      ::close(fd);
      continue;
    }
    socket_.Reset(fd, rc == 0);
    connecting_ = rc != 0;
    if (!pool_->loop_->Add(fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, this)) {
      error = absl::StrCat("cannot connect to ", key_, ": epoll: ", std::strerror(errno));
      socket_.Close();
      continue;
    }
    return absl::OkStatus();
  }
  return absl::UnavailableError(error);
}

absl::StatusOr<bool> Upstream::ContinueConnect() {
  if (!connecting_) return true;
  int err = 0;
  socklen_t len = sizeof(err);
  if (::getsockopt(socket_.fd(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err == 0) {
    if (!socket_.writable()) return false;
    connecting_ = false;
    return true;
  }
  const std::string error = absl::StrCat("cannot connect to ", key_, ": ", std::strerror(err));
  if (next_ >= addresses_.size()) {
    socket_.Close();
    return absl::UnavailableError(error);
  }
  absl::Status next = ConnectNext();
  if (!next.ok()) return next;
  if (!connecting_) return true;
  return false;
}

void Upstream::OnEvents(uint32_t events) {
  if (!socket_.open()) return;
  socket_.OnEvents(events);
  if (user_ != nullptr) {
    user_->OnUpstreamEvents();
  } else {
    pool_->OnIdleEvent(this);
  }
}

UpstreamPool::~UpstreamPool() { Clear(); }

std::unique_ptr<Upstream> UpstreamPool::Take(const std::string& key) {
  auto it = idle_.find(key);
  if (it == idle_.end() || it->second.empty()) return nullptr;
  std::unique_ptr<Upstream> up = std::move(it->second.back());
  it->second.pop_back();
  return up;
}

absl::StatusOr<std::unique_ptr<Upstream>> UpstreamPool::Connect(const std::string& host, int port) {
  absl::StatusOr<std::vector<Upstream::Address>> addresses = Resolve(host, port);
  if (!addresses.ok()) return addresses.status();
  std::unique_ptr<Upstream> up(new Upstream(this, host, port, *std::move(addresses)));
  if (absl::Status s = up->ConnectNext(); !s.ok()) return s;
  return up;
}

void UpstreamPool::Put(std::unique_ptr<Upstream> up) {
  up->set_user(nullptr);
  up->in().clear();
  std::vector<std::unique_ptr<Upstream>>& idle = idle_[up->key()];
  if (up->socket().peer_closed() || idle.size() >= kMaxIdlePerKey) {
    Close(std::move(up));
    return;
  }
  idle.push_back(std::move(up));
}

void UpstreamPool::Close(std::unique_ptr<Upstream> up) {
  if (up == nullptr) return;
  up->set_user(nullptr);
  up->socket().Close();
  loop_->DeleteLater(std::move(up));
}

void UpstreamPool::Clear() {
  for (auto& [key, idle] : idle_) {
    for (std::unique_ptr<Upstream>& up : idle) Close(std::move(up));
  }
  idle_.clear();
}

void UpstreamPool::OnIdleEvent(Upstream* up) {
  if (!up->socket().readable()) return;  // room to write: nothing to do
  if (!up->socket().peer_closed()) {
    // Bytes, or an event for bytes read already: only the former makes the connection useless.
    char byte;
    if (up->socket().Read(&byte, 1) == EdgeSocket::kWouldBlock) return;
  }
  auto it = idle_.find(up->key());
  if (it == idle_.end()) return;
  auto pos = std::find_if(it->second.begin(), it->second.end(),
                          [&](const std::unique_ptr<Upstream>& p) { return p.get() == up; });
  if (pos == it->second.end()) return;
  std::unique_ptr<Upstream> gone = std::move(*pos);
  it->second.erase(pos);
  Close(std::move(gone));
}

absl::StatusOr<std::vector<Upstream::Address>> UpstreamPool::Resolve(const std::string& host, int port) {
  const std::string key = absl::StrCat(host, ":", port);
  const int64_t now = SteadyNowMs();
  auto cached = resolved_.find(key);
  if (cached != resolved_.end() && cached->second.expires_ms > now) return cached->second.addresses;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_NUMERICHOST;  // an address: no lookup
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc == EAI_NONAME) {
    hints.ai_flags = AI_NUMERICSERV;
    rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  }
  if (rc != 0) return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  std::vector<Upstream::Address> out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    Upstream::Address addr;
    std::memcpy(&addr.addr, a->ai_addr, std::min<size_t>(a->ai_addrlen, sizeof(addr.addr)));
    addr.len = a->ai_addrlen;
    out.push_back(addr);
  }
  ::freeaddrinfo(res);
  resolved_[key] = {out, now + kResolveTtlMs};
  return out;
}

}  // namespace torus::serve
