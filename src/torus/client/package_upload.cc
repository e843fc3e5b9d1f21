#include "torus/client/package_upload.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "torus/package/unpack.h"

namespace torus::client {

namespace {

constexpr size_t kMaxRemembered = 256;
constexpr int64_t kTrustAfterNs = 2'000'000'000;  // a change within this of now may share its time stamp with another

std::vector<std::pair<std::string, std::string>> ReadNameCache(const std::string& path) {
  std::vector<std::pair<std::string, std::string>> entries;
  // Only a list this user wrote is believed (the temp root may be shared with others).
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) return entries;
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
  // Written whole to a new file of its own (never through a planted link) and renamed into place: a concurrent
  // reader sees the old list or the new one.
  std::string tmp = cache + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return name;  // remembering is an optimisation; failing it is not an error
  std::string text;
  for (const auto& [f, n] : entries) absl::StrAppend(&text, f, " ", n, "\n");
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written || ::rename(tmp.c_str(), cache.c_str()) != 0) ::unlink(tmp.c_str());
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
  // What was packed is what is sent and named (a file may have changed since the name was computed).
  out.name = packed->name;
  out.uri = absl::StrCat("gcs://", packed->name);
  out.size = packed->size;
  out.files = packed->files;
  std::ifstream in(zip, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  if (!in) return absl::InternalError(absl::StrCat("cannot read the package of ", dir, " back from ", zip));
  // The head's own checks, before the upload rather than after it (an absolute symlink, say a virtualenv's).
  if (absl::Status s = package::CheckZip(bytes.str(), package::ZipLimits{}); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(dir, " cannot be sent: ", s.message()));
  }
  auto stored = http.PutPackage(packed->name, bytes.str());
  if (!stored.ok()) {
    return absl::Status(stored.status().code(), absl::StrCat("upload of ", dir, ": ", stored.status().message()));
  }
  out.uploaded = *stored;
  return out;
}

}  // namespace torus::client
