// Committing gang checkpoints on the run's storage: every rank stages its files under
// `<storage>/.staging/attempt_<a>/step_<s>/rank_<r>/`; once every rank reported step s, the head merges the staged
// dirs into `<storage>/checkpoint_<s>/` (lower rank wins on a name clash), writes the commit marker
// `.torus_committed`, and keeps the newest `keep` committed checkpoints.
//
// Thread-safety: functions over the file system; callers serialise per run.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace torus::train {

inline constexpr char kCommitMarker[] = ".torus_committed";

// Checks that `staged` is a rank directory under `<storage>/.staging/` (no escaping through ".." or links).
absl::Status ValidateStagedDir(const std::string& storage, const std::string& staged);

// Merges the ranks' staged dirs into checkpoint_<step>, writes the marker (JSON with step and attempt), removes the
// step's staging dir. Returns the committed dir.
absl::StatusOr<std::string> CommitCheckpoint(const std::string& storage, int64_t step, int attempt,
                                             const std::map<int, std::string>& staged_by_rank);

// Committed checkpoints under storage (with a marker), ascending by step.
std::vector<std::pair<int64_t, std::string>> ListCommitted(const std::string& storage);

// Deletes all but the newest `keep` committed checkpoints; returns the deleted dirs.
std::vector<std::string> PruneCheckpoints(const std::string& storage, int keep);

}  // namespace torus::train
