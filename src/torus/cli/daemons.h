// Starting and stopping torus daemons from the CLI: spawn detached (own session, output to a log file),
// record pids, and stop them by pid (SIGTERM, then SIGKILL after a grace period).
//
// Thread-safety: functions over process state; not meant for concurrent use on the same pids.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/common/spawn.h"

namespace torus::cli {

using torus::SpawnSpec;
using torus::SpawnDaemon;
using torus::SiblingBinary;
using torus::CurrentEnvironment;

// True when `pid` runs and is not a zombie.
bool ProcessAlive(pid_t pid);
// True when `pid` is alive and its executable name starts with "torus" or is "etcd" (the members `torus up --ha`
// starts): a guard against reused pids.
bool IsTorusProcess(pid_t pid);

// Sends SIGTERM to each live torus pid, waits up to `grace` for them to exit, then SIGKILLs the rest.
// Returns how many were running.
int StopProcesses(const std::vector<pid_t>& pids, std::chrono::milliseconds grace);

// Waits up to `timeout` for `pid` to exit; returns true if it exited.
bool WaitForExit(pid_t pid, std::chrono::milliseconds timeout);

// A loopback TCP port free at the time of the call (bound, read, closed): for daemons whose ports must be known
// before they start (standby heads, etcd members).
absl::StatusOr<int> FreeLoopbackPort();

// The last `max_lines` lines of a log file, for error messages.
std::string TailOfFile(const std::string& path, int max_lines);

}  // namespace torus::cli
