#include "torus/serve/ingress.h"

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torus/serve/http_message.h"
#include "torus/serve/ingress_test_util.h"

namespace torus::serve {
namespace ingress_test {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST_F(IngressTest, GetReachesReplicaWithPrefixRemoved) {
  StartIngress({a_->endpoint()});
  auto client = NewClient();
  httplib::Result res = client->Get("/echo/hello?x=1", {{"X-Custom", "v"}, {"X-Status", "201"}});
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 201);
  EXPECT_EQ(res->body, "a GET /hello 0");
  EXPECT_EQ(res->get_header_value("X-Replica"), "a");
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain");

  Received got = a_->last();
  EXPECT_EQ(got.method, "GET");
  EXPECT_EQ(got.path, "/hello");
  EXPECT_EQ(got.target, "/hello?x=1");
  auto header = [&](const std::string& name) {
    auto it = got.headers.find(name);
    return it == got.headers.end() ? std::string("<none>") : it->second;
  };
  EXPECT_EQ(header("X-Forwarded-Prefix"), "/echo");
  EXPECT_EQ(header("X-Forwarded-For"), "127.0.0.1");
  EXPECT_EQ(header("X-Custom"), "v");

  // The prefix alone is the replica's root; a query right after it too.
  res = client->Get("/echo");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(a_->last().path, "/");
  res = client->Get("/echo?q=2");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(a_->last().target, "/?q=2");

  ServiceCounters c = CountersAfter(3);
  EXPECT_EQ(c.responses[201], 1);
  EXPECT_EQ(c.responses[200], 2);
  EXPECT_EQ(c.retries, 0);
  ExpectIdle();
  EXPECT_EQ(routes_.Load()["echo"].served["a"], 3);
}

TEST_F(IngressTest, PostBodyArrivesWhole) {
  StartIngress({a_->endpoint()});
  std::string body(300'000, '\0');
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>('a' + i % 26);
  auto client = NewClient();
  httplib::Result res = client->Post("/echo/upload", body, "application/octet-stream");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "a POST /upload 300000");
  Received got = a_->last();
  EXPECT_EQ(got.method, "POST");
  EXPECT_EQ(got.body, body);

  // A chunked request body reaches the replica whole too (with a Content-Length).
  res = client->Post(
      "/echo/chunked",
      [&](size_t offset, httplib::DataSink& sink) {
        if (offset < body.size()) {
          sink.write(body.data() + offset, std::min<size_t>(70'000, body.size() - offset));
        } else {
          sink.done();
        }
        return true;
      },
      "application/octet-stream");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  got = a_->last();
  EXPECT_EQ(got.path, "/chunked");
  EXPECT_EQ(got.body, body);
  EXPECT_EQ(got.headers.count("Transfer-Encoding"), 0u);

  // An empty POST gets a Content-Length of 0.
  res = client->Post("/echo/empty", "", "text/plain");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->body, "a POST /empty 0");
  ExpectIdle();
}

TEST_F(IngressTest, UnknownPathIs404NamingTheRoutes) {
  StartIngress({a_->endpoint()});
  auto client = NewClient();
  for (const char* path : {"/nothing", "/echox", "/"}) {
    httplib::Result res = client->Get(path);
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 404);
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
    EXPECT_EQ(res->body, std::string("{\"error\":\"no service serves ") + path + "; routes: /echo\"}");
  }
  EXPECT_TRUE(a_->received().empty());
}

TEST_F(IngressTest, BodyOverMaxRequestBytesIs413) {
  StartIngress({a_->endpoint()}, [](ServiceRoute& r) { r.max_request_bytes = 16; });
  auto client = NewClient();
  httplib::Result res = client->Post("/echo/upload", std::string(64, 'x'), "text/plain");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 413);
  EXPECT_EQ(res->body, "{\"error\":\"the request body (64 bytes) is over echo's max_request_bytes (16)\"}");
  // At the limit it passes.
  res = client->Post("/echo/upload", std::string(16, 'x'), "text/plain");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(a_->received().size(), 1u);
  ServiceCounters c = CountersAfter(2);
  EXPECT_EQ(c.responses[413], 1);
  EXPECT_EQ(c.responses[200], 1);
  ExpectIdle();
}

TEST_F(IngressTest, NoReadyReplicaIs503) {
  StartIngress({}, [](ServiceRoute& r) { r.queue_timeout_ms = 200; });
  auto client = NewClient();
  httplib::Result res = client->Get("/echo/hello");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(res->body, "{\"error\":\"service echo has no READY replica; waited 0.2 s (queue_timeout_s)\"}");
  EXPECT_EQ(CountersAfter(1).responses[503], 1);
  ExpectIdle();
}

TEST_F(IngressTest, QueuedRequestGoesToReplicaThatBecomesReady) {
  StartIngress({});
  int status = 0;
  std::string body;
  std::thread request([&] {
    httplib::Result res = NewClient()->Get("/echo/late");
    if (res) {
      status = res->status;
      body = res->body;
    }
  });
  const bool queued = WaitFor([&] { return routes_.Load()["echo"].queued == 1; });
  ServiceRoute route = *routes_.Match("/echo");
  route.ready = {a_->endpoint()};
  routes_.Set({route});
  request.join();
  EXPECT_TRUE(queued);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(body, "a GET /late 0");
  ExpectIdle();
}

TEST_F(IngressTest, DownReplicaIsRetriedOnAnother) {
  DownPort down;
  StartIngress({down.endpoint("down"), a_->endpoint()});
  // One request held on a, so that the least-loaded pick tries the down replica first.
  RouteTable::Pick held = routes_.Acquire("echo", {"down"}, std::numeric_limits<int64_t>::max());
  ASSERT_EQ(held.outcome, RouteTable::Outcome::kPicked);
  ASSERT_EQ(held.replica.id, "a");

  auto client = NewClient();
  httplib::Result res = client->Get("/echo/hello");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "a GET /hello 0");
  routes_.Release("echo", "a");

  ServiceCounters c = CountersAfter(1);
  EXPECT_EQ(c.retries, 1);
  EXPECT_EQ(c.responses[200], 1);
  ExpectIdle();
  auto load = routes_.Load();
  EXPECT_EQ(load["echo"].served["down"], 1);
  EXPECT_EQ(load["echo"].served["a"], 2);
}

TEST_F(IngressTest, AllReplicasDownIs502) {
  DownPort down1, down2;
  StartIngress({down1.endpoint("down1"), down2.endpoint("down2")});
  auto client = NewClient();
  httplib::Result res = client->Get("/echo/hello");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 502);
  EXPECT_THAT(res->body, StartsWith("{\"error\":\"every READY replica of echo failed before answering; last: "));
  ServiceCounters c = CountersAfter(1);
  EXPECT_EQ(c.responses[502], 1);
  ExpectIdle();
  auto load = routes_.Load();
  EXPECT_EQ(load["echo"].served["down1"], 1);
  EXPECT_EQ(load["echo"].served["down2"], 1);
}

TEST_F(IngressTest, StreamingAnswerReachesClientChunkByChunk) {
  StartIngress({a_->endpoint()});
  auto client = NewClient();
  std::string received;
  int pieces = 0;
  bool signalled = false;
  std::string at_signal;
  httplib::Result res = client->Get("/echo/stream", {{"Accept-Encoding", "identity"}},
                                    [&](const char* data, size_t n) {
                                      received.append(data, n);
                                      ++pieces;
                                      // The backend sends the rest only once the test has seen the first event.
                                      if (!signalled && received.find("data: one\n\n") != std::string::npos) {
                                        signalled = true;
                                        at_signal = received;
                                        a_->Signal();
                                      }
                                      return true;
                                    });
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_EQ(received, "data: one\n\ndata: two\n\ndata: three\n\n");
  EXPECT_TRUE(a_->stream_waited()) << "the first event did not reach the client before the backend sent the rest";
  EXPECT_EQ(at_signal, "data: one\n\n");
  EXPECT_GE(pieces, 2);
  ExpectIdle();
}

TEST_F(IngressTest, KeepAliveServesTwoRequestsOnOneConnection) {
  StartIngress({a_->endpoint()});
  auto client = NewClient();
  client->set_keep_alive(true);
  for (const char* path : {"/echo/one", "/echo/two"}) {
    httplib::Result res = client->Get(path);
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_NE(res->get_header_value("Connection"), "close");
  }
  ASSERT_EQ(a_->received().size(), 2u);
  EXPECT_EQ(a_->received()[1].path, "/two");

  // The same on a raw connection: two requests written one after the other, two answers, then close.
  const std::string both = RawExchange(port_,
                                       "GET /echo/three HTTP/1.1\r\nHost: x\r\n\r\n"
                                       "GET /echo/four HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(both, HasSubstr("a GET /three 0"));
  EXPECT_THAT(both, HasSubstr("a GET /four 0"));
  EXPECT_LT(both.find("/three"), both.find("/four"));
  EXPECT_THAT(both, StartsWith("HTTP/1.1 200 OK\r\n"));
  ExpectIdle();
}

TEST_F(IngressTest, MalformedRequestIs400) {
  StartIngress({a_->endpoint()});
  std::string out = RawExchange(port_, "GARBAGE\r\n\r\n");
  EXPECT_THAT(out, StartsWith("HTTP/1.1 400 Bad Request\r\n"));
  EXPECT_THAT(out, HasSubstr("\r\nConnection: close\r\n"));
  EXPECT_THAT(out, HasSubstr("\r\n\r\n{\"error\":\"bad request: request line is not METHOD TARGET VERSION\"}"));

  out = RawExchange(port_, "POST /echo/x HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n");
  EXPECT_THAT(out, StartsWith("HTTP/1.1 400 Bad Request\r\n"));
  EXPECT_THAT(out, HasSubstr("bad request: both Content-Length and Transfer-Encoding"));

  out = RawExchange(port_, "POST /echo/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
  EXPECT_THAT(out, StartsWith("HTTP/1.1 400 Bad Request\r\n"));
  EXPECT_THAT(out, HasSubstr("bad request: chunk size is not hexadecimal"));
  EXPECT_TRUE(a_->received().empty());
  ExpectIdle();
}

TEST_F(IngressTest, SlowReplicaIs504) {
  StartIngress({a_->endpoint()}, [](ServiceRoute& r) { r.request_timeout_ms = 300; });
  auto client = NewClient();
  httplib::Result res = client->Get("/echo/slow");
  a_->Release();
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 504);
  EXPECT_EQ(res->body, "{\"error\":\"replica a did not answer within request_timeout_s\"}");
  EXPECT_EQ(a_->received().size(), 1u);  // not retried elsewhere
  ServiceCounters c = CountersAfter(1);
  EXPECT_EQ(c.responses[504], 1);
  EXPECT_EQ(c.retries, 0);
  ExpectIdle();
}

// An interim 1xx answer (103 Early Hints here) is not the answer: the client gets the final one, and the next
// request on the kept-alive replica connection gets its own answer. Disabled: the ingress relays the 103 as the
// answer (ResponseFraming gives kNone for 1xx) and puts the connection back in its pool with the real answer still
// unread, so the next request receives the previous request's answer. See the report for the fix.
TEST_F(IngressTest, InterimAnswerIsNotTheAnswer) {
  RawBackend raw([](int n, const std::string&) {
    const std::string body = "r" + std::to_string(n);
    return std::vector<std::string>{
        "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body};
  });
  StartIngress({raw.endpoint("raw")});
  for (const char* want : {"r1", "r2"}) {
    httplib::Result res = NewClient()->Get("/echo/x");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->body, want);
  }
}

TEST_F(IngressTest, LoadReturnsToZeroAfterMixedRequests) {
  b_ = std::make_unique<Backend>("b");
  StartIngress({a_->endpoint(), b_->endpoint()});
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      auto client = NewClient();
      httplib::Result res = i % 2 == 0 ? client->Get("/echo/x") : client->Post("/echo/y", "body", "text/plain");
      if (res && res->status == 200) ++ok;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok, 6);
  ExpectIdle();
  auto load = routes_.Load();
  EXPECT_EQ(load["echo"].served["a"] + load["echo"].served["b"], 6);
  EXPECT_EQ(a_->received().size() + b_->received().size(), 6u);
}

TEST_F(IngressTest, QueuedRequestOfDeletedServiceIs503) {
  StartIngress({});
  std::string out;
  std::thread request([&] { out = RawExchange(port_, "GET /echo/x HTTP/1.1\r\nHost: x\r\n\r\n"); });
  ASSERT_TRUE(WaitFor([&] { return routes_.Load()["echo"].queued == 1; }));
  routes_.Set({});
  request.join();
  EXPECT_THAT(out, StartsWith("HTTP/1.1 503 Service Unavailable\r\n"));
  EXPECT_THAT(out, HasSubstr("{\"error\":\"service echo was deleted\"}"));
  EXPECT_EQ(CountersAfter(1).responses[503], 1);
  EXPECT_EQ(routes_.Load()["echo"].queued, 0);
  routes_.Set({});  // the next change drops the deleted service's counts
  EXPECT_FALSE(routes_.Load().contains("echo"));
}

TEST_F(IngressTest, QueueFullIs503) {
  StartIngress({}, [](ServiceRoute& r) { r.max_queued_requests = 0; });
  const std::string out = RawExchange(port_, "GET /echo/x HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(out, HasSubstr("{\"error\":\"service echo has no READY replica and 0 requests already wait for one "
                             "(max_queued_requests)\"}"));
  ExpectIdle();
}

TEST_F(IngressTest, SlowHeadIs408AndIdleConnectionCloses) {
  StartIngress({a_->endpoint()}, nullptr, [](Ingress::Options& o) {
    o.header_timeout_ms = 200;
    o.idle_timeout_ms = 400;
  });
  const int slow = Connect(port_);
  const int idle = Connect(port_);
  ASSERT_GE(slow, 0);
  ASSERT_GE(idle, 0);
  const auto start = std::chrono::steady_clock::now();
  const std::string part = "GET /echo/x HTTP/1.1\r\n";
  ASSERT_EQ(::send(slow, part.data(), part.size(), MSG_NOSIGNAL), static_cast<ssize_t>(part.size()));
  const std::string out = ReadToEnd(slow);
  EXPECT_THAT(out, StartsWith("HTTP/1.1 408 Request Timeout\r\n"));
  EXPECT_THAT(out, HasSubstr("{\"error\":\"the request head did not arrive in time\"}"));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(190));
  EXPECT_EQ(ReadToEnd(idle), "");  // closed without a word
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(390));
  ::close(slow);
  ::close(idle);
  EXPECT_TRUE(a_->received().empty());
}

TEST_F(IngressTest, StreamingAnswerIsCutOffAtRequestTimeout) {
  RawBackend raw([](int, const std::string&) {
    return std::vector<std::string>{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n",
                                    "4\r\nmore\r\n", "4\r\nmore\r\n", "4\r\nmore\r\n", "4\r\nmore\r\n",
                                    "4\r\nmore\r\n", "0\r\n\r\n"};
  });
  StartIngress({raw.endpoint("raw")}, [](ServiceRoute& r) { r.request_timeout_ms = 120; });
  const std::string out = RawExchange(port_, "GET /echo/x HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(out, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(out, HasSubstr("5\r\nfirst\r\n"));
  EXPECT_THAT(out, Not(HasSubstr("0\r\n\r\n")));  // cut off: the client connection closed
  ServiceCounters c = CountersAfter(1);
  EXPECT_EQ(c.responses[200], 1);
  ExpectIdle();
}

// A replica that closes each connection after its answer (without saying so): the next request goes on a fresh
// connection, and is not counted as retried.
TEST_F(IngressTest, ConnectionClosedByReplicaIsNotReused) {
  RawBackend raw(
      [](int n, const std::string&) {
        const std::string body = "r" + std::to_string(n);
        return std::vector<std::string>{"HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                                        "\r\n\r\n" + body};
      },
      /*close_after_answer=*/true);
  StartIngress({raw.endpoint("raw")});
  auto client = NewClient();
  client->set_keep_alive(true);
  for (const char* want : {"r1", "r2", "r3"}) {
    httplib::Result res = client->Get("/echo/x");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 200);
    EXPECT_EQ(res->body, want);
  }
  ServiceCounters c = CountersAfter(3);
  EXPECT_EQ(c.responses[200], 3);
  EXPECT_EQ(c.retries, 0);
  ExpectIdle();
}

// An answer framed by the end of the connection: relayed whole, then the client connection closes too.
TEST_F(IngressTest, AnswerUntilCloseClosesClientConnection) {
  RawBackend raw(
      [](int, const std::string&) { return std::vector<std::string>{"HTTP/1.1 200 OK\r\n\r\nuntil", " close"}; },
      /*close_after_answer=*/true);
  StartIngress({raw.endpoint("raw")});
  const std::string out = RawExchange(port_, "GET /echo/x HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(out, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(out, HasSubstr("\r\nConnection: close\r\n"));
  EXPECT_THAT(out, ::testing::EndsWith("\r\n\r\nuntil close"));
  ExpectIdle();
}

TEST_F(IngressTest, ExpectContinueIsAnswered) {
  StartIngress({a_->endpoint()});
  const int fd = Connect(port_);
  ASSERT_GE(fd, 0);
  const std::string head =
      "POST /echo/up HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  std::string got;
  char buf[256];
  while (got.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0);
    got.append(buf, static_cast<size_t>(n));
  }
  EXPECT_EQ(got, "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_EQ(::send(fd, "hello", 5, MSG_NOSIGNAL), 5);
  const std::string out = ReadToEnd(fd);
  ::close(fd);
  EXPECT_THAT(out, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(out, ::testing::EndsWith("a POST /up 5"));
  EXPECT_EQ(a_->last().body, "hello");
  EXPECT_EQ(a_->last().headers.count("Expect"), 0u);
}

}  // namespace ingress_test
}  // namespace torus::serve
