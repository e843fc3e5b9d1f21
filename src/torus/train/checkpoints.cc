#include "torus/train/checkpoints.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace torus::train {
namespace fs = std::filesystem;

absl::Status ValidateStagedDir(const std::string& storage, const std::string& staged) {
  std::error_code ec;
  fs::path root = fs::weakly_canonical(fs::path(storage) / ".staging", ec);
  fs::path dir = fs::weakly_canonical(staged, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("checkpoint \"", staged, "\" cannot be resolved"));
  auto [root_end, dir_it] = std::mismatch(root.begin(), root.end(), dir.begin(), dir.end());
  if (root_end != root.end() || dir == root) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint \"", staged, "\" is not staged under ", root.string(), "; report it with torus_train"));
  }
  if (!fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint \"", staged, "\" is not a directory"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CommitCheckpoint(const std::string& storage, int64_t step, int attempt,
                                             const std::map<int, std::string>& staged_by_rank) {
  fs::path target = fs::path(storage) / absl::StrCat("checkpoint_", step);
  fs::path partial = fs::path(storage) / absl::StrCat(".checkpoint_", step, ".partial");
  std::error_code ec;
  fs::remove_all(partial, ec);
  fs::create_directories(partial, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", partial.string(), ": ", ec.message()));
  for (const auto& [rank, staged] : staged_by_rank) {  // ascending rank: the lowest rank wins a name clash
    for (const auto& entry : fs::directory_iterator(staged, ec)) {
      fs::path dest = partial / entry.path().filename();
      if (fs::exists(dest)) continue;
      fs::rename(entry.path(), dest, ec);
      if (ec) return absl::InternalError(absl::StrCat("cannot move ", entry.path().string(), ": ", ec.message()));
    }
  }
  {
    std::ofstream marker(partial / kCommitMarker);
    marker << "{\"step\": " << step << ", \"attempt\": " << attempt << ", \"ranks\": " << staged_by_rank.size()
           << "}\n";
    if (!marker) return absl::InternalError("cannot write the commit marker");
  }
  fs::remove_all(target, ec);
  fs::rename(partial, target, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot commit ", target.string(), ": ", ec.message()));
  fs::remove_all(fs::path(storage) / ".staging" / absl::StrCat("attempt_", attempt) / absl::StrCat("step_", step), ec);
  return target.string();
}

std::vector<std::pair<int64_t, std::string>> ListCommitted(const std::string& storage) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(storage, ec)) {
    std::string name = entry.path().filename().string();
    int64_t step = 0;
    if (name.rfind("checkpoint_", 0) != 0 || !absl::SimpleAtoi(name.substr(11), &step)) continue;
    if (!fs::exists(entry.path() / kCommitMarker)) continue;
    out.emplace_back(step, entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> PruneCheckpoints(const std::string& storage, int keep) {
  std::vector<std::string> deleted;
  auto committed = ListCommitted(storage);
  std::error_code ec;
  for (size_t i = 0; i + keep < committed.size(); ++i) {
    fs::remove_all(committed[i].second, ec);
    deleted.push_back(committed[i].second);
  }
  return deleted;
}

}  // namespace torus::train
