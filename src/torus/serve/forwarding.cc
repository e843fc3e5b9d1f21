#include "torus/serve/forwarding.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace torus::serve {

std::string ErrorBody(absl::string_view message) {
  return nlohmann::json{{"error", std::string(message)}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ErrorAnswer(int status, absl::string_view message) {
  return SimpleResponse(status, "application/json", ErrorBody(message), {}, true);
}

std::string NoRouteMessage(absl::string_view path, const std::vector<std::string>& prefixes) {
  return prefixes.empty() ? absl::StrCat("no service serves ", path, "; none is deployed")
                          : absl::StrCat("no service serves ", path, "; routes: ", absl::StrJoin(prefixes, ", "));
}

bool HopByHop(absl::string_view name) {
  for (const char* h : {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade", "expect",
                        "content-length", "trailer"}) {
    if (absl::EqualsIgnoreCase(name, h)) return true;
  }
  return false;
}

std::string UpstreamRequest(const HttpHead& request, absl::string_view prefix, absl::string_view peer,
                            absl::string_view body) {
  absl::string_view target = request.target;
  bool slash = false;  // a "/" to put before what is left of the target
  if (prefix != "/") {
    target.remove_prefix(std::min(prefix.size(), target.size()));
    slash = target.empty() || target[0] != '/';
  }
  std::string out;
  out.reserve(256 + body.size());
  absl::StrAppend(&out, request.method, slash ? " /" : " ", target, " HTTP/1.1\r\n");
  for (const auto& [name, value] : request.headers) {
    if (HopByHop(name) || absl::EqualsIgnoreCase(name, "x-forwarded-prefix")) continue;
    absl::StrAppend(&out, name, ": ", value, "\r\n");
  }
  if (!request.Get("host")) out += "Host: torus-ingress\r\n";
  absl::StrAppend(&out, "X-Forwarded-For: ", peer, "\r\n");
  if (prefix != "/") absl::StrAppend(&out, "X-Forwarded-Prefix: ", prefix, "\r\n");
  if (!body.empty() || request.method == "POST" || request.method == "PUT" || request.method == "PATCH") {
    absl::StrAppend(&out, "Content-Length: ", body.size(), "\r\n");
  }
  out += "\r\n";
  out.append(body.data(), body.size());
  return out;
}

std::string ClientAnswerHead(const HttpHead& answer, bool close) {
  std::string out;
  out.reserve(256);
  absl::StrAppend(&out, "HTTP/1.1 ", answer.status, " ", answer.reason, "\r\n");
  for (const auto& [name, value] : answer.headers) {
    if (absl::EqualsIgnoreCase(name, "connection") || absl::EqualsIgnoreCase(name, "keep-alive")) continue;
    absl::StrAppend(&out, name, ": ", value, "\r\n");
  }
  if (close) out += "Connection: close\r\n";
  out += "\r\n";
  return out;
}

}  // namespace torus::serve
