#include "torus/head/api/dashboard_http.h"

#include <httplib.h>

#include <string>


namespace torus::head {
namespace {

// Scripts, styles and data only from the head itself; no framing (the page holds a session cookie).
constexpr char kPagePolicy[] =
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

const EmbeddedFile* Find(std::span<const EmbeddedFile> files, std::string_view name) {
  for (const auto& f : files) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// True when If-None-Match names the file's ETag (a list, weak forms, or "*").
bool NotModified(const httplib::Request& req, std::string_view etag) {
  if (!req.has_header("If-None-Match")) return false;
  const std::string header = req.get_header_value("If-None-Match");
  std::string_view rest = header;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    std::string_view tag = Trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (tag.starts_with("W/")) tag.remove_prefix(2);
    if (tag == "*" || tag == etag) return true;
  }
  return false;
}

void Serve(const httplib::Request& req, httplib::Response& res, const EmbeddedFile& file) {
  res.set_header("ETag", std::string(file.etag));
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Content-Type-Options", "nosniff");
  if (file.name.ends_with(".html")) {
    res.set_header("Content-Security-Policy", kPagePolicy);
    res.set_header("X-Frame-Options", "DENY");
    res.set_header("Referrer-Policy", "no-referrer");
  }
  if (NotModified(req, file.etag)) {
    res.status = 304;
    return;
  }
  res.status = 200;
  res.set_content(file.data.data(), file.data.size(), std::string(DashboardContentType(file.name)));
}

void NotFound(httplib::Response& res, std::string_view what) {
  res.status = 404;
  res.set_content(std::string("no dashboard file ") + std::string(what) + "\n", "text/plain");
}

}  // namespace

std::string_view DashboardContentType(std::string_view name) {
  struct Type {
    std::string_view extension;
    std::string_view content_type;
  };
  static constexpr Type kTypes[] = {
      {".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"}, {".css", "text/css; charset=utf-8"},
      {".json", "application/json"}, {".svg", "image/svg+xml"},
      {".png", "image/png"}, {".ico", "image/x-icon"},
      {".txt", "text/plain; charset=utf-8"}, {".map", "application/json"},
  };
  for (const auto& t : kTypes) {
    if (name.ends_with(t.extension)) return t.content_type;
  }
  return "application/octet-stream";
}

void AddDashboardRoutes(httplib::Server& server, std::span<const EmbeddedFile> files) {
  server.Get("/", [files](const httplib::Request& req, httplib::Response& res) {
    const EmbeddedFile* index = Find(files, "index.html");
    if (index == nullptr) return NotFound(res, "index.html");
    Serve(req, res, *index);
  });
  // Names are looked up in the table, never on disk, so "..", "%2e" and the like simply do not match.
  server.Get(R"(/static/([A-Za-z0-9_.-]+))", [files](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    const EmbeddedFile* file = Find(files, name);
    if (file == nullptr) return NotFound(res, name);
    Serve(req, res, *file);
  });
}

void AddDashboardRoutes(httplib::Server& server) {
  AddDashboardRoutes(server, std::span<const EmbeddedFile>(kDashboardFiles, kDashboardFileCount));
}

}  // namespace torus::head
