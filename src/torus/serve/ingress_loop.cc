#include "torus/serve/ingress_loop.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace torus::serve {

class IngressLoop::Acceptor final : public EventLoop::Handler {
 public:
  explicit Acceptor(IngressLoop* loop) : loop_(loop) {}
  void OnEvents(uint32_t) override { loop_->Accept(); }

 private:
  IngressLoop* const loop_;
};

absl::StatusOr<std::unique_ptr<IngressLoop>> IngressLoop::Create(RouteTable* routes, const Ingress::Options* options,
                                                                 std::atomic<int>* connections) {
  absl::StatusOr<std::unique_ptr<EventLoop>> loop = EventLoop::Create();
  if (!loop.ok()) return loop.status();
  return std::unique_ptr<IngressLoop>(new IngressLoop(routes, options, connections, *std::move(loop)));
}

IngressLoop::IngressLoop(RouteTable* routes, const Ingress::Options* options, std::atomic<int>* connections,
                         std::unique_ptr<EventLoop> loop)
    : options_(options),
      connections_(connections),
      loop_(std::move(loop)),
      scratch_(new char[ClientConn::kScratchBytes]),
      pool_(loop_.get()),
      accept_retry_(loop_.get(), [this] { Accept(); }) {
  context_.loop = loop_.get();
  context_.routes = routes;
  context_.options = options_;
  context_.pool = &pool_;
  context_.scratch = scratch_.get();
  context_.closed = [this](ClientConn* conn) { OnClosed(conn); };
}

IngressLoop::~IngressLoop() {
  CloseAll();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

absl::Status IngressLoop::Listen(int listen_fd, std::vector<IngressLoop*> loops) {
  listen_fd_ = listen_fd;
  loops_ = std::move(loops);
  acceptor_ = std::make_unique<Acceptor>(this);
  if (!loop_->Add(listen_fd_, EPOLLIN | EPOLLET, acceptor_.get())) {
    return absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void IngressLoop::Run() { loop_->Run(); }

void IngressLoop::Adopt(int fd, std::string peer) {
  loop_->Post([this, fd, peer = std::move(peer)]() mutable { AddClient(fd, std::move(peer)); });
}

void IngressLoop::OnRoutesChanged() {
  if (routes_changed_.exchange(true)) return;  // one wake-up serves every change made before it runs
  loop_->Post([this] {
    routes_changed_ = false;
    std::vector<ClientConn*> conns;
    conns.reserve(conns_.size());
    for (const auto& [conn, owned] : conns_) conns.push_back(conn);
    for (ClientConn* conn : conns) conn->OnRoutesChanged();  // may close some: deleted later
  });
}

void IngressLoop::Stop() {
  loop_->Post([this] {
    accept_retry_.Cancel();
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
    CloseAll();
    loop_->Quit();
  });
}

void IngressLoop::CloseAll() {
  std::vector<ClientConn*> conns;
  conns.reserve(conns_.size());
  for (const auto& [conn, owned] : conns_) conns.push_back(conn);
  for (ClientConn* conn : conns) conn->Close();
  pool_.Clear();
}

void IngressLoop::Accept() {
  while (listen_fd_ >= 0) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of fds or memory (or worse): try again a little later; the listening socket gives no new event.
      if (errno != EMFILE && errno != ENFILE && errno != ENOBUFS && errno != ENOMEM) {
        spdlog::warn("ingress: accept: {}", std::strerror(errno));
      }
      accept_retry_.Set(SteadyNowMs() + 10);
      return;
    }
    if (connections_->load() >= options_->max_connections) {
      ::close(fd);
      continue;
    }
    connections_->fetch_add(1);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char host[INET6_ADDRSTRLEN] = "";
    if (addr.ss_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, host, sizeof(host));
    } else if (addr.ss_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, host, sizeof(host));
    }
    IngressLoop* to = loops_[next_loop_++ % loops_.size()];
    if (to == this) {
      AddClient(fd, host);
    } else {
      to->Adopt(fd, host);
    }
  }
}

void IngressLoop::AddClient(int fd, std::string peer) {
  auto conn = std::make_unique<ClientConn>(&context_, fd, std::move(peer));
  ClientConn* raw = conn.get();
  conns_.emplace(raw, std::move(conn));
  raw->Start();  // on failure it has closed (OnClosed)
}

void IngressLoop::OnClosed(ClientConn* conn) {
  connections_->fetch_sub(1);
  auto it = conns_.find(conn);
  if (it == conns_.end()) return;
  loop_->DeleteLater(std::move(it->second));
  conns_.erase(it);
}

}  // namespace torus::serve
