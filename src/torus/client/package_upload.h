// Sending local code with a job or run, as Ray's job clients do: a local directory is packed (package/pack.h),
// uploaded to the head unless it already holds that package, and named by its URI ("gcs://_torus_pkg_<hash>.zip").
//
// Example:
//   auto up = torus::client::UploadDirectory(*http, "./proj", {.excludes = {"*.ckpt"}});
//   job.working_dir = up->uri;  // "gcs://_torus_pkg_5f0c...zip"
//
// Thread-safety: functions over a caller's HttpApiClient (not thread-safe).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "torus/client/http_api_client.h"
#include "torus/package/pack.h"

namespace torus::client {

struct UploadedPackage {
  std::string uri;       // "gcs://<name>"
  std::string name;
  uint64_t size = 0;      // of the archive, when it was uploaded
  uint64_t files = 0;     // likewise
  bool uploaded = false;  // false: the head had it already
};

// Packs `dir` and uploads it unless the head has it. Errors name `dir`.
//
// With `name_cache` (a file; the CLI keeps one in its temp root), the package names of trees seen before are
// remembered by their metadata fingerprint (package::StampDirectory), so that submitting unchanged code again reads
// no file: only trees whose newest change is more than two seconds old are remembered or trusted.
absl::StatusOr<UploadedPackage> UploadDirectory(HttpApiClient& http, const std::string& dir,
                                                const package::PackOptions& options,
                                                const std::string& name_cache = "");

}  // namespace torus::client
