// Starting a program detached from its parent: in a session of its own, stdin from /dev/null, output appended to a
// log file, signals unblocked and at their defaults. Used by the CLI for daemons and by the head's local slice
// provider for the commands that start simulated hosts.
//
// Thread-safety: thread-safe (posix_spawn).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace torus {

struct SpawnSpec {
  std::vector<std::string> argv;          // argv[0] is the executable path
  std::map<std::string, std::string> env; // the whole environment of the child
  std::string log_path;                   // stdout and stderr are appended here
};

// posix_spawn in a new session with stdin from /dev/null. Errors name the executable.
absl::StatusOr<pid_t> SpawnDaemon(const SpawnSpec& spec);

// The path of a torus binary installed beside the running program (e.g. "torus-head" beside `torus`).
std::string SiblingBinary(const std::string& name);

// This process's environment as a map.
std::map<std::string, std::string> CurrentEnvironment();

}  // namespace torus
