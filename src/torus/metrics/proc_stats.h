// Host and process statistics from a proc filesystem: host CPU use (from /proc/stat deltas), host memory
// (/proc/meminfo: MemTotal - MemAvailable), and per-process CPU use and resident memory (/proc/<pid>/stat) summed
// over a worker's process tree. Only the pids asked about are read, never the whole of /proc.
//
// The parsers are pure. ProcReader is thread-safe (it only reads files). CpuRateTracker is not thread-safe; used on
// the metrics sampler's thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace torus::metrics {

// Aggregate CPU time of the host, in clock ticks.
struct HostCpuTimes {
  uint64_t busy = 0;   // user + nice + system + irq + softirq + steal
  uint64_t total = 0;  // busy + idle + iowait
};
// The "cpu " line of /proc/stat.
absl::StatusOr<HostCpuTimes> ParseProcStat(std::string_view text);
// CPU use between two readings, 0..100 (of all CPUs); nullopt when no time passed or the counters went back.
std::optional<double> HostCpuPercent(const HostCpuTimes& before, const HostCpuTimes& after);

struct HostMemory {
  int64_t total_bytes = 0;
  int64_t available_bytes = 0;
  int64_t used_bytes() const { return total_bytes - available_bytes; }
};
// MemTotal and MemAvailable (kB) of /proc/meminfo; kernels without MemAvailable: MemFree + Buffers + Cached.
absl::StatusOr<HostMemory> ParseMeminfo(std::string_view text);

// The fields of /proc/<pid>/stat that torus uses.
struct ProcessStat {
  pid_t pid = 0;
  char state = '?';             // 'Z' (zombie) and 'X' (dead) count as gone
  pid_t ppid = 0;
  pid_t pgrp = 0;
  uint64_t cpu_ticks = 0;       // utime + stime
  uint64_t start_ticks = 0;     // since boot; with pid, identifies the process across pid reuse
  int64_t rss_pages = 0;
};
// One /proc/<pid>/stat line; the command name may hold spaces and parentheses.
absl::StatusOr<ProcessStat> ParsePidStat(std::string_view text);

// Reads files under a proc root ("/proc", or a fixture directory in tests).
class ProcReader {
 public:
  explicit ProcReader(std::string proc_root = "/proc");

  absl::StatusOr<HostCpuTimes> ReadHostCpu() const;
  absl::StatusOr<HostMemory> ReadHostMemory() const;
  // NotFound when the process is gone (or a zombie).
  absl::StatusOr<ProcessStat> ReadProcess(pid_t pid) const;
  // `root` and its live descendants found through <proc>/<pid>/task/<tid>/children (kernels without that file:
  // `root` alone), at most `limit` processes, root first.
  std::vector<ProcessStat> ReadTree(pid_t root, size_t limit = 256) const;

  int64_t page_size() const { return page_size_; }
  int64_t ticks_per_second() const { return ticks_per_second_; }

 private:
  std::vector<pid_t> Children(pid_t pid) const;

  const std::string root_;
  int64_t page_size_;
  int64_t ticks_per_second_;
};

// Turns cumulative CPU ticks of process trees into percentages (100 = one CPU busy) between successive calls.
// A process first seen in a later round is counted from zero (it started since the previous round); a process that
// exited takes its last interval with it.
class CpuRateTracker {
 public:
  explicit CpuRateTracker(int64_t ticks_per_second) : ticks_per_second_(ticks_per_second) {}

  // The CPU use of tree `key` since the previous call for that key, or nullopt on the first call. `now_micros` is a
  // monotonic time.
  std::optional<double> Update(const std::string& key, const std::vector<ProcessStat>& tree, int64_t now_micros);
  // Forgets every key not in `live`.
  void Retain(const std::vector<std::string>& live);

 private:
  struct Previous {
    int64_t time_micros = 0;
    std::map<std::pair<pid_t, uint64_t>, uint64_t> ticks;  // (pid, start) -> cpu ticks
  };
  const int64_t ticks_per_second_;
  std::map<std::string, Previous> previous_;
};

}  // namespace torus::metrics
