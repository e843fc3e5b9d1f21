#include "torus/client/package_upload.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace torus::client {

namespace {

constexpr size_t kMaxRemembered = 256;
constexpr int64_t kTrustAfterNs = 2'000'000'000;  // a change within this of now may share its time stamp with another

std::vector<std::pair<std::string, std::string>> ReadNameCache(const std::string& path) {
  std::vector<std::pair<std::string, std::string>> entries;
  std::ifstream in(path);
  std::string fingerprint, name;
  while (in >> fingerprint >> name) entries.emplace_back(fingerprint, name);
  return entries;
}

// The name of `dir`'s package: remembered by the tree's fingerprint, or read from every file (and remembered).
absl::StatusOr<std::string> NameOf(const std::string& dir, const package::PackOptions& options,
                                   const std::string& cache) {
  if (cache.empty()) return package::PackageNameOfDirectory(dir, options);
  auto stamp = package::StampDirectory(dir, options);
  if (!stamp.ok()) return stamp.status();
  const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  const bool settled = stamp->newest_change_ns < now_ns - kTrustAfterNs;
  auto entries = ReadNameCache(cache);
  if (settled) {
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
      if (it->first == stamp->fingerprint) return it->second;
    }
  }
  auto name = package::PackageNameOfDirectory(dir, options);
  if (!name.ok() || !settled) return name;
  entries.emplace_back(stamp->fingerprint, *name);
  if (entries.size() > kMaxRemembered) entries.erase(entries.begin(), entries.end() - kMaxRemembered / 2);
  // Written whole and renamed into place: a concurrent reader sees the old list or the new one.
  const std::string tmp = absl::StrCat(cache, ".", ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& [f, n] : entries) out << f << " " << n << "\n";
  }
  std::error_code ec;
  std::filesystem::rename(tmp, cache, ec);
  if (ec) std::filesystem::remove(tmp, ec);  // remembering is an optimisation; failing it is not an error
  return name;
}

}  // namespace

absl::StatusOr<UploadedPackage> UploadDirectory(HttpApiClient& http, const std::string& dir,
                                                const package::PackOptions& options, const std::string& name_cache) {
  // The name first (no archive): a package the head has is not packed again.
  auto name = NameOf(dir, options, name_cache);
  if (!name.ok()) return name.status();
  UploadedPackage out{absl::StrCat("gcs://", *name), *name, 0, 0, false};
  auto exists = http.PackageExists(*name);
  if (!exists.ok()) return exists.status();
  if (*exists) return out;
  std::string zip = (std::filesystem::temp_directory_path() / "torus-package-XXXXXX").string();
  const int fd = ::mkstemp(zip.data());
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create a temporary file for packing ", dir));
  ::close(fd);
  struct Remove {
    std::string path;
    ~Remove() { ::unlink(path.c_str()); }
  } remove{zip};
  auto packed = package::PackDirectory(dir, zip, options);
  if (!packed.ok()) return packed.status();
  out.size = packed->size;
  out.files = packed->files;
  std::ifstream in(zip, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  if (!in) return absl::InternalError(absl::StrCat("cannot read the package of ", dir, " back from ", zip));
  auto stored = http.PutPackage(packed->name, bytes.str());
  if (!stored.ok()) {
    return absl::Status(stored.status().code(), absl::StrCat("upload of ", dir, ": ", stored.status().message()));
  }
  out.uploaded = *stored;
  return out;
}

}  // namespace torus::client
