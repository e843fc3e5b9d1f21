// HTTP/1.1 message framing for the ingress (RFC 9112): request and response heads, how a body is delimited, and an
// incremental reader of chunked bodies. Only as much as a reverse proxy needs: bodies themselves pass through as
// bytes.
//
// Limits: a head is at most kMaxHeadBytes and kMaxHeaders header lines; obsolete line folding, a request with both
// Content-Length and Transfer-Encoding, a Transfer-Encoding other than "chunked", and differing Content-Length
// values are refused (as request-smuggling defences require).
//
// Thread-safety: value types and pure functions; a ChunkedReader is used by one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace torus::serve {

inline constexpr size_t kMaxHeadBytes = 64 * 1024;
inline constexpr size_t kMaxHeaders = 100;

struct HttpHead {
  // Request: method, target, version. Response: version, status, reason.
  std::string method;
  std::string target;
  std::string version;  // "HTTP/1.1"
  int status = 0;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> headers;  // in order, names as sent
  // The value of the first header named `name` (any case).
  std::optional<absl::string_view> Get(absl::string_view name) const;
  // The connection stays open after this message: HTTP/1.1 without "Connection: close", or HTTP/1.0 with
  // "Connection: keep-alive".
  bool KeepAlive() const;
};

// Where the head ends: the offset just past "\r\n\r\n" (or "\n\n"), or nullopt when `data` does not hold it yet.
std::optional<size_t> FindHeadEnd(absl::string_view data);

// Parses a request head (the bytes up to FindHeadEnd). InvalidArgument says what is wrong.
absl::StatusOr<HttpHead> ParseRequestHead(absl::string_view head);
absl::StatusOr<HttpHead> ParseResponseHead(absl::string_view head);

struct BodyFraming {
  enum class Kind { kNone, kLength, kChunked, kUntilClose };
  Kind kind = Kind::kNone;
  int64_t length = 0;  // kLength
};

// A request's body: Content-Length, chunked, or none. InvalidArgument for conflicting or malformed framing.
absl::StatusOr<BodyFraming> RequestFraming(const HttpHead& request);
// A response's body to a request with `method`: none for HEAD, 1xx, 204 and 304; else as the head says, or until
// the connection closes.
absl::StatusOr<BodyFraming> ResponseFraming(const HttpHead& response, absl::string_view method);

// Follows a chunked body as its bytes arrive, finding where it ends (trailers included); optionally collects the
// decoded data.
class ChunkedReader {
 public:
  // Consumes a prefix of `data` (all of it unless the body ends inside it) and returns how much; appends the chunk
  // data to `decoded` when it is not null. InvalidArgument for malformed framing.
  absl::StatusOr<size_t> Feed(absl::string_view data, std::string* decoded);
  bool done() const { return state_ == State::kDone; }
  int64_t decoded_bytes() const { return total_; }

 private:
  enum class State { kSize, kSizeExt, kSizeLf, kData, kDataCr, kDataLf, kTrailer, kTrailerLf, kDone };
  State state_ = State::kSize;
  uint64_t remaining_ = 0;
  int size_digits_ = 0;
  size_t trailer_line_ = 0;  // bytes of the trailer line being read
  int64_t total_ = 0;
};

// Writes a minimal response: status line, Content-Type, Content-Length, extra headers, the body.
std::string SimpleResponse(int status, absl::string_view content_type, absl::string_view body,
                           const std::vector<std::pair<std::string, std::string>>& extra = {}, bool close = false);
absl::string_view ReasonPhrase(int status);

}  // namespace torus::serve
