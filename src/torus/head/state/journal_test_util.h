// Test helpers for journals and state directories.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "torus/head/state/journal.h"

namespace torus::head::testutil {

// A new directory under the system's temporary directory (for a state directory), removed with its contents when
// this goes out of scope. path() is empty if it could not be made.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "torus_state_XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) path_ = std::filesystem::canonical(pattern).string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Hands a journal the test keeps to a store: several stores can open it in turn (a head, then the head that
// replaces it), and the test can look into it while a store holds it.
class SharedJournal final : public Journal {
 public:
  explicit SharedJournal(Journal* inner) : inner_(inner) {}
  absl::StatusOr<Contents> Load() override { return inner_->Load(); }
  absl::Status Append(const std::vector<std::string>& records) override { return inner_->Append(records); }
  uint64_t position() const override { return inner_->position(); }
  absl::Status Compact(const std::string& snapshot, uint64_t through) override {
    return inner_->Compact(snapshot, through);
  }
  uint64_t records_since_snapshot() const override { return inner_->records_since_snapshot(); }
  std::string location() const override { return inner_->location(); }

 private:
  Journal* inner_;
};

}  // namespace torus::head::testutil
