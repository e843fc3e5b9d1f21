// Small helpers shared by the head's HTTP routes.
#pragma once

#include <httplib.h>

#include <string>

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

// POST /api/v0/runs/{id}/report: authenticated by the run's token instead of the cluster token.
inline bool IsRunReportPath(const std::string& path) {
  return path.rfind("/api/v0/runs/", 0) == 0 && path.size() > 7 && path.compare(path.size() - 7, 7, "/report") == 0;
}

}  // namespace torus::head
