#include "torus/serve/forwarding.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torus::serve {
namespace forwarding_test {

HttpHead Request(const std::string& method, const std::string& target,
                 std::vector<std::pair<std::string, std::string>> headers) {
  HttpHead h;
  h.method = method;
  h.target = target;
  h.version = "HTTP/1.1";
  h.headers = std::move(headers);
  return h;
}

TEST(ForwardingTest, UpstreamRequestRemovesPrefixAndRewritesHeaders) {
  struct Case {
    std::string target;
    std::string prefix;
    std::string want_line;
  };
  for (const Case& c : std::vector<Case>{{"/echo/hello?x=1", "/echo", "GET /hello?x=1 HTTP/1.1"},
                                         {"/echo", "/echo", "GET / HTTP/1.1"},
                                         {"/echo?q=2", "/echo", "GET /?q=2 HTTP/1.1"},
                                         {"/echo/", "/echo", "GET / HTTP/1.1"},
                                         {"/any/path", "/", "GET /any/path HTTP/1.1"}}) {
    const std::string out = UpstreamRequest(Request("GET", c.target, {{"Host", "h"}}), c.prefix, "10.0.0.1", "");
    EXPECT_EQ(out.substr(0, out.find("\r\n")), c.want_line) << c.target;
  }

  const std::string out = UpstreamRequest(Request("GET", "/echo/x",
                                                  {{"Host", "example"},
                                                   {"Connection", "keep-alive"},
                                                   {"Keep-Alive", "timeout=5"},
                                                   {"Transfer-Encoding", "chunked"},
                                                   {"Expect", "100-continue"},
                                                   {"X-Forwarded-Prefix", "/spoofed"},
                                                   {"X-Custom", "v"}}),
                                          "/echo", "10.0.0.1", "");
  EXPECT_EQ(out,
            "GET /x HTTP/1.1\r\n"
            "Host: example\r\n"
            "X-Custom: v\r\n"
            "X-Forwarded-For: 10.0.0.1\r\n"
            "X-Forwarded-Prefix: /echo\r\n"
            "\r\n");
}

TEST(ForwardingTest, UpstreamRequestFramesBodyByLength) {
  // Host added when missing; the body by Content-Length; no X-Forwarded-Prefix under "/".
  EXPECT_EQ(UpstreamRequest(Request("POST", "/up", {{"Content-Length", "999"}}), "/", "::1", "abc"),
            "POST /up HTTP/1.1\r\n"
            "Host: torus-ingress\r\n"
            "X-Forwarded-For: ::1\r\n"
            "Content-Length: 3\r\n"
            "\r\n"
            "abc");
  // An empty POST, PUT or PATCH says so; an empty GET does not.
  for (const char* method : {"POST", "PUT", "PATCH"}) {
    EXPECT_THAT(UpstreamRequest(Request(method, "/", {}), "/", "p", ""), ::testing::HasSubstr("Content-Length: 0\r\n"));
  }
  EXPECT_THAT(UpstreamRequest(Request("GET", "/", {}), "/", "p", ""),
              ::testing::Not(::testing::HasSubstr("Content-Length")));
}

TEST(ForwardingTest, ClientAnswerHeadDropsConnectionHeaders) {
  HttpHead answer;
  answer.version = "HTTP/1.0";
  answer.status = 200;
  answer.reason = "OK";
  answer.headers = {{"Content-Length", "2"}, {"connection", "keep-alive"}, {"Keep-Alive", "timeout=5"}, {"X", "y"}};
  EXPECT_EQ(ClientAnswerHead(answer, false), "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX: y\r\n\r\n");
  EXPECT_EQ(ClientAnswerHead(answer, true),
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX: y\r\nConnection: close\r\n\r\n");
}

TEST(ForwardingTest, ErrorAnswersAndMessages) {
  EXPECT_EQ(ErrorBody("a \"quoted\" word"), "{\"error\":\"a \\\"quoted\\\" word\"}");
  EXPECT_EQ(ErrorBody("bad \xff byte"), "{\"error\":\"bad \xef\xbf\xbd byte\"}");
  const std::string answer = ErrorAnswer(503, "nope");
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 503 Service Unavailable\r\n"));
  EXPECT_THAT(answer, ::testing::HasSubstr("\r\nConnection: close\r\n"));
  EXPECT_THAT(answer, ::testing::EndsWith("\r\n\r\n{\"error\":\"nope\"}"));
  EXPECT_EQ(NoRouteMessage("/x", {}), "no service serves /x; none is deployed");
  EXPECT_EQ(NoRouteMessage("/x", {"/a", "/b"}), "no service serves /x; routes: /a, /b");
  EXPECT_TRUE(HopByHop("Transfer-Encoding"));
  EXPECT_TRUE(HopByHop("TE"));
  EXPECT_FALSE(HopByHop("X-Forwarded-For"));
}

}  // namespace forwarding_test
}  // namespace torus::serve
