#include "torus/serve/http_message.h"

#include <charconv>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace torus::serve {
namespace {

bool TokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || absl::string_view("!#$%&'*+-.^_`|~").find(c) != absl::string_view::npos;
}

// Splits the head into lines (CRLF or LF), the last empty one dropped.
std::vector<absl::string_view> HeadLines(absl::string_view head) {
  std::vector<absl::string_view> lines;
  size_t start = 0;
  while (start < head.size()) {
    size_t end = head.find('\n', start);
    if (end == absl::string_view::npos) end = head.size();
    absl::string_view line = head.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = end + 1;
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

absl::Status ParseHeaders(const std::vector<absl::string_view>& lines, HttpHead* head) {
  if (lines.size() - 1 > kMaxHeaders) return absl::InvalidArgumentError(absl::StrCat("more than ", kMaxHeaders, " headers"));
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    if (!line.empty() && (line[0] == ' ' || line[0] == '\t')) {
      return absl::InvalidArgumentError("obsolete line folding in a header");
    }
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos || colon == 0) {
      return absl::InvalidArgumentError("a header line without a name and ':'");
    }
    absl::string_view name = line.substr(0, colon);
    for (char c : name) {
      if (!TokenChar(c)) return absl::InvalidArgumentError("a header name with a character not allowed in it");
    }
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    for (char c : value) {
      if (c == '\0' || c == '\r' || c == '\n') return absl::InvalidArgumentError("a header value with a control character");
    }
    head->headers.emplace_back(std::string(name), std::string(value));
  }
  return absl::OkStatus();
}

bool ValidVersion(absl::string_view v) { return v == "HTTP/1.1" || v == "HTTP/1.0"; }

// Content-Length: one non-negative decimal (repeated equal values are one).
absl::StatusOr<std::optional<int64_t>> ContentLength(const HttpHead& head) {
  std::optional<int64_t> length;
  for (const auto& [name, value] : head.headers) {
    if (!absl::EqualsIgnoreCase(name, "content-length")) continue;
    for (absl::string_view part : absl::StrSplit(value, ',')) {
      part = absl::StripAsciiWhitespace(part);
      int64_t n = 0;
      auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), n);
      if (part.empty() || ec != std::errc() || ptr != part.data() + part.size() || n < 0) {
        return absl::InvalidArgumentError(absl::StrCat("Content-Length \"", value, "\" is not a number of bytes"));
      }
      if (length && *length != n) return absl::InvalidArgumentError("differing Content-Length values");
      length = n;
    }
  }
  return length;
}

// Transfer-Encoding: absent, or exactly "chunked".
absl::StatusOr<bool> Chunked(const HttpHead& head) {
  bool any = false;
  for (const auto& [name, value] : head.headers) {
    if (!absl::EqualsIgnoreCase(name, "transfer-encoding")) continue;
    if (any || !absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(value), "chunked")) {
      return absl::InvalidArgumentError(absl::StrCat("Transfer-Encoding \"", value, "\" is not supported; use chunked"));
    }
    any = true;
  }
  return any;
}

}  // namespace

std::optional<absl::string_view> HttpHead::Get(absl::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (absl::EqualsIgnoreCase(n, name)) return absl::string_view(v);
  }
  return std::nullopt;
}

bool HttpHead::KeepAlive() const {
  std::optional<absl::string_view> c = Get("connection");
  auto has = [&](absl::string_view token) {
    if (!c) return false;
    for (absl::string_view part : absl::StrSplit(*c, ',')) {
      if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(part), token)) return true;
    }
    return false;
  };
  if (version == "HTTP/1.0") return has("keep-alive");
  return !has("close");
}

std::optional<size_t> FindHeadEnd(absl::string_view data) {
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != '\n') continue;
    if (i + 1 < data.size() && data[i + 1] == '\n') return i + 2;
    if (i + 2 < data.size() && data[i + 1] == '\r' && data[i + 2] == '\n') return i + 3;
  }
  return std::nullopt;
}

absl::StatusOr<HttpHead> ParseRequestHead(absl::string_view text) {
  if (text.size() > kMaxHeadBytes) return absl::InvalidArgumentError("request head too large");
  std::vector<absl::string_view> lines = HeadLines(text);
  while (!lines.empty() && lines.front().empty()) lines.erase(lines.begin());  // RFC 9112 §2.2: skip leading CRLFs
  if (lines.empty()) return absl::InvalidArgumentError("empty request");
  std::vector<absl::string_view> parts = absl::StrSplit(lines[0], ' ');
  if (parts.size() != 3) return absl::InvalidArgumentError("request line is not METHOD TARGET VERSION");
  HttpHead head;
  head.method = std::string(parts[0]);
  head.target = std::string(parts[1]);
  head.version = std::string(parts[2]);
  if (head.method.empty()) return absl::InvalidArgumentError("empty method");
  for (char c : head.method) {
    if (!TokenChar(c)) return absl::InvalidArgumentError("method with a character not allowed in it");
  }
  if (head.target.empty() || head.target[0] != '/') return absl::InvalidArgumentError("request target must start with '/'");
  for (unsigned char c : head.target) {
    if (c <= ' ' || c == 0x7f) return absl::InvalidArgumentError("request target with a control character or space");
  }
  if (!ValidVersion(head.version)) return absl::InvalidArgumentError("version must be HTTP/1.1 or HTTP/1.0");
  if (absl::Status s = ParseHeaders(lines, &head); !s.ok()) return s;
  return head;
}

absl::StatusOr<HttpHead> ParseResponseHead(absl::string_view text) {
  if (text.size() > kMaxHeadBytes) return absl::InvalidArgumentError("response head too large");
  std::vector<absl::string_view> lines = HeadLines(text);
  if (lines.empty()) return absl::InvalidArgumentError("empty response");
  absl::string_view line = lines[0];
  size_t sp = line.find(' ');
  if (sp == absl::string_view::npos) return absl::InvalidArgumentError("status line is not VERSION CODE REASON");
  HttpHead head;
  head.version = std::string(line.substr(0, sp));
  if (!ValidVersion(head.version)) return absl::InvalidArgumentError("version must be HTTP/1.1 or HTTP/1.0");
  absl::string_view rest = line.substr(sp + 1);
  absl::string_view code = rest.substr(0, 3);
  int status = 0;
  auto [ptr, ec] = std::from_chars(code.data(), code.data() + code.size(), status);
  if (code.size() != 3 || ec != std::errc() || ptr != code.data() + 3 || status < 100 || status > 999 ||
      (rest.size() > 3 && rest[3] != ' ')) {
    return absl::InvalidArgumentError("status code is not three digits");
  }
  head.status = status;
  if (rest.size() > 4) head.reason = std::string(rest.substr(4));
  if (absl::Status s = ParseHeaders(lines, &head); !s.ok()) return s;
  return head;
}

absl::StatusOr<BodyFraming> RequestFraming(const HttpHead& request) {
  auto chunked = Chunked(request);
  if (!chunked.ok()) return chunked.status();
  auto length = ContentLength(request);
  if (!length.ok()) return length.status();
  if (*chunked && *length) return absl::InvalidArgumentError("both Content-Length and Transfer-Encoding");
  if (*chunked) return BodyFraming{BodyFraming::Kind::kChunked, 0};
  if (*length && **length > 0) return BodyFraming{BodyFraming::Kind::kLength, **length};
  return BodyFraming{};
}

absl::StatusOr<BodyFraming> ResponseFraming(const HttpHead& response, absl::string_view method) {
  if (method == "HEAD" || response.status < 200 || response.status == 204 || response.status == 304) {
    return BodyFraming{};
  }
  auto chunked = Chunked(response);
  if (!chunked.ok()) return chunked.status();
  if (*chunked) return BodyFraming{BodyFraming::Kind::kChunked, 0};
  auto length = ContentLength(response);
  if (!length.ok()) return length.status();
  if (*length) return *length > 0 ? BodyFraming{BodyFraming::Kind::kLength, **length} : BodyFraming{};
  return BodyFraming{BodyFraming::Kind::kUntilClose, 0};
}

absl::StatusOr<size_t> ChunkedReader::Feed(absl::string_view data, std::string* decoded) {
  size_t i = 0;
  while (i < data.size() && state_ != State::kDone) {
    const char c = data[i];
    switch (state_) {
      case State::kSize: {
        int digit = -1;
        if (c >= '0' && c <= '9') digit = c - '0';
        else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
        if (digit >= 0) {
          if (++size_digits_ > 15) return absl::InvalidArgumentError("chunk size too large");
          remaining_ = remaining_ * 16 + static_cast<uint64_t>(digit);
        } else if (size_digits_ == 0) {
          return absl::InvalidArgumentError("chunk size is not hexadecimal");
        } else if (c == ';' || c == ' ' || c == '\t') {
          state_ = State::kSizeExt;
        } else if (c == '\r') {
          state_ = State::kSizeLf;
        } else if (c == '\n') {
          state_ = remaining_ == 0 ? State::kTrailer : State::kData;
          trailer_line_ = 0;
        } else {
          return absl::InvalidArgumentError("chunk size is not hexadecimal");
        }
        ++i;
        break;
      }
      case State::kSizeExt:
        if (c == '\r') state_ = State::kSizeLf;
        else if (c == '\n') state_ = remaining_ == 0 ? State::kTrailer : State::kData;
        trailer_line_ = 0;
        ++i;
        break;
      case State::kSizeLf:
        if (c != '\n') return absl::InvalidArgumentError("chunk size line does not end in CRLF");
        state_ = remaining_ == 0 ? State::kTrailer : State::kData;
        trailer_line_ = 0;
        ++i;
        break;
      case State::kData: {
        size_t n = std::min<uint64_t>(remaining_, data.size() - i);
        if (decoded != nullptr) decoded->append(data.data() + i, n);
        total_ += static_cast<int64_t>(n);
        remaining_ -= n;
        i += n;
        if (remaining_ == 0) state_ = State::kDataCr;
        break;
      }
      case State::kDataCr:
        if (c == '\n') {
          state_ = State::kSize;
          size_digits_ = 0;
        } else if (c == '\r') {
          state_ = State::kDataLf;
        } else {
          return absl::InvalidArgumentError("chunk data does not end in CRLF");
        }
        ++i;
        break;
      case State::kDataLf:
        if (c != '\n') return absl::InvalidArgumentError("chunk data does not end in CRLF");
        state_ = State::kSize;
        size_digits_ = 0;
        ++i;
        break;
      case State::kTrailer:
        // A trailer line, or the empty line that ends the body.
        if (c == '\n') {
          if (trailer_line_ == 0) state_ = State::kDone;
          trailer_line_ = 0;
        } else if (c == '\r') {
          state_ = State::kTrailerLf;
        } else {
          if (++trailer_line_ > kMaxHeadBytes) return absl::InvalidArgumentError("trailer too large");
        }
        ++i;
        break;
      case State::kTrailerLf:
        if (c != '\n') return absl::InvalidArgumentError("trailer line does not end in CRLF");
        state_ = trailer_line_ == 0 ? State::kDone : State::kTrailer;
        trailer_line_ = 0;
        ++i;
        break;
      case State::kDone:
        break;
    }
  }
  return i;
}

absl::string_view ReasonPhrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string SimpleResponse(int status, absl::string_view content_type, absl::string_view body,
                           const std::vector<std::pair<std::string, std::string>>& extra, bool close) {
  std::string out = absl::StrCat("HTTP/1.1 ", status, " ", ReasonPhrase(status), "\r\nContent-Type: ", content_type,
                                 "\r\nContent-Length: ", body.size(), "\r\n");
  for (const auto& [name, value] : extra) absl::StrAppend(&out, name, ": ", value, "\r\n");
  if (close) out += "Connection: close\r\n";
  out += "\r\n";
  out.append(body.data(), body.size());
  return out;
}

}  // namespace torus::serve
