// What the ingress tests share: replicas (httplib, raw sockets, a refusing port), raw client helpers, and the
// fixture that starts an ingress in front of them. Everything runs on loopback, on ephemeral ports.
#pragma once

#include "torus/serve/ingress.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torus/serve/http_message.h"

namespace torus::serve {
namespace ingress_test {

// Polls `done` until it holds or 10 s pass.
inline bool WaitFor(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// What a backend received.
struct Received {
  std::string method;
  std::string path;
  std::string target;
  std::string body;
  httplib::Headers headers;
};

// A replica: an httplib server on a free loopback port. Every path echoes what it got ("<id> <method> <path>", the
// status from X-Status, header X-Replica); /slow waits for Release(); /stream sends an event, waits until the test
// says it saw it (Signal), then sends two more. Stopped on destruction.
class Backend {
 public:
  explicit Backend(std::string id) : id_(std::move(id)) {
    server_.Get("/slow", [this](const httplib::Request& req, httplib::Response& res) {
      Record(req);
      WaitFlag(&released_);
      res.set_content("late", "text/plain");
    });
    server_.Get("/stream", [this](const httplib::Request& req, httplib::Response& res) {
      Record(req);
      res.set_chunked_content_provider("text/event-stream", [this](size_t, httplib::DataSink& sink) {
        const std::string one = "data: one\n\n";
        sink.write(one.data(), one.size());
        stream_waited_ = WaitFlag(&first_seen_);
        const std::string two = "data: two\n\n";
        const std::string three = "data: three\n\n";
        sink.write(two.data(), two.size());
        sink.write(three.data(), three.size());
        sink.done();
        return true;
      });
    });
    auto echo = [this](const httplib::Request& req, httplib::Response& res) {
      Record(req);
      res.status = req.has_header("X-Status") ? std::stoi(req.get_header_value("X-Status")) : 200;
      res.set_header("X-Replica", id_);
      res.set_content(id_ + " " + req.method + " " + req.path + " " + std::to_string(req.body.size()), "text/plain");
    };
    server_.Get(".*", echo);
    server_.Post(".*", echo);
    server_.Put(".*", echo);
    server_.Delete(".*", echo);
    server_.set_keep_alive_timeout(1);  // stop() may wait this long for an idle kept-alive connection
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the loop runs would be lost, and the destructor would wait forever.
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Backend() {
    Release();
    Signal();
    server_.stop();
    thread_.join();
  }

  ReplicaEndpoint endpoint() const { return {id_, "127.0.0.1", port_}; }
  int port() const { return port_; }

  std::vector<Received> received() {
    absl::MutexLock lock(&mu_);
    return received_;
  }
  Received last() {
    absl::MutexLock lock(&mu_);
    return received_.empty() ? Received{} : received_.back();
  }
  // Lets /slow answer.
  void Release() { SetFlag(&released_); }
  // Tells /stream that its first event reached the client.
  void Signal() { SetFlag(&first_seen_); }
  // Whether /stream's wait for Signal ended by the signal (not by its 10 s limit).
  bool stream_waited() const { return stream_waited_; }

 private:
  void Record(const httplib::Request& req) {
    absl::MutexLock lock(&mu_);
    received_.push_back({req.method, req.path, req.target, req.body, req.headers});
  }
  void SetFlag(bool* flag) {
    absl::MutexLock lock(&mu_);
    *flag = true;
    cv_.SignalAll();
  }
  bool WaitFlag(bool* flag) {
    absl::MutexLock lock(&mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!*flag) {
      if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) return *flag;
    }
    return true;
  }

  const std::string id_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::vector<Received> received_ ABSL_GUARDED_BY(mu_);
  bool released_ ABSL_GUARDED_BY(mu_) = false;    // set and read through SetFlag and WaitFlag
  bool first_seen_ ABSL_GUARDED_BY(mu_) = false;  // likewise
  std::atomic<bool> stream_waited_{false};
};

// A loopback port with a socket bound to it that does not listen: connections to it are refused, and no other
// process can take the port while it is held.
class DownPort {
 public:
  DownPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~DownPort() { ::close(fd_); }
  ReplicaEndpoint endpoint(const std::string& id) const { return {id, "127.0.0.1", port_}; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A replica on raw sockets, for answers httplib does not send: the n-th request it gets (n from 1, over every
// connection) is answered with the pieces answer(n, head) gives, written one by one 50 ms apart; with
// `close_after_answer`, its side of the connection is then shut down. Requests must have no body. Stopped on
// destruction.
class RawBackend {
 public:
  using Answer = std::function<std::vector<std::string>(int, const std::string&)>;
  explicit RawBackend(Answer answer, bool close_after_answer = false)
      : answer_(std::move(answer)), close_after_answer_(close_after_answer) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(listen_fd_, 16);
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~RawBackend() {
    ::shutdown(listen_fd_, SHUT_RDWR);  // accept() fails at once
    accept_thread_.join();
    {
      absl::MutexLock lock(&mu_);
      for (int fd : conns_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : threads_) t.join();
    for (int fd : conns_) ::close(fd);
    ::close(listen_fd_);
  }
  ReplicaEndpoint endpoint(const std::string& id) const { return {id, "127.0.0.1", port_}; }

 private:
  void AcceptLoop() {
    while (true) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR) continue;
        return;
      }
      absl::MutexLock lock(&mu_);
      conns_.push_back(fd);
      threads_.emplace_back([this, fd] { ServeConnection(fd); });
    }
  }
  void ServeConnection(int fd) {
    std::string buf;
    char chunk[4096];
    while (true) {
      std::optional<size_t> end;
      while (!(end = FindHeadEnd(buf))) {
        const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
        if (n <= 0) return;
        buf.append(chunk, static_cast<size_t>(n));
      }
      const std::string head = buf.substr(0, *end);
      buf.erase(0, *end);
      const std::vector<std::string> pieces = answer_(++requests_, head);
      for (size_t i = 0; i < pieces.size(); ++i) {
        if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (::send(fd, pieces[i].data(), pieces[i].size(), MSG_NOSIGNAL) < 0) return;
      }
      if (close_after_answer_) {
        ::shutdown(fd, SHUT_WR);
        return;
      }
    }
  }

  const Answer answer_;
  const bool close_after_answer_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread accept_thread_;
  absl::Mutex mu_;
  std::vector<int> conns_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> requests_{0};
};

// A connection to the ingress (10 s receive timeout), or -1.
inline int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads until the peer closes (or the receive timeout passes).
inline std::string ReadToEnd(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

// The file descriptors this process has open.
inline int OpenFds() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    (void)entry;
    ++n;
  }
  return n;
}

// Sends `request` on a new connection and reads until the ingress closes it (or 10 s pass).
inline std::string RawExchange(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

class IngressTest : public ::testing::Test {
 protected:
  void TearDown() override {
    // The ingress first: it closes its kept-alive connections to the backends, so that they stop at once.
    ingress_.reset();
  }

  // Starts the ingress with one service, echo at /echo, on `ready`.
  void StartIngress(std::vector<ReplicaEndpoint> ready, const std::function<void(ServiceRoute&)>& edit = nullptr,
                    const std::function<void(Ingress::Options&)>& edit_options = nullptr) {
    ServiceRoute route;
    route.name = "echo";
    route.prefix = "/echo";
    route.ready = std::move(ready);
    if (edit) edit(route);
    routes_.Set({route});
    Ingress::Options options;
    options.host = "127.0.0.1";
    options.port = 0;
    if (edit_options) edit_options(options);
    ingress_ = std::make_unique<Ingress>(&routes_, options);
    absl::StatusOr<int> port = ingress_->Start();
    ASSERT_TRUE(port.ok()) << port.status();
    ASSERT_GT(*port, 0);
    port_ = *port;
  }

  std::unique_ptr<httplib::Client> NewClient() {
    auto client = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client->set_connection_timeout(5, 0);
    client->set_read_timeout(10, 0);
    client->set_write_timeout(10, 0);
    return client;
  }

  // Every request has ended: none in flight or queued.
  void ExpectIdle() {
    EXPECT_TRUE(WaitFor([&] {
      auto load = routes_.Load();
      if (load["echo"].in_flight != 0 || load["echo"].queued != 0) return false;
      for (const auto& [id, n] : load["echo"].replicas) {
        if (n != 0) return false;
      }
      return true;
    })) << "in flight: " << routes_.Load()["echo"].in_flight << ", queued: " << routes_.Load()["echo"].queued;
  }

  // Waits until the ingress has recorded `n` answers for echo (it records after the client has the answer).
  ServiceCounters CountersAfter(int64_t n) {
    WaitFor([&] { return routes_.Counters()["echo"].latency_count >= n; });
    return routes_.Counters()["echo"];
  }

  std::unique_ptr<Backend> a_ = std::make_unique<Backend>("a");
  std::unique_ptr<Backend> b_;
  RouteTable routes_;
  std::unique_ptr<Ingress> ingress_;
  int port_ = 0;
};

}  // namespace ingress_test
}  // namespace torus::serve
