#include "torus/cli/command_util.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "torus/client/package_upload.h"
#include "torus/client/session.h"

namespace torus::cli {

absl::StatusOr<std::unique_ptr<client::HttpApiClient>> ConnectHttpApi(const HeadFlags& head) {
  auto endpoint = client::ResolveHttp(head.dashboard_address, head.token, client::TempRoot());
  if (!endpoint.ok()) return endpoint.status();
  return client::HttpApiClient::Connect(*endpoint);
}

int FailCommand(const std::string& command, const absl::Status& status) {
  std::cerr << "torus " << command << ": " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

std::string ShellQuote(const std::string& arg) {
  bool safe = !arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                                    "_-.,/:=+@%") == std::string::npos;
  if (safe) return arg;
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

absl::StatusOr<std::map<std::string, std::string>> ParseEnvFlags(const std::vector<std::string>& items) {
  std::map<std::string, std::string> env;
  for (const std::string& kv : items) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--env \"", kv, "\": expected KEY=VALUE"));
    }
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

absl::StatusOr<Locations> UploadLocations(client::HttpApiClient& http, const std::string& working_dir,
                                          const std::vector<std::string>& py_modules,
                                          const std::vector<std::string>& excludes) {
  auto resolve = [&](const std::string& flag, const std::string& location,
                     bool parent) -> absl::StatusOr<std::string> {
    if (location.rfind("gcs://", 0) == 0) return location;
    std::error_code ec;
    if (!std::filesystem::is_directory(location, ec)) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " \"", location, "\" is not a local directory; give a ",
                                                     "directory to upload or a package URI (gcs://<name>.zip)"));
    }
    auto up = client::UploadDirectory(http, location, {.excludes = excludes, .include_parent_dir = parent},
                                      client::TempRoot() + "/package_names");
    if (!up.ok()) return up.status();
    if (up->uploaded) {
      std::cerr << absl::StrFormat("[torus] uploaded %s: %d files, %.1f MB (%s)\n", location, up->files,
                                   up->size / 1e6, up->uri);
    } else {
      std::cerr << absl::StrFormat("[torus] %s is on the head already (%s)\n", location, up->uri);
    }
    return up->uri;
  };
  Locations out;
  if (!working_dir.empty()) {
    auto uri = resolve("--working-dir", working_dir, false);
    if (!uri.ok()) return uri.status();
    out.working_dir = *uri;
  }
  for (const std::string& m : py_modules) {
    auto uri = resolve("--py-module", m, true);
    if (!uri.ok()) return uri.status();
    out.py_modules.push_back(*uri);
  }
  return out;
}

}  // namespace torus::cli
