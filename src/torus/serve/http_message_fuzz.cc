// libFuzzer target for the ingress's HTTP/1.1 framing (docs/fuzzing.md): the bytes a client or a replica sends.
// The input is read as a request head, as a response head (each up to FindHeadEnd, or whole when it has none), and
// as a chunked body. Nothing may crash; errors are InvalidArgument; what parses is framed without crashing, with a
// length only for kLength and never negative; a ChunkedReader fed the input whole and in two pieces (split at
// every point the first byte picks) consumes as much, ends (or fails, with the same message) alike, and decodes the
// same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "torus/serve/http_message.h"

namespace {

namespace serve = torus::serve;

void Require(bool condition) {
  if (!condition) std::abort();
}

void CheckFraming(const absl::StatusOr<serve::BodyFraming>& framing) {
  if (!framing.ok()) {
    Require(framing.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  Require(framing->length >= 0);
  if (framing->kind != serve::BodyFraming::Kind::kLength) Require(framing->length == 0);
  if (framing->kind == serve::BodyFraming::Kind::kLength) Require(framing->length > 0);
}

void CheckHead(const absl::StatusOr<serve::HttpHead>& head, bool request) {
  if (!head.ok()) {
    Require(head.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  Require(head->version == "HTTP/1.1" || head->version == "HTTP/1.0");
  Require(head->headers.size() <= serve::kMaxHeaders);
  for (const auto& [name, value] : head->headers) {
    Require(!name.empty());
    Require(head->Get(name).has_value());
  }
  (void)head->KeepAlive();
  if (request) {
    Require(!head->method.empty() && !head->target.empty() && head->target[0] == '/');
    CheckFraming(serve::RequestFraming(*head));
    CheckFraming(serve::ResponseFraming(*head, head->method));
  } else {
    Require(head->status >= 100 && head->status <= 999);
    CheckFraming(serve::ResponseFraming(*head, "GET"));
    CheckFraming(serve::ResponseFraming(*head, "HEAD"));
    CheckFraming(serve::RequestFraming(*head));
  }
}

struct Chunked {
  absl::Status status;
  size_t used = 0;
  bool done = false;
  std::string decoded;
  int64_t decoded_bytes = 0;
};

// Feeds `data` in pieces cut at `cuts` (ascending), as the ingress does: each piece is what arrived, and feeding
// stops at an error or at the end of the body.
Chunked FeedChunked(absl::string_view data, size_t cut) {
  Chunked out;
  serve::ChunkedReader reader;
  for (absl::string_view piece : {data.substr(0, cut), data.substr(cut)}) {
    absl::StatusOr<size_t> used = reader.Feed(piece, &out.decoded);
    if (!used.ok()) {
      Require(used.status().code() == absl::StatusCode::kInvalidArgument);
      out.status = used.status();
      break;
    }
    Require(*used <= piece.size());
    out.used += *used;
    // Only the end of the body stops it short of the whole piece.
    if (*used < piece.size()) Require(reader.done());
    if (reader.done()) break;
  }
  out.done = reader.done();
  out.decoded_bytes = reader.decoded_bytes();
  Require(out.decoded_bytes == static_cast<int64_t>(out.decoded.size()));
  if (out.status.ok()) Require(out.decoded.size() <= out.used);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 2 * serve::kMaxHeadBytes) return 0;
  const absl::string_view input(reinterpret_cast<const char*>(data), size);

  std::optional<size_t> end = serve::FindHeadEnd(input);
  if (end) Require(*end >= 2 && *end <= input.size() && input[*end - 1] == '\n');
  const absl::string_view head = end ? input.substr(0, *end) : input;
  CheckHead(serve::ParseRequestHead(head), true);
  CheckHead(serve::ParseResponseHead(head), false);

  // The chunked body: whole, and in two pieces cut where the first byte says (and in the middle).
  const Chunked whole = FeedChunked(input, input.size());
  for (size_t cut : {size == 0 ? size_t{0} : static_cast<size_t>(data[0]) % (size + 1), size / 2}) {
    const Chunked split = FeedChunked(input, cut);
    Require(split.status.ok() == whole.status.ok());
    Require(split.status.message() == whole.status.message());
    Require(split.done == whole.done);
    Require(split.decoded == whole.decoded);
    if (whole.status.ok()) Require(split.used == whole.used);
  }
  // A body that ended is read back alone, to the same end.
  if (whole.status.ok() && whole.done) {
    const Chunked again = FeedChunked(input.substr(0, whole.used), whole.used);
    Require(again.status.ok() && again.done && again.used == whole.used && again.decoded == whole.decoded);
  }

  const std::string response = serve::SimpleResponse(static_cast<int>(size % 900) + 100, "text/plain", input);
  const std::optional<size_t> response_end = serve::FindHeadEnd(response);
  Require(response_end.has_value());
  Require(response.substr(*response_end) == input);
  return 0;
}
