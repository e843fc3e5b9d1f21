#include "torus/head/api/packages_http.h"

#include "absl/strings/str_cat.h"
#include "torus/head/api/http_util.h"

namespace torus::head {
namespace {

constexpr char kRoute[] = R"(/api/packages/([^/]+)/([^/]+))";

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
    SendJson(res, 200, PackageJson(*p));
  });

  server.Put(kRoute, [packages](const httplib::Request& req, httplib::Response& res) {
    std::string name;
    if (!PackageName(req, res, &name)) return;
    auto outcome = packages->Put(name, req.body);
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
