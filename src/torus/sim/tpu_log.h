// TpuLog: the libtpu-style log that torus-tpu-sim writes under --log-dir, so that a local cluster has TPU runtime
// logs for the agent to pick up. Simulated: lines follow glog's format, as libtpu's do
//   I0612 10:11:12.123456    1234 tpu_sim.cc:0] <text>
// and the file is named like libtpu's glog files (exact libtpu names are unconfirmed, tpu.md §7):
//   tpu_driver.<host>.<user>.log.INFO.<yyyymmdd-hhmmss>.<pid>
// No `tpu_driver.INFO` symlink is made, so that a reader of the directory sees each line once.
//
// Thread-safety: thread-safe (one mutex around the file).
#pragma once

#include <sys/types.h>

#include <fstream>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace torus::sim {

class TpuLog {
 public:
  // Creates `dir` if needed and opens a new log file in it, named for `host` and the current user and time.
  static absl::StatusOr<std::unique_ptr<TpuLog>> Open(const std::string& dir, const std::string& host);

  // Appends one line of severity 'I', 'W' or 'E', and flushes it.
  void Write(char severity, const std::string& text);
  void Info(const std::string& text) { Write('I', text); }
  void Warning(const std::string& text) { Write('W', text); }

  const std::string& path() const { return path_; }

 private:
  TpuLog(std::string path, std::ofstream out) : path_(std::move(path)), out_(std::move(out)) {}

  const std::string path_;
  absl::Mutex mu_;
  std::ofstream out_ ABSL_GUARDED_BY(mu_);
};

// One glog-format line (with its newline), in local time, e.g. "I0612 10:11:12.123456    1234 tpu_sim.cc:0] hi\n".
std::string FormatGlogLine(char severity, absl::Time when, absl::TimeZone zone, pid_t tid, const std::string& text);

// The file name for a log opened at `when`: "tpu_driver.<host>.<user>.log.INFO.<yyyymmdd-hhmmss>.<pid>".
std::string GlogFileName(const std::string& host, const std::string& user, absl::Time when, absl::TimeZone zone,
                         pid_t pid);

}  // namespace torus::sim
