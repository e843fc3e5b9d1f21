// Forwarding: the bytes the ingress writes on its way through — a request as a replica gets it, an answer head as
// the client gets it, and the ingress's own error answers. Pure functions.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "torus/serve/http_message.h"

namespace torus::serve {

// {"error": message} as JSON (invalid UTF-8 replaced).
std::string ErrorBody(absl::string_view message);
// The ingress's own answer: `status`, the error body, "Connection: close" (the connection closes after it).
std::string ErrorAnswer(int status, absl::string_view message);
// The 404 message for `path`, naming every prefix served (`prefixes`, sorted).
std::string NoRouteMessage(absl::string_view path, const std::vector<std::string>& prefixes);

// Headers that apply to one connection (or to the framing the ingress redoes) and are not forwarded.
bool HopByHop(absl::string_view name);

// The request as the replica gets it: `prefix` removed from the target ("/" left at least; a query kept), hop-by-hop
// headers and any X-Forwarded-Prefix dropped, Host added when missing, X-Forwarded-For: `peer`, X-Forwarded-Prefix:
// `prefix` (unless it is "/"), the body framed by Content-Length (always for POST, PUT and PATCH), then the body.
// REQUIRES: `prefix` is a prefix of request.target.
std::string UpstreamRequest(const HttpHead& request, absl::string_view prefix, absl::string_view peer,
                            absl::string_view body);

// The answer head as the client gets it: the replica's status line (as HTTP/1.1) and headers but for Connection and
// Keep-Alive, with "Connection: close" when `close`.
std::string ClientAnswerHead(const HttpHead& answer, bool close);

}  // namespace torus::serve
