// Test helpers for journals and state directories.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "torus/common/temp_dir.h"
#include "torus/head/state/journal.h"

namespace torus::head::testutil {

// A state directory for a test (common/temp_dir.h), named torus_state_XXXXXX.
class TempDir : public torus::TempDir {
 public:
  TempDir() : torus::TempDir("torus_state_") {}
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
