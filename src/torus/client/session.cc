#include "torus/client/session.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "torus/rpc/auth.h"

namespace torus::client {

std::string TempRoot() {
  const char* env = std::getenv("TORUS_TEMP_DIR");
  return env != nullptr && env[0] != '\0' ? env : "/tmp/torus";
}

absl::StatusOr<std::string> LatestSessionDir(const std::string& root) {
  std::error_code ec;
  auto target = std::filesystem::canonical(std::filesystem::path(root) / "session_latest", ec);
  if (ec) return absl::NotFoundError(absl::StrCat("no torus session under ", root, " (", ec.message(), ")"));
  return target.string();
}

absl::StatusOr<std::string> ReadTrimmed(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(buffer.str()));
}

absl::StatusOr<HeadEndpoint> ResolveHead(std::optional<std::string> address, std::optional<std::string> token,
                                         const std::string& root) {
  HeadEndpoint endpoint;
  auto from_env = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr || v[0] == '\0') return std::nullopt;
    return std::string(v);
  };
  if (!address) address = from_env("TORUS_ADDRESS");
  if (!token) token = from_env("TORUS_TOKEN");
  if (auto ca = from_env("TORUS_TLS_CA")) endpoint.tls_ca = *ca;
  if (!address || !token) {
    auto session = LatestSessionDir(root);
    if (!session.ok()) {
      return absl::NotFoundError(absl::StrCat(
          "cannot find a running head: no --address/TORUS_ADDRESS and ", session.status().message(),
          "; start one with `torus start --head` or `torus up SPEC.yaml`"));
    }
    if (!address) {
      auto a = ReadTrimmed(*session + "/head_address");
      if (!a.ok()) {
        return absl::NotFoundError(absl::StrCat("session ", *session,
                                                " has no head_address; pass --address HOST:PORT"));
      }
      address = *a;
      std::error_code ec;
      if (endpoint.tls_ca.empty() && std::filesystem::exists(*session + "/ca.crt", ec)) {
        endpoint.tls_ca = *session + "/ca.crt";
      }
    }
    if (!token) {
      auto t = rpc::ReadTokenFile(*session + "/token");
      if (!t.ok()) return absl::NotFoundError(absl::StrCat(t.status().message(), "; pass --token or TORUS_TOKEN"));
      token = *t;
    }
  }
  endpoint.address = *address;
  endpoint.token = *token;
  return endpoint;
}

std::string SessionTlsCa(const std::string& session) {
  std::error_code ec;
  const std::string ca = session + "/ca.crt";
  return std::filesystem::exists(ca, ec) ? ca : "";
}

absl::StatusOr<HeadEndpoint> ResolveHttp(std::optional<std::string> address, std::optional<std::string> token,
                                         const std::string& root) {
  std::string address_file;
  std::string tls_ca;
  if (const char* ca = std::getenv("TORUS_TLS_CA"); ca != nullptr && ca[0] != '\0') tls_ca = ca;
  if (!address) {
    const char* env = std::getenv("TORUS_DASHBOARD_ADDRESS");
    if (env != nullptr && env[0] != '\0') address = env;
  }
  if (!address) {
    auto session = LatestSessionDir(root);
    if (!session.ok()) {
      return absl::NotFoundError(absl::StrCat("cannot find the head's HTTP address: no --dashboard-address or "
                                              "TORUS_DASHBOARD_ADDRESS and ", session.status().message()));
    }
    auto a = ReadTrimmed(*session + "/dashboard_address");
    if (!a.ok()) {
      return absl::NotFoundError(absl::StrCat("session ", *session,
                                              " has no dashboard_address; pass --dashboard-address HOST:PORT"));
    }
    address = *a;
    address_file = *session + "/dashboard_address";
    std::error_code ec;
    if (tls_ca.empty() && std::filesystem::exists(*session + "/ca.crt", ec)) tls_ca = *session + "/ca.crt";
  }
  auto head = ResolveHead(std::string("unused"), token, root);
  if (!head.ok()) return head.status();
  return HeadEndpoint{.address = *address, .token = head->token, .address_file = address_file, .tls_ca = tls_ca};
}

}  // namespace torus::client
