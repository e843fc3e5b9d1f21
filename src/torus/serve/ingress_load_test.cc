#include "torus/serve/ingress.h"

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torus/serve/http_message.h"
#include "torus/serve/ingress_test_util.h"

// The ingress under load and at its limits: slow and many clients, its bound on connections, its threads, Stop.
namespace torus::serve {
namespace ingress_test {

using ::testing::StartsWith;

// A slow client of a large answer: the ingress stops reading the replica while the client does not read (it holds
// a bounded amount, never the whole answer), and the answer arrives whole and in order.
TEST_F(IngressTest, SlowClientGetsLargeAnswerWholeAndInOrder) {
  constexpr size_t kBody = size_t{128} << 20;
  auto byte_at = [](size_t i) { return static_cast<char>((i + i / 4096) & 0xff); };
  std::atomic<size_t> sent{0};
  // A replica that writes the answer as fast as it is taken, counting what it wrote.
  const int listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listen_fd, 4), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::thread replica([&] {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    std::string head;
    char c;
    while (!FindHeadEnd(head) && ::recv(fd, &c, 1, 0) == 1) head += c;
    const std::string answer_head = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(kBody) + "\r\n\r\n";
    bool ok = ::send(fd, answer_head.data(), answer_head.size(), MSG_NOSIGNAL) > 0;
    std::string piece(65536, '\0');
    for (size_t off = 0; ok && off < kBody; off += piece.size()) {
      for (size_t i = 0; i < piece.size(); ++i) piece[i] = byte_at(off + i);
      ok = ::send(fd, piece.data(), piece.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(piece.size());
      sent += piece.size();
    }
    ::close(fd);
  });
  StartIngress({{"bulk", "127.0.0.1", ntohs(addr.sin_port)}});

  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int small = 64 * 1024;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in ingress{};
  ingress.sin_family = AF_INET;
  ingress.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ingress.sin_port = htons(static_cast<uint16_t>(port_));
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&ingress), sizeof(ingress)), 0);
  const std::string request = "GET /echo/big HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));

  std::string got;
  std::vector<char> buf(1 << 16);
  auto read_some = [&] {
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n > 0) got.append(buf.data(), static_cast<size_t>(n));
    return n;
  };
  std::optional<size_t> head_end;
  while (!(head_end = FindHeadEnd(got)) && read_some() > 0) {
  }
  ASSERT_TRUE(head_end.has_value());
  EXPECT_THAT(got, StartsWith("HTTP/1.1 200 OK\r\n"));
  // The client stops reading: the replica soon cannot write any more.
  size_t last = 0;
  for (int stable = 0; stable < 30;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const size_t now = sent;
    stable = now == last ? stable + 1 : 0;
    last = now;
  }
  EXPECT_LT(last, kBody / 2) << "the ingress read on while its client did not";

  // Then it reads everything: the bytes arrive whole and in order.
  size_t body = got.size() - *head_end;
  bool in_order = true;
  for (size_t i = 0; i < body; ++i) in_order = in_order && got[*head_end + i] == byte_at(i);
  while (body < kBody) {
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) break;
    for (ssize_t i = 0; i < n && in_order; ++i) in_order = buf[static_cast<size_t>(i)] == byte_at(body + i);
    body += static_cast<size_t>(n);
  }
  EXPECT_EQ(body, kBody);
  EXPECT_TRUE(in_order);
  ::close(fd);
  replica.join();
  ::close(listen_fd);
  EXPECT_EQ(CountersAfter(1).responses[200], 1);
  ExpectIdle();
}

// Many clients at once, each on its own kept-alive connection: every one gets its own answers.
TEST_F(IngressTest, ManyConcurrentClientsGetTheirOwnAnswers) {
  auto echo = [](int, const std::string& head) {
    const std::string target = head.substr(4, head.find(' ', 4) - 4);  // "GET <target> HTTP/1.1"
    return std::vector<std::string>{"HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(target.size()) +
                                    "\r\n\r\n" + target};
  };
  RawBackend one(echo), two(echo);
  StartIngress({one.endpoint("one"), two.endpoint("two")});
  constexpr int kClients = 64;
  constexpr int kRequests = 5;
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      auto client = NewClient();
      client->set_keep_alive(true);
      for (int r = 0; r < kRequests; ++r) {
        const std::string path = "/c" + std::to_string(c) + "/r" + std::to_string(r);
        httplib::Result res = client->Get("/echo" + path);
        if (res && res->status == 200 && res->body == path) ++ok;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok, kClients * kRequests);
  EXPECT_EQ(CountersAfter(kClients * kRequests).responses[200], kClients * kRequests);
  ExpectIdle();
}

TEST_F(IngressTest, StopClosesEveryConnectionAndLeaksNoFd) {
  const int before = OpenFds();
  ServiceRoute waiting;
  waiting.name = "waiting";
  waiting.prefix = "/waiting";
  StartIngress({a_->endpoint()});
  ServiceRoute echo = *routes_.Match("/echo");
  echo.ready = {a_->endpoint()};
  routes_.Set({echo, waiting});
  // A kept-alive client connection with a kept-alive replica connection behind it, an idle one, a queued request.
  auto client = NewClient();
  client->set_keep_alive(true);
  httplib::Result res = client->Get("/echo/x");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  const int idle = Connect(port_);
  ASSERT_GE(idle, 0);
  const int queued = Connect(port_);
  ASSERT_GE(queued, 0);
  const std::string request = "GET /waiting/x HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(queued, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  ASSERT_TRUE(WaitFor([&] { return routes_.Load()["waiting"].queued == 1; }));

  ingress_->Stop();
  ingress_->Stop();  // twice: nothing more
  EXPECT_EQ(ReadToEnd(idle), "");
  EXPECT_EQ(ReadToEnd(queued), "");
  EXPECT_EQ(routes_.Load()["waiting"].queued, 0);
  ::close(idle);
  ::close(queued);
  client.reset();
  ExpectIdle();
  EXPECT_TRUE(WaitFor([&] { return OpenFds() <= before; })) << OpenFds() << " open, " << before << " before";
}

TEST_F(IngressTest, ConnectionsOverMaxAreClosedAtOnce) {
  StartIngress({a_->endpoint()}, nullptr, [](Ingress::Options& o) { o.max_connections = 2; });
  const int first = Connect(port_);
  const int second = Connect(port_);
  ASSERT_GE(first, 0);
  ASSERT_GE(second, 0);
  const std::string request = "GET /echo/x HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(second, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  char buf[4096];
  ASSERT_GT(::recv(second, buf, sizeof(buf), 0), 0);  // both are served: the count is at 2
  // A third is closed without an answer.
  const std::string last = "GET /echo/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(RawExchange(port_, last), "");
  // Once one goes, there is room again.
  ::close(first);
  EXPECT_TRUE(WaitFor([&] { return RawExchange(port_, last).find("a GET /x 0") != std::string::npos; }));
  ::close(second);
}

TEST_F(IngressTest, SeveralLoopThreadsServeTheirShare) {
  StartIngress({a_->endpoint()}, nullptr, [](Ingress::Options& o) { o.threads = 3; });
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int c = 0; c < 9; ++c) {
    clients.emplace_back([&] {
      auto client = NewClient();
      httplib::Result res = client->Get("/echo/x");
      if (res && res->status == 200) ++ok;
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok, 9);
  ExpectIdle();
}

}  // namespace ingress_test
}  // namespace torus::serve
