// TempDir: a new directory under the system's temporary directory (mkdtemp), removed with everything in it when the
// object goes; for tests. path() is its canonical path, empty if it could not be made.
// Thread-safety: not thread-safe; one owner.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace torus {

class TempDir {
 public:
  // `prefix` starts the directory's name ("torus_state_" gives /tmp/torus_state_XXXXXX).
  explicit TempDir(const std::string& prefix = "torus_test_") {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = std::filesystem::canonical(pattern).string();
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace torus
