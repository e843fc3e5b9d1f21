// LogFiles: the log files of this host that the agent serves, by name:
//   agent               the agent's own log (the regular file behind its stdout, when it is one)
//   tpu/<file>          a regular file directly under libtpu's log directory (default /tmp/tpu_logs)
//   workers/<worker id> a worker's stdout + stderr (<worker log dir>/<worker id>.log)
// Only names of that form are served; symbolic links are never listed or followed, so nothing outside the three
// places can be read.
//
// Thread-safety: thread-safe (immutable after construction; every call reads the file system afresh).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace torus::node {

struct LogFilesOptions {
  std::string agent_log;       // path of the agent's log; empty = none
  std::string tpu_log_dir;     // libtpu's log directory; listed whenever it exists
  std::string worker_log_dir;  // the WorkerSupervisor's log root
};

struct LogFileEntry {
  std::string name;  // "agent", "tpu/<file>", "workers/<worker id>"
  int64_t size = 0;
  int64_t modified_ms = 0;  // Unix ms
};

struct LogRead {
  std::string data;
  int64_t offset = 0;  // where `data` starts
  int64_t size = 0;    // the file's size when read
};

inline constexpr int64_t kDefaultLogReadBytes = 64 * 1024;
inline constexpr int64_t kMaxLogReadBytes = 1024 * 1024;

class LogFiles {
 public:
  explicit LogFiles(LogFilesOptions options) : options_(std::move(options)) {}

  // Every servable file, ordered by name (agent, tpu/..., workers/...).
  std::vector<LogFileEntry> List() const;

  // Up to `max_bytes` (0 = 64 KiB; more than 1 MiB = 1 MiB) of file `name` from `offset` (negative: that many bytes
  // before the end; past the end: nothing, at the end). InvalidArgument naming the field for a malformed name
  // (empty, absolute, holding "..", an unknown prefix) or a negative max_bytes; NotFound for a well-formed name that
  // is not a servable file now.
  absl::StatusOr<LogRead> Read(const std::string& name, int64_t offset, int64_t max_bytes) const;

  const std::string& tpu_log_dir() const { return options_.tpu_log_dir; }

 private:
  // The path behind a well-formed name (not yet checked to exist), or why the name is malformed.
  absl::StatusOr<std::string> PathOf(const std::string& name) const;

  const LogFilesOptions options_;
};

// The file behind this process's stdout when it is a regular file (readlink of /proc/self/fd/1), else empty.
std::string DetectStdoutLogFile();

}  // namespace torus::node
