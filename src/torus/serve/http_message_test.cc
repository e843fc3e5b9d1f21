#include "torus/serve/http_message.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torus::serve {
namespace http_message_test {

using ::testing::ElementsAre;
using ::testing::Pair;
using Headers = std::vector<std::pair<std::string, std::string>>;

std::string RequestError(absl::string_view head) {
  absl::StatusOr<HttpHead> h = ParseRequestHead(head);
  if (h.ok()) return "<ok>";
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(h.status().message());
}

std::string ResponseError(absl::string_view head) {
  absl::StatusOr<HttpHead> h = ParseResponseHead(head);
  if (h.ok()) return "<ok>";
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(h.status().message());
}

HttpHead Head(std::string version, Headers headers, int status = 0) {
  HttpHead h;
  h.version = std::move(version);
  h.headers = std::move(headers);
  h.status = status;
  return h;
}

TEST(HttpHeadTest, FindHeadEnd) {
  const std::string crlf = "GET / HTTP/1.1\r\nHost: a\r\n\r\n";
  EXPECT_EQ(FindHeadEnd(crlf), crlf.size());
  EXPECT_EQ(FindHeadEnd(crlf + "BODY"), crlf.size());
  const std::string lf = "GET / HTTP/1.1\nHost: a\n\n";
  EXPECT_EQ(FindHeadEnd(lf), lf.size());
  EXPECT_EQ(FindHeadEnd(lf + "BODY\r\n\r\n"), lf.size());
  EXPECT_EQ(FindHeadEnd("GET / HTTP/1.1\r\nHost: a\r\n"), std::nullopt);
  EXPECT_EQ(FindHeadEnd("GET / HTTP/1.1\r\nHost: a\r\n\r"), std::nullopt);
  EXPECT_EQ(FindHeadEnd(""), std::nullopt);
  // Every prefix short of the end is incomplete.
  for (size_t n = 0; n < crlf.size(); ++n) EXPECT_EQ(FindHeadEnd(crlf.substr(0, n)), std::nullopt) << n;
}

TEST(HttpHeadTest, ParseRequestHead) {
  absl::StatusOr<HttpHead> h =
      ParseRequestHead("POST /llm/v1?x=1 HTTP/1.1\r\nHost: example\r\nX-Thing:   spaced value  \r\nEmpty:\r\n\r\n");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->method, "POST");
  EXPECT_EQ(h->target, "/llm/v1?x=1");
  EXPECT_EQ(h->version, "HTTP/1.1");
  EXPECT_THAT(h->headers, ElementsAre(Pair("Host", "example"), Pair("X-Thing", "spaced value"), Pair("Empty", "")));

  // LF-only lines, HTTP/1.0, and leading empty lines before the request line.
  h = ParseRequestHead("\r\n\nGET / HTTP/1.0\nA: b\n\n");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->method, "GET");
  EXPECT_EQ(h->target, "/");
  EXPECT_EQ(h->version, "HTTP/1.0");
  EXPECT_THAT(h->headers, ElementsAre(Pair("A", "b")));
}

TEST(HttpHeadTest, ParseRequestHeadErrors) {
  EXPECT_EQ(RequestError(""), "empty request");
  EXPECT_EQ(RequestError("\r\n\r\n"), "empty request");
  EXPECT_EQ(RequestError("GET /\r\n\r\n"), "request line is not METHOD TARGET VERSION");
  EXPECT_EQ(RequestError("GET  / HTTP/1.1\r\n\r\n"), "request line is not METHOD TARGET VERSION");
  EXPECT_EQ(RequestError("GET / HTTP/1.1 extra\r\n\r\n"), "request line is not METHOD TARGET VERSION");
  EXPECT_EQ(RequestError("G(T / HTTP/1.1\r\n\r\n"), "method with a character not allowed in it");
  EXPECT_EQ(RequestError("GET x HTTP/1.1\r\n\r\n"), "request target must start with '/'");
  EXPECT_EQ(RequestError("GET /a\x01 HTTP/1.1\r\n\r\n"), "request target with a control character or space");
  EXPECT_EQ(RequestError("GET / HTTP/2.0\r\n\r\n"), "version must be HTTP/1.1 or HTTP/1.0");
  EXPECT_EQ(RequestError("GET / http/1.1\r\n\r\n"), "version must be HTTP/1.1 or HTTP/1.0");
  EXPECT_EQ(RequestError("GET / HTTP/1.1\r\nA: b\r\n  folded\r\n\r\n"), "obsolete line folding in a header");
  EXPECT_EQ(RequestError("GET / HTTP/1.1\r\nA: b\r\n\tfolded\r\n\r\n"), "obsolete line folding in a header");
  EXPECT_EQ(RequestError("GET / HTTP/1.1\r\nBad Name: x\r\n\r\n"), "a header name with a character not allowed in it");
  EXPECT_EQ(RequestError("GET / HTTP/1.1\r\nName : x\r\n\r\n"), "a header name with a character not allowed in it");
  EXPECT_EQ(RequestError("GET / HTTP/1.1\r\nNoColon\r\n\r\n"), "a header line without a name and ':'");
  EXPECT_EQ(RequestError("GET / HTTP/1.1\r\n: x\r\n\r\n"), "a header line without a name and ':'");
  EXPECT_EQ(RequestError(std::string("GET / HTTP/1.1\r\nA: x") + '\0' + "y\r\n\r\n"),
            "a header value with a control character");
  EXPECT_EQ(RequestError("GET / HTTP/1.1\r\nA: x\ry\r\n\r\n"), "a header value with a control character");

  std::string many = "GET / HTTP/1.1\r\n";
  for (size_t i = 0; i <= kMaxHeaders; ++i) absl::StrAppend(&many, "H", i, ": v\r\n");
  EXPECT_EQ(RequestError(many + "\r\n"), "more than 100 headers");
  EXPECT_EQ(RequestError("GET / HTTP/1.1\r\nBig: " + std::string(kMaxHeadBytes, 'a') + "\r\n\r\n"),
            "request head too large");
}

TEST(HttpHeadTest, ParseResponseHead) {
  absl::StatusOr<HttpHead> h = ParseResponseHead("HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\n");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->version, "HTTP/1.1");
  EXPECT_EQ(h->status, 404);
  EXPECT_EQ(h->reason, "Not Found");
  EXPECT_THAT(h->headers, ElementsAre(Pair("Content-Length", "3")));

  h = ParseResponseHead("HTTP/1.0 200\n\n");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->version, "HTTP/1.0");
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(h->reason, "");

  h = ParseResponseHead("HTTP/1.1 200 \r\n\r\n");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->reason, "");
}

TEST(HttpHeadTest, ParseResponseHeadErrors) {
  EXPECT_EQ(ResponseError(""), "empty response");
  EXPECT_EQ(ResponseError("HTTP/1.1\r\n\r\n"), "status line is not VERSION CODE REASON");
  EXPECT_EQ(ResponseError("HTTP/2 200 OK\r\n\r\n"), "version must be HTTP/1.1 or HTTP/1.0");
  EXPECT_EQ(ResponseError("HTTP/1.1 20 OK\r\n\r\n"), "status code is not three digits");
  EXPECT_EQ(ResponseError("HTTP/1.1 2000 OK\r\n\r\n"), "status code is not three digits");
  EXPECT_EQ(ResponseError("HTTP/1.1 20x OK\r\n\r\n"), "status code is not three digits");
  EXPECT_EQ(ResponseError("HTTP/1.1 abc OK\r\n\r\n"), "status code is not three digits");
  EXPECT_EQ(ResponseError("HTTP/1.1 -20 OK\r\n\r\n"), "status code is not three digits");
  EXPECT_EQ(ResponseError("HTTP/1.1 099 OK\r\n\r\n"), "status code is not three digits");
  EXPECT_EQ(ResponseError("HTTP/1.1 \r\n\r\n"), "status code is not three digits");
  EXPECT_EQ(ResponseError("HTTP/1.1 200 OK\r\nA: b\r\n c\r\n\r\n"), "obsolete line folding in a header");
  EXPECT_EQ(ResponseError("HTTP/1.1 200 OK\r\nA(: b\r\n\r\n"), "a header name with a character not allowed in it");
}

TEST(HttpHeadTest, GetIsCaseInsensitiveAndFirstWins) {
  HttpHead h = Head("HTTP/1.1", {{"Content-Type", "text/plain"}, {"X-A", "1"}, {"x-a", "2"}});
  EXPECT_EQ(h.Get("content-type"), "text/plain");
  EXPECT_EQ(h.Get("CONTENT-TYPE"), "text/plain");
  EXPECT_EQ(h.Get("X-a"), "1");
  EXPECT_EQ(h.Get("missing"), std::nullopt);
}

TEST(HttpHeadTest, KeepAlive) {
  EXPECT_TRUE(Head("HTTP/1.1", {}).KeepAlive());
  EXPECT_TRUE(Head("HTTP/1.1", {{"Connection", "keep-alive"}}).KeepAlive());
  EXPECT_FALSE(Head("HTTP/1.1", {{"Connection", "close"}}).KeepAlive());
  EXPECT_FALSE(Head("HTTP/1.1", {{"connection", "Keep-Alive, Close"}}).KeepAlive());
  EXPECT_TRUE(Head("HTTP/1.1", {{"Connection", "closed"}}).KeepAlive());
  EXPECT_FALSE(Head("HTTP/1.0", {}).KeepAlive());
  EXPECT_TRUE(Head("HTTP/1.0", {{"Connection", "keep-alive"}}).KeepAlive());
  EXPECT_TRUE(Head("HTTP/1.0", {{"CONNECTION", " Keep-Alive "}}).KeepAlive());
  EXPECT_FALSE(Head("HTTP/1.0", {{"Connection", "close"}}).KeepAlive());
}

TEST(HttpFramingTest, RequestFraming) {
  using Kind = BodyFraming::Kind;
  auto framing = [](Headers headers) { return RequestFraming(Head("HTTP/1.1", std::move(headers))); };
  absl::StatusOr<BodyFraming> f = framing({});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kind, Kind::kNone);
  f = framing({{"Content-Length", "0"}});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kind, Kind::kNone);
  f = framing({{"Content-Length", "42"}});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kind, Kind::kLength);
  EXPECT_EQ(f->length, 42);
  f = framing({{"content-length", "7, 7"}, {"Content-Length", "7"}});  // repeated equal values are one
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->kind, Kind::kLength);
  EXPECT_EQ(f->length, 7);
  f = framing({{"Transfer-Encoding", "chunked"}});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kind, Kind::kChunked);
  f = framing({{"transfer-encoding", " Chunked "}});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->kind, Kind::kChunked);

  auto error = [&](Headers headers) {
    absl::StatusOr<BodyFraming> r = framing(std::move(headers));
    if (r.ok()) return std::string("<ok>");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  EXPECT_EQ(error({{"Content-Length", "5"}, {"Transfer-Encoding", "chunked"}}),
            "both Content-Length and Transfer-Encoding");
  EXPECT_EQ(error({{"Transfer-Encoding", "chunked"}, {"Content-Length", "0"}}),
            "both Content-Length and Transfer-Encoding");
  EXPECT_EQ(error({{"Content-Length", "5"}, {"Content-Length", "6"}}), "differing Content-Length values");
  EXPECT_EQ(error({{"Content-Length", "5, 6"}}), "differing Content-Length values");
  EXPECT_EQ(error({{"Content-Length", "abc"}}), "Content-Length \"abc\" is not a number of bytes");
  EXPECT_EQ(error({{"Content-Length", "-1"}}), "Content-Length \"-1\" is not a number of bytes");
  EXPECT_EQ(error({{"Content-Length", ""}}), "Content-Length \"\" is not a number of bytes");
  EXPECT_EQ(error({{"Content-Length", "1 2"}}), "Content-Length \"1 2\" is not a number of bytes");
  EXPECT_EQ(error({{"Transfer-Encoding", "gzip"}}), "Transfer-Encoding \"gzip\" is not supported; use chunked");
  EXPECT_EQ(error({{"Transfer-Encoding", "gzip, chunked"}}),
            "Transfer-Encoding \"gzip, chunked\" is not supported; use chunked");
  EXPECT_EQ(error({{"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "chunked"}}),
            "Transfer-Encoding \"chunked\" is not supported; use chunked");
}

TEST(HttpFramingTest, ResponseFraming) {
  using Kind = BodyFraming::Kind;
  auto kind = [](int status, Headers headers, absl::string_view method = "GET") {
    absl::StatusOr<BodyFraming> f = ResponseFraming(Head("HTTP/1.1", std::move(headers), status), method);
    EXPECT_TRUE(f.ok()) << f.status();
    return f.ok() ? f->kind : Kind::kNone;
  };
  const Headers length = {{"Content-Length", "12"}};
  const Headers chunked = {{"Transfer-Encoding", "chunked"}};
  EXPECT_EQ(kind(200, length, "HEAD"), Kind::kNone);
  EXPECT_EQ(kind(200, chunked, "HEAD"), Kind::kNone);
  EXPECT_EQ(kind(204, length), Kind::kNone);
  EXPECT_EQ(kind(304, length), Kind::kNone);
  EXPECT_EQ(kind(100, {}), Kind::kNone);
  EXPECT_EQ(kind(101, length), Kind::kNone);
  EXPECT_EQ(kind(103, chunked), Kind::kNone);
  EXPECT_EQ(kind(200, {}), Kind::kUntilClose);
  EXPECT_EQ(kind(500, {}, "POST"), Kind::kUntilClose);
  EXPECT_EQ(kind(200, {{"Content-Length", "0"}}), Kind::kNone);
  EXPECT_EQ(kind(200, chunked), Kind::kChunked);
  EXPECT_EQ(kind(200, length), Kind::kLength);
  absl::StatusOr<BodyFraming> f = ResponseFraming(Head("HTTP/1.1", length, 200), "GET");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->length, 12);

  EXPECT_FALSE(ResponseFraming(Head("HTTP/1.1", {{"Transfer-Encoding", "br"}}, 200), "GET").ok());
  EXPECT_FALSE(ResponseFraming(Head("HTTP/1.1", {{"Content-Length", "x"}}, 200), "GET").ok());
  EXPECT_FALSE(ResponseFraming(Head("HTTP/1.1", {{"Content-Length", "1"}, {"Content-Length", "2"}}, 200), "GET").ok());
}

// A chunked body with a chunk extension, chunks of upper- and lower-case hex sizes, and trailers.
constexpr char kChunked[] =
    "4;name=value\r\nWiki\r\n"
    "5 ; ext\r\npedia\r\n"
    "E\r\n in\r\n\r\nchunks.\r\n"
    "a\r\n0123456789\r\n"
    "0\r\nTrailer-One: 1\r\nTrailer-Two: 2\r\n\r\n";
constexpr char kDecoded[] = "Wikipedia in\r\n\r\nchunks.0123456789";

TEST(ChunkedReaderTest, AllAtOnce) {
  ChunkedReader reader;
  std::string decoded;
  absl::StatusOr<size_t> used = reader.Feed(kChunked, &decoded);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(*used, absl::string_view(kChunked).size());
  EXPECT_TRUE(reader.done());
  EXPECT_EQ(decoded, kDecoded);
  EXPECT_EQ(reader.decoded_bytes(), static_cast<int64_t>(decoded.size()));
}

TEST(ChunkedReaderTest, ByteByByte) {
  const std::string body = kChunked;
  ChunkedReader reader;
  std::string decoded;
  size_t consumed = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    EXPECT_FALSE(reader.done()) << i;
    absl::StatusOr<size_t> used = reader.Feed(absl::string_view(body).substr(i, 1), &decoded);
    ASSERT_TRUE(used.ok()) << i << ": " << used.status();
    EXPECT_EQ(*used, 1u) << i;
    consumed += *used;
  }
  EXPECT_TRUE(reader.done());
  EXPECT_EQ(consumed, body.size());
  EXPECT_EQ(decoded, kDecoded);
  EXPECT_EQ(reader.decoded_bytes(), static_cast<int64_t>(decoded.size()));
}

TEST(ChunkedReaderTest, EverySplitGivesTheSameResult) {
  const std::string body = kChunked;
  for (size_t split = 0; split <= body.size(); ++split) {
    ChunkedReader reader;
    std::string decoded;
    absl::StatusOr<size_t> a = reader.Feed(absl::string_view(body).substr(0, split), &decoded);
    ASSERT_TRUE(a.ok()) << split;
    EXPECT_EQ(*a, split);
    absl::StatusOr<size_t> b = reader.Feed(absl::string_view(body).substr(split), &decoded);
    ASSERT_TRUE(b.ok()) << split;
    EXPECT_EQ(*b, body.size() - split);
    EXPECT_TRUE(reader.done()) << split;
    EXPECT_EQ(decoded, kDecoded) << split;
  }
}

TEST(ChunkedReaderTest, StopsExactlyAtTheEnd) {
  const std::string body = kChunked;
  const std::string next = "GET /next HTTP/1.1\r\n\r\n";
  ChunkedReader reader;
  std::string decoded;
  absl::StatusOr<size_t> used = reader.Feed(body + next, &decoded);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(*used, body.size());
  EXPECT_TRUE(reader.done());
  EXPECT_EQ(decoded, kDecoded);
  // Once done, nothing more is consumed.
  used = reader.Feed(next, &decoded);
  ASSERT_TRUE(used.ok());
  EXPECT_EQ(*used, 0u);
  EXPECT_EQ(decoded, kDecoded);

  // Without trailers, and with LF-only lines.
  ChunkedReader plain;
  used = plain.Feed("3\nabc\n0\n\nrest", nullptr);
  ASSERT_TRUE(used.ok()) << used.status();
  EXPECT_EQ(*used, 9u);
  EXPECT_TRUE(plain.done());
  EXPECT_EQ(plain.decoded_bytes(), 3);

  ChunkedReader empty;
  used = empty.Feed("0\r\n\r\nX", nullptr);
  ASSERT_TRUE(used.ok());
  EXPECT_EQ(*used, 5u);
  EXPECT_TRUE(empty.done());
  EXPECT_EQ(empty.decoded_bytes(), 0);
}

TEST(ChunkedReaderTest, NotDoneUntilTheLastLine) {
  ChunkedReader reader;
  absl::StatusOr<size_t> used = reader.Feed("3\r\nabc\r\n0\r\nTrailer: x\r\n", nullptr);
  ASSERT_TRUE(used.ok());
  EXPECT_FALSE(reader.done());
  used = reader.Feed("\r\n", nullptr);
  ASSERT_TRUE(used.ok());
  EXPECT_EQ(*used, 2u);
  EXPECT_TRUE(reader.done());
  EXPECT_EQ(reader.Feed("", nullptr).value_or(99), 0u);
}

TEST(ChunkedReaderTest, MalformedInputs) {
  struct Case {
    std::string body;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"x\r\n", "chunk size is not hexadecimal"},
      {";ext\r\n", "chunk size is not hexadecimal"},
      {"\r\n", "chunk size is not hexadecimal"},
      {"3x\r\n", "chunk size is not hexadecimal"},
      {"1000000000000000\r\n", "chunk size too large"},
      {"3\rX", "chunk size line does not end in CRLF"},
      {"3\r\nabcX", "chunk data does not end in CRLF"},
      {"3\r\nabc\rX", "chunk data does not end in CRLF"},
      {"0\r\nA: b\rX", "trailer line does not end in CRLF"},
      {"0\r\n" + std::string(kMaxHeadBytes + 1, 'a'), "trailer too large"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body.substr(0, 40));
    // All at once, and byte by byte: the same error.
    ChunkedReader whole;
    absl::StatusOr<size_t> used = whole.Feed(c.body, nullptr);
    ASSERT_FALSE(used.ok());
    EXPECT_EQ(used.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(used.status().message(), c.want);
    ChunkedReader bytes;
    absl::Status error;
    for (size_t i = 0; i < c.body.size() && error.ok(); ++i) {
      error = bytes.Feed(absl::string_view(c.body).substr(i, 1), nullptr).status();
    }
    EXPECT_EQ(error.message(), c.want);
  }
}

TEST(SimpleResponseTest, Format) {
  EXPECT_EQ(SimpleResponse(404, "application/json", "{\"error\":\"x\"}"),
            "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"error\":\"x\"}");
  EXPECT_EQ(SimpleResponse(503, "text/plain", "busy", {{"Retry-After", "1"}, {"X-A", "b"}}, true),
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 4\r\nRetry-After: 1\r\n"
            "X-A: b\r\nConnection: close\r\n\r\nbusy");
  EXPECT_EQ(SimpleResponse(200, "text/plain", ""),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 0\r\n\r\n");

  // It parses back as the head and body it describes.
  const std::string out = SimpleResponse(413, "application/json", "too big", {}, true);
  std::optional<size_t> end = FindHeadEnd(out);
  ASSERT_TRUE(end.has_value());
  absl::StatusOr<HttpHead> head = ParseResponseHead(absl::string_view(out).substr(0, *end));
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->status, 413);
  EXPECT_EQ(head->reason, "Content Too Large");
  EXPECT_FALSE(head->KeepAlive());
  absl::StatusOr<BodyFraming> framing = ResponseFraming(*head, "GET");
  ASSERT_TRUE(framing.ok());
  EXPECT_EQ(framing->kind, BodyFraming::Kind::kLength);
  EXPECT_EQ(out.substr(*end), "too big");
  EXPECT_EQ(static_cast<size_t>(framing->length), out.size() - *end);
}

TEST(SimpleResponseTest, ReasonPhrases) {
  EXPECT_EQ(ReasonPhrase(200), "OK");
  EXPECT_EQ(ReasonPhrase(400), "Bad Request");
  EXPECT_EQ(ReasonPhrase(408), "Request Timeout");
  EXPECT_EQ(ReasonPhrase(431), "Request Header Fields Too Large");
  EXPECT_EQ(ReasonPhrase(502), "Bad Gateway");
  EXPECT_EQ(ReasonPhrase(504), "Gateway Timeout");
  EXPECT_EQ(ReasonPhrase(418), "Unknown");
}

}  // namespace http_message_test
}  // namespace torus::serve
