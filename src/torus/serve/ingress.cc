#include "torus/serve/ingress.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "torus/serve/http_message.h"

namespace torus::serve {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

enum class Io { kOk, kEof, kTimeout, kError };

// Waits until `fd` is readable (or writable) or `deadline_ms` passes.
Io WaitFd(int fd, short events, int64_t deadline_ms) {
  while (true) {
    const int64_t left = deadline_ms - NowMs();
    if (left <= 0) return Io::kTimeout;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1'000'000)));
    if (n > 0) return Io::kOk;
    if (n == 0) return Io::kTimeout;
    if (errno != EINTR) return Io::kError;
  }
}

// Waits for bytes and reads what is there (at most 64 KiB) onto `buf`. Waiting first: the bytes asked for are the
// peer's next answer or request, which has seldom arrived yet (two system calls rather than three).
Io ReadSome(int fd, std::string* buf, int64_t deadline_ms) {
  char chunk[65536];
  if (Io w = WaitFd(fd, POLLIN, deadline_ms); w != Io::kOk) return w;
  while (true) {
    const ssize_t n = ::recv(fd, chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n > 0) {
      buf->append(chunk, static_cast<size_t>(n));
      return Io::kOk;
    }
    if (n == 0) return Io::kEof;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Io::kError;
    if (Io w = WaitFd(fd, POLLIN, deadline_ms); w != Io::kOk) return w;
  }
}

Io WriteAll(int fd, absl::string_view data, int64_t deadline_ms) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Io w = WaitFd(fd, POLLOUT, deadline_ms); w != Io::kOk) return w;
      continue;
    }
    return Io::kError;
  }
  return Io::kOk;
}

void NoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string ErrorBody(const std::string& message) {
  return nlohmann::json{{"error", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool HopByHop(absl::string_view name) {
  for (const char* h : {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade",
                        "expect", "content-length", "trailer"}) {
    if (absl::EqualsIgnoreCase(name, h)) return true;
  }
  return false;
}

// Connects to host:port within the deadline; -1 with `error` set on failure.
int Connect(const std::string& host, int port, int64_t deadline_ms, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    *error = absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      *error = absl::StrCat("cannot connect to ", host, ":", port, ": ", std::strerror(errno));
      ::close(fd);
      fd = -1;
      continue;
    }
    if (WaitFd(fd, POLLOUT, deadline_ms) != Io::kOk) {
      *error = absl::StrCat("cannot connect to ", host, ":", port, ": timed out");
      ::close(fd);
      fd = -1;
      continue;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      *error = absl::StrCat("cannot connect to ", host, ":", port, ": ", std::strerror(err));
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd >= 0) NoDelay(fd);
  return fd;
}

}  // namespace

// Idle kept-alive connections to replicas, by "host:port".
class Ingress::Pool {
 public:
  ~Pool() {
    for (auto& [key, fds] : idle_) {
      for (int fd : fds) ::close(fd);
    }
  }
  // An idle connection, or -1. The replica may have closed it meanwhile: a request on it then fails before any byte
  // of an answer, and is sent again on a fresh connection.
  int Take(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = idle_.find(key);
    if (it == idle_.end() || it->second.empty()) return -1;
    const int fd = it->second.back();
    it->second.pop_back();
    return fd;
  }
  void Put(const std::string& key, int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int>& fds = idle_[key];
    if (fds.size() >= 256) {
      ::close(fd);
      return;
    }
    fds.push_back(fd);
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::vector<int>> idle_;
};

Ingress::Ingress(RouteTable* routes, Options options)
    : routes_(routes), options_(std::move(options)), pool_(std::make_unique<Pool>()) {}

Ingress::~Ingress() { Stop(); }

absl::StatusOr<int> Ingress::Start() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(options_.port);
  if (int rc = ::getaddrinfo(options_.host.c_str(), service.c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("serve host ", options_.host, ": ", gai_strerror(rc)));
  }
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || ::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    const std::string error = std::strerror(errno);
    ::freeaddrinfo(res);
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.host, ":", options_.port, ": ", error));
  }
  ::freeaddrinfo(res);
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                                    : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  listen_fd_ = fd;
  accept_thread_ = std::thread([this] { Accept(); });
  return port;
}

void Ingress::Stop() {
  if (stopping_.exchange(true)) return;
  if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
  std::unique_lock<std::mutex> lock(mu_);
  for (int fd : clients_) ::shutdown(fd, SHUT_RDWR);
  done_.wait(lock, [this] { return threads_ == 0; });
}

void Ingress::Accept() {
  while (!stopping_) {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (stopping_) return;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      return;
    }
    char host[INET6_ADDRSTRLEN] = "";
    if (addr.ss_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, host, sizeof(host));
    } else if (addr.ss_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr, host, sizeof(host));
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || threads_ >= options_.max_connections) {
      ::close(fd);
      continue;
    }
    NoDelay(fd);
    clients_.insert(fd);
    ++threads_;
    std::thread([this, fd, peer = std::string(host)] {
      Serve(fd, peer);
      std::lock_guard<std::mutex> lock(mu_);
      clients_.erase(fd);
      ::close(fd);
      --threads_;
      done_.notify_all();
    }).detach();
  }
}

namespace {

// One request as read from the client.
struct ClientRequest {
  HttpHead head;
  std::string body;
};

// What happened to one try at a replica.
struct Exchange {
  bool answered = false;       // a response head reached the client
  bool close_client = false;   // the client connection must close afterwards
  std::string error;           // why it failed before a response head (retryable)
  bool timed_out = false;
  int status = 0;
};

}  // namespace

void Ingress::Serve(int fd, std::string peer) {
  std::string buf;  // bytes read from the client, not used yet
  while (!stopping_) {
    // The head: idle_timeout for its first byte, header_timeout for the rest.
    int64_t deadline = NowMs() + options_.idle_timeout_ms;
    std::optional<size_t> end;
    bool started = !buf.empty();
    while (!(end = FindHeadEnd(buf))) {
      if (buf.size() > kMaxHeadBytes) {
        WriteAll(fd, SimpleResponse(431, "application/json", ErrorBody("request head is larger than 64 KiB"), {}, true),
                 NowMs() + 5000);
        return;
      }
      if (started) deadline = std::min(deadline, NowMs() + options_.header_timeout_ms);
      Io io = ReadSome(fd, &buf, deadline);
      if (io == Io::kTimeout && started) {
        WriteAll(fd, SimpleResponse(408, "application/json", ErrorBody("the request head did not arrive in time"), {}, true),
                 NowMs() + 5000);
        return;
      }
      if (io != Io::kOk) return;
      started = true;
    }
    const auto start_time = std::chrono::steady_clock::now();
    auto fail = [&](int status, const std::string& message, const std::string& service = "") {
      WriteAll(fd, SimpleResponse(status, "application/json", ErrorBody(message), {}, true), NowMs() + 5000);
      if (!service.empty()) {
        routes_->Record(service, status,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count(), false);
      }
    };
    auto head = ParseRequestHead(absl::string_view(buf).substr(0, *end));
    if (!head.ok()) {
      fail(400, absl::StrCat("bad request: ", head.status().message()));
      return;
    }
    buf.erase(0, *end);
    ClientRequest req{*std::move(head), ""};
    auto framing = RequestFraming(req.head);
    if (!framing.ok()) {
      fail(400, absl::StrCat("bad request: ", framing.status().message()));
      return;
    }
    const std::string path = req.head.target.substr(0, req.head.target.find('?'));
    std::optional<ServiceRoute> route = routes_->Match(path);
    if (!route) {
      std::vector<std::string> prefixes = routes_->Prefixes();
      fail(404, prefixes.empty() ? absl::StrCat("no service serves ", path, "; none is deployed")
                                 : absl::StrCat("no service serves ", path, "; routes: ", absl::StrJoin(prefixes, ", ")));
      return;
    }
    const std::string& service = route->name;
    if (framing->kind == BodyFraming::Kind::kLength && framing->length > route->max_request_bytes) {
      fail(413, absl::StrCat("the request body (", framing->length, " bytes) is over ", service,
                             "'s max_request_bytes (", route->max_request_bytes, ")"),
           service);
      return;
    }
    if (auto expect = req.head.Get("expect"); expect && absl::EqualsIgnoreCase(*expect, "100-continue")) {
      if (WriteAll(fd, "HTTP/1.1 100 Continue\r\n\r\n", NowMs() + 5000) != Io::kOk) return;
    }
    // The body, whole (it may be sent again to another replica).
    const int64_t body_deadline = NowMs() + route->request_timeout_ms;
    if (framing->kind == BodyFraming::Kind::kLength) {
      while (static_cast<int64_t>(buf.size()) < framing->length) {
        if (ReadSome(fd, &buf, body_deadline) != Io::kOk) return;
      }
      req.body = buf.substr(0, static_cast<size_t>(framing->length));
      buf.erase(0, static_cast<size_t>(framing->length));
    } else if (framing->kind == BodyFraming::Kind::kChunked) {
      ChunkedReader chunks;
      while (true) {
        auto used = chunks.Feed(buf, &req.body);
        if (!used.ok()) {
          fail(400, absl::StrCat("bad request: ", used.status().message()), service);
          return;
        }
        buf.erase(0, *used);
        if (static_cast<int64_t>(req.body.size()) > route->max_request_bytes) {
          fail(413, absl::StrCat("the request body is over ", service, "'s max_request_bytes (",
                                 route->max_request_bytes, ")"),
               service);
          return;
        }
        if (chunks.done()) break;
        if (ReadSome(fd, &buf, body_deadline) != Io::kOk) return;
      }
    }
    const bool client_keep_alive = req.head.KeepAlive();

    // The request as the replica gets it: the prefix removed, hop-by-hop headers dropped, the body by length.
    std::string target = req.head.target;
    if (route->prefix != "/") {
      target = target.substr(route->prefix.size());
      if (target.empty() || target[0] != '/') target = "/" + target;
    }
    std::string upstream_head = absl::StrCat(req.head.method, " ", target, " HTTP/1.1\r\n");
    for (const auto& [name, value] : req.head.headers) {
      if (HopByHop(name) || absl::EqualsIgnoreCase(name, "x-forwarded-prefix")) continue;
      absl::StrAppend(&upstream_head, name, ": ", value, "\r\n");
    }
    if (!req.head.Get("host")) upstream_head += "Host: torus-ingress\r\n";
    absl::StrAppend(&upstream_head, "X-Forwarded-For: ", peer, "\r\n");
    if (route->prefix != "/") absl::StrAppend(&upstream_head, "X-Forwarded-Prefix: ", route->prefix, "\r\n");
    if (!req.body.empty() || req.head.method == "POST" || req.head.method == "PUT" || req.head.method == "PATCH") {
      absl::StrAppend(&upstream_head, "Content-Length: ", req.body.size(), "\r\n");
    }
    upstream_head += "\r\n";
    const std::string request_bytes = upstream_head + req.body;

    const int64_t deadline_ms = NowMs() + route->request_timeout_ms;
    std::set<std::string> tried;
    std::string last_error;
    bool retried = false;
    Exchange ex;
    while (!ex.answered) {
      RouteTable::Pick pick = routes_->Acquire(service, tried, std::min(deadline_ms, NowMs() + route->queue_timeout_ms));
      if (pick.outcome != RouteTable::Outcome::kPicked) {
        switch (pick.outcome) {
          case RouteTable::Outcome::kGone:
            fail(503, absl::StrCat("service ", service, " was deleted"), service);
            break;
          case RouteTable::Outcome::kQueueFull:
            fail(503, absl::StrCat("service ", service, " has no READY replica and ", route->max_queued_requests,
                                   " requests already wait for one (max_queued_requests)"),
                 service);
            break;
          case RouteTable::Outcome::kTimedOut:
            fail(503, absl::StrCat("service ", service, " has no READY replica; waited ",
                                   route->queue_timeout_ms / 1000.0, " s (queue_timeout_s)"),
                 service);
            break;
          case RouteTable::Outcome::kExhausted:
            fail(502, absl::StrCat("every READY replica of ", service, " failed before answering; last: ", last_error),
                 service);
            break;
          default:
            fail(503, "the ingress is stopping", service);
        }
        return;
      }
      const ReplicaEndpoint rep = pick.replica;
      const std::string key = absl::StrCat(rep.host, ":", rep.port);
      // A kept-alive connection the replica closed meanwhile fails at once: then one fresh connection is tried.
      for (int fresh = 0; fresh < 2 && !ex.answered; ++fresh) {
        int up = fresh == 0 ? pool_->Take(key) : -1;
        const bool reused = up >= 0;
        if (up < 0) {
          fresh = 1;
          up = Connect(rep.host, rep.port, std::min(deadline_ms, NowMs() + options_.connect_timeout_ms), &ex.error);
          if (up < 0) break;
        }
        ex.error.clear();
        std::string rbuf;
        std::optional<size_t> rend;
        absl::StatusOr<HttpHead> rhead;
        size_t head_end = 0;
        Io io = WriteAll(up, request_bytes, deadline_ms);
        while (true) {
          while (io == Io::kOk && !(rend = FindHeadEnd(rbuf))) {
            if (rbuf.size() > kMaxHeadBytes) {
              io = Io::kError;
              break;
            }
            io = ReadSome(up, &rbuf, deadline_ms);
          }
          if (!rend) break;
          head_end = *rend;
          rhead = ParseResponseHead(absl::string_view(rbuf).substr(0, head_end));
          // Interim answers (100 Continue, 102 Processing, 103 Early Hints) come before the answer: drop them.
          if (!rhead.ok() || rhead->status >= 200 || rhead->status == 101) break;
          rbuf.erase(0, head_end);  // io is kOk here: the loop above reads the next head
        }
        if (!rend) {
          ::close(up);
          if (io == Io::kTimeout) {
            ex.timed_out = true;
            ex.error = absl::StrCat("replica ", rep.id, " did not answer within request_timeout_s");
            break;
          }
          ex.error = absl::StrCat("replica ", rep.id, " at ", key,
                                  io == Io::kEof ? " closed the connection" : " failed", " before answering");
          if (reused && rbuf.empty()) continue;  // a stale kept-alive connection: try a fresh one
          break;
        }
        absl::StatusOr<BodyFraming> rframing =
            rhead.ok() ? ResponseFraming(*rhead, req.head.method) : absl::StatusOr<BodyFraming>(rhead.status());
        if (!rframing.ok()) {
          ::close(up);
          ex.error = absl::StrCat("replica ", rep.id, " sent a malformed answer: ", rframing.status().message());
          break;
        }
        // The answer head, as the replica sent it but for the connection headers.
        ex.answered = true;
        ex.status = rhead->status;
        const bool until_close = rframing->kind == BodyFraming::Kind::kUntilClose;
        ex.close_client = !client_keep_alive || until_close;
        std::string out = absl::StrCat("HTTP/1.1 ", rhead->status, " ", rhead->reason, "\r\n");
        for (const auto& [name, value] : rhead->headers) {
          if (absl::EqualsIgnoreCase(name, "connection") || absl::EqualsIgnoreCase(name, "keep-alive")) continue;
          absl::StrAppend(&out, name, ": ", value, "\r\n");
        }
        if (ex.close_client) out += "Connection: close\r\n";
        out += "\r\n";
        std::string body = rbuf.substr(head_end);
        bool upstream_ok = true;
        bool client_ok = WriteAll(fd, out, deadline_ms) == Io::kOk;
        // The body, relayed as it arrives.
        if (rframing->kind == BodyFraming::Kind::kLength) {
          int64_t left = rframing->length;
          while (client_ok && upstream_ok) {
            const size_t n = std::min<size_t>(body.size(), static_cast<size_t>(left));
            client_ok = n == 0 || WriteAll(fd, absl::string_view(body).substr(0, n), deadline_ms) == Io::kOk;
            left -= static_cast<int64_t>(n);
            if (n < body.size()) upstream_ok = false;  // more than it announced
            body.clear();
            if (left == 0) break;
            upstream_ok = upstream_ok && ReadSome(up, &body, deadline_ms) == Io::kOk;
          }
        } else if (rframing->kind == BodyFraming::Kind::kChunked) {
          ChunkedReader chunks;
          while (client_ok && upstream_ok) {
            auto used = chunks.Feed(body, nullptr);
            if (!used.ok()) {
              upstream_ok = false;
              break;
            }
            client_ok = *used == 0 || WriteAll(fd, absl::string_view(body).substr(0, *used), deadline_ms) == Io::kOk;
            if (*used < body.size()) upstream_ok = false;  // bytes after the end
            body.clear();
            if (chunks.done()) break;
            upstream_ok = upstream_ok && ReadSome(up, &body, deadline_ms) == Io::kOk;
          }
        } else if (rframing->kind == BodyFraming::Kind::kNone) {
          if (!body.empty() || rhead->status == 101) upstream_ok = false;  // more than the answer: not reusable
        } else if (until_close) {
          while (client_ok) {
            client_ok = body.empty() || WriteAll(fd, body, deadline_ms) == Io::kOk;
            body.clear();
            if (ReadSome(up, &body, deadline_ms) != Io::kOk) break;
          }
          upstream_ok = false;
        }
        if (upstream_ok && client_ok && rhead->KeepAlive()) {
          pool_->Put(key, up);
        } else {
          ::close(up);
        }
        if (!upstream_ok || !client_ok) ex.close_client = true;
      }
      if (ex.answered) {
        routes_->Finish(service, rep.id, ex.status,
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count(), retried);
        break;
      }
      routes_->Release(service, rep.id);
      if (ex.timed_out) {
        fail(504, ex.error, service);
        return;
      }
      last_error = ex.error;
      tried.insert(rep.id);
      retried = true;
      spdlog::debug("ingress: {} {} to {}: {}; trying another replica", req.head.method, path, rep.id, ex.error);
    }
    if (ex.close_client) return;
  }
}

}  // namespace torus::serve
