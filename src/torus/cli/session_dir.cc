#include "torus/cli/session_dir.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace torus::cli {

absl::StatusOr<std::string> CreateSession(const std::string& root) {
  namespace fs = std::filesystem;
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm;
  localtime_r(&t, &tm);
  int64_t micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::string name = absl::StrFormat("session_%04d-%02d-%02d_%02d-%02d-%02d_%06d_%d", tm.tm_year + 1900,
                                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, micros, getpid());
  fs::path dir = fs::path(root) / name;
  std::error_code ec;
  fs::create_directories(dir / "logs", ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  fs::path tmp_link = fs::path(root) / absl::StrCat(".session_latest.", getpid());
  fs::remove(tmp_link, ec);
  fs::create_directory_symlink(name, tmp_link, ec);
  if (!ec) fs::rename(tmp_link, fs::path(root) / "session_latest", ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot update session_latest under ", root, ": ", ec.message()));
  return dir.string();
}

absl::Status RecordProcess(const std::string& session, const ProcessRecord& record) {
  std::ofstream out(session + "/processes", std::ios::app);
  if (!(out << record.role << " " << record.name << " " << record.pid << "\n")) {
    return absl::InternalError(absl::StrCat("cannot write ", session, "/processes"));
  }
  return absl::OkStatus();
}

std::vector<ProcessRecord> ReadProcesses(const std::string& session) {
  std::vector<ProcessRecord> records;
  std::ifstream in(session + "/processes");
  // Line by line: a line that does not parse (one half written when its writer died) hides none after it.
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    ProcessRecord r;
    if (fields >> r.role >> r.name >> r.pid) records.push_back(r);
  }
  return records;
}

std::vector<std::string> AllSessions(const std::string& root) {
  std::vector<std::string> sessions;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    if (entry.is_directory() && !entry.is_symlink() && entry.path().filename().string().rfind("session_", 0) == 0) {
      sessions.push_back(entry.path().string());
    }
  }
  std::sort(sessions.begin(), sessions.end());
  return sessions;
}

}  // namespace torus::cli
