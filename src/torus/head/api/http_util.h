// Small helpers shared by the head's HTTP routes.
#pragma once

#include <httplib.h>

#include <algorithm>
#include <charconv>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace torus::head {

inline void SendJson(httplib::Response& res, int code, const nlohmann::json& body) {
  res.status = code;
  // Text from requests (an id, a bad value quoted in an error) may not be UTF-8: replace, never throw.
  res.set_content(body.dump(2, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

inline void SendError(httplib::Response& res, int code, const std::string& message) {
  SendJson(res, code, {{"error", message}});
}

// The HTTP status of an error from a service: the one mapping at the edge.
inline int HttpCodeOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kFailedPrecondition: return 409;
    case absl::StatusCode::kAlreadyExists: return 409;
    case absl::StatusCode::kOutOfRange: return 416;
    case absl::StatusCode::kResourceExhausted: return 413;
    default: return 500;
  }
}

inline void SendStatus(httplib::Response& res, const absl::Status& s) {
  SendError(res, HttpCodeOf(s), std::string(s.message()));
}

// Applies `limit`/`offset` to a JSON array, setting X-Total-Count; false (error sent) on bad values.
inline bool Paginate(const httplib::Request& req, httplib::Response& res, nlohmann::json* items) {
  const size_t total = items->size();
  int64_t limit = -1, offset = 0;
  for (const char* key : {"limit", "offset"}) {
    if (!req.has_param(key)) continue;
    const std::string text = req.get_param_value(key);
    int64_t n = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || ptr != text.data() + text.size() || n < 0 || (std::string(key) == "limit" && n == 0)) {
      SendError(res, 400, absl::StrCat(key, " \"", text, "\" is not valid; use a whole number",
                                       std::string(key) == "limit" ? " of at least 1" : " of at least 0"));
      return false;
    }
    (std::string(key) == "limit" ? limit : offset) = n;
  }
  res.set_header("X-Total-Count", std::to_string(total));
  if (limit < 0 && offset == 0) return true;
  nlohmann::json page = nlohmann::json::array();
  for (size_t i = static_cast<size_t>(std::min<int64_t>(offset, total));
       i < total && (limit < 0 || page.size() < static_cast<size_t>(limit)); ++i) {
    page.push_back(std::move((*items)[i]));
  }
  *items = std::move(page);
  return true;
}

// Keeps the items of a JSON array whose "status" is `req`'s `status` parameter (when given).
inline void FilterByStatus(const httplib::Request& req, nlohmann::json* items) {
  if (!req.has_param("status")) return;
  const std::string wanted = req.get_param_value("status");
  nlohmann::json kept = nlohmann::json::array();
  for (auto& item : *items) {
    if (item.is_object() && item.value("status", "") == wanted) kept.push_back(std::move(item));
  }
  *items = std::move(kept);
}

// POST /api/v0/runs/{id}/report: authenticated by the run's token instead of the cluster token.
inline bool IsRunReportPath(const std::string& path) {
  return path.rfind("/api/v0/runs/", 0) == 0 && path.size() > 7 && path.compare(path.size() - 7, 7, "/report") == 0;
}

}  // namespace torus::head
