#include "torus/client/package_upload.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace torus::client {

absl::StatusOr<UploadedPackage> UploadDirectory(HttpApiClient& http, const std::string& dir,
                                                const package::PackOptions& options) {
  // The name first (a read of the files, no archive): a package the head has is not packed again.
  auto name = package::PackageNameOfDirectory(dir, options);
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
