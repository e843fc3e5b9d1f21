#include "torus/head/api/packages_http.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "torus/head/api/http_util.h"

namespace torus::head {
namespace {

constexpr char kRoute[] = R"(/api/packages/([^/]+)/([^/]+))";
constexpr int kMaxUploads = 4;  // bodies being received at once

// The package name of a request on kRoute; false (error sent) for a protocol other than gcs or a bad name.
bool PackageName(const httplib::Request& req, httplib::Response& res, std::string* name) {
  const std::string protocol = req.matches[1];
  if (protocol != "gcs") {
    SendError(res, 400, absl::StrCat("protocol \"", protocol, "\" is not supported; packages are uploaded as gcs ",
                                     "(PUT /api/packages/gcs/<name>)"));
    return false;
  }
  *name = req.matches[2];
  if (absl::Status s = PackageStore::CheckName(*name); !s.ok()) {
    SendStatus(res, s);
    return false;
  }
  return true;
}

nlohmann::json PackageJson(const Package& p) { return {{"name", p.name}, {"sha256", p.sha256}, {"size", p.size}}; }

}  // namespace

void RegisterPackageRoutes(httplib::Server& server, PackageStore* packages, const StateStore* store) {
  server.Get(kRoute, [packages](const httplib::Request& req, httplib::Response& res) {
    std::string name;
    if (!PackageName(req, res, &name)) return;
    std::optional<Package> p = packages->Find(name);
    if (!p) return SendError(res, 404, absl::StrCat("package ", name, " is not on the head"));
    packages->Touch(name);  // the client will name it in a submission next
    SendJson(res, 200, PackageJson(*p));
  });

  // The body goes to a file as it arrives (never whole in memory), and stops at the size limit whatever the request
  // says of its length (chunked bodies included).
  auto uploads = std::make_shared<std::atomic<int>>(0);
  server.Put(kRoute, [packages, uploads](const httplib::Request& req, httplib::Response& res,
                                         const httplib::ContentReader& content) {
    std::string name;
    if (!PackageName(req, res, &name)) return;
    if (req.has_header("Content-Encoding")) {
      return SendError(res, 400, "Content-Encoding is not supported for packages; send the zip archive as it is");
    }
    if (uploads->fetch_add(1) >= kMaxUploads) {
      uploads->fetch_sub(1);
      res.set_header("Retry-After", "1");
      return SendError(res, 503, absl::StrCat("the head is receiving ", kMaxUploads, " packages already; retry"));
    }
    struct Done {
      std::atomic<int>* n;
      ~Done() { n->fetch_sub(1); }
    } done{uploads.get()};
    const std::string upload = packages->NewUpload(name);
    const int fd = ::open(upload.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return SendError(res, 500, absl::StrCat("cannot create ", upload, ": ", std::strerror(errno)));
    uint64_t received = 0;
    bool too_large = false, write_failed = false;
    const bool read = content([&](const char* data, size_t length) {
      received += length;
      if (received > packages->max_bytes()) {
        too_large = true;
        return false;
      }
      for (size_t done_bytes = 0; done_bytes < length;) {
        const ssize_t n = ::write(fd, data + done_bytes, length - done_bytes);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          write_failed = true;
          return false;
        }
        done_bytes += static_cast<size_t>(n);
      }
      return true;
    });
    ::close(fd);
    if (!read && !too_large && !write_failed) {
      // The server refused the body before it reached us (beyond its own limit: 413 set), or the client went away.
      ::unlink(upload.c_str());
      res.set_header("Connection", "close");
      if (res.status == 413) return;  // the error handler names the limit
      return SendError(res, 400, "the request body could not be read");
    }
    if (too_large || write_failed) {
      ::unlink(upload.c_str());
      res.set_header("Connection", "close");  // the rest of the body is not read
      if (too_large) {
        return SendError(res, 413, absl::StrCat("package ", name, " is larger than the head's limit of ",
                                                packages->max_bytes(), " bytes"));
      }
      return SendError(res, 500, absl::StrCat("cannot write ", upload));
    }
    auto outcome = packages->PutFile(name, upload);
    if (!outcome.ok()) return SendStatus(res, outcome.status());
    nlohmann::json body = PackageJson(*packages->Find(name));
    body["stored"] = *outcome == PackageStore::PutOutcome::kStored;
    SendJson(res, 200, body);
  });

  server.Get("/api/v0/packages", [store](const httplib::Request& req, httplib::Response& res) {
    nlohmann::json list = store->Read([](const ClusterState& s) {
      const std::map<std::string, PackageUse> uses = PackageUses(s);
      nlohmann::json out = nlohmann::json::array();
      for (const auto& [name, p] : s.packages()) {
        auto u = uses.find(name);
        const PackageUse use = u == uses.end() ? PackageUse{} : u->second;
        nlohmann::json j = PackageJson(p);
        j["uri"] = std::string(kPackageScheme) + name;
        j["stored_time_ms"] = p.stored_wall_ms;
        j["users"] = use.live_users;
        j["unused_since_ms"] = use.live_users > 0 ? nlohmann::json(nullptr)
                                                  : nlohmann::json(std::max(p.stored_wall_ms, use.last_end_wall_ms));
        out.push_back(std::move(j));
      }
      return out;
    });
    if (!Paginate(req, res, &list)) return;
    SendJson(res, 200, list);
  });
}

}  // namespace torus::head
