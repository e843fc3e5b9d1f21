// The CLI's session directories: `<root>/session_<time>_<pid>/` with `logs/`, a `processes` file recording each
// daemon it started (role, name, pid), and the `session_latest` symlink.
//
// Thread-safety: file-system functions; one CLI process writes a session at a time.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace torus::cli {

struct ProcessRecord {
  std::string role;  // "head", "node"
  std::string name;  // host name within the session
  pid_t pid = 0;
};

// Creates a fresh session directory with logs/ and points `<root>/session_latest` at it (atomically).
absl::StatusOr<std::string> CreateSession(const std::string& root);

// Appends one record to `<session>/processes`.
absl::Status RecordProcess(const std::string& session, const ProcessRecord& record);
// All records of a session, in the order they were written (a later record for a name supersedes earlier ones).
std::vector<ProcessRecord> ReadProcesses(const std::string& session);
// Every session directory under root, oldest first.
std::vector<std::string> AllSessions(const std::string& root);

}  // namespace torus::cli
