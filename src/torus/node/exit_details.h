// What the agent can tell about a worker's end beyond its wait status, for the head to name the cause of a failure:
// the last lines of its output, the last error libtpu logged while it ran, and whether the kernel's OOM killer
// killed it.
//
// Thread-safety: pure functions over files; OomCounter is an immutable value.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace torus::node {

// The last `max_lines` lines of the file at `path`, read from at most its last `max_bytes` bytes (a cut first line
// is dropped), without a trailing newline. "" when the file is missing or empty.
std::string LastLines(const std::string& path, int max_lines, int64_t max_bytes);

// The last error ('E') or fatal ('F') line in glog's format ("E1201 22:27:25.123456 1234 file.cc:12] text") among
// the files directly in `dir` modified at or after `since_ms` (Unix ms), from the newest file's end; "" when none.
// Each file is read from at most its last 64 KiB.
std::string LastGlogError(const std::string& dir, int64_t since_ms);

// The count of OOM kills in a process's memory cgroup (cgroup v2 `memory.events`, v1 `memory.oom_control`, line
// `oom_kill N`). A worker killed by SIGKILL that torus did not send, while this count rose, was killed by the OOM
// killer (the count is per cgroup, so another process of the same cgroup killed at the same moment reads alike).
class OomCounter {
 public:
  // The counter of `pid`'s memory cgroup, read from `proc_root`/<pid>/cgroup and `cgroup_root`; nullopt when the
  // process has no memory cgroup whose file can be read.
  static std::optional<OomCounter> ForProcess(pid_t pid, const std::string& proc_root = "/proc",
                                              const std::string& cgroup_root = "/sys/fs/cgroup");
  // The current count; nullopt when the file cannot be read or holds no `oom_kill` line.
  std::optional<uint64_t> Read() const;
  const std::string& path() const { return path_; }

 private:
  explicit OomCounter(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// The `oom_kill N` count in the text of a memory.events or memory.oom_control file.
std::optional<uint64_t> ParseOomKillCount(const std::string& text);

}  // namespace torus::node
