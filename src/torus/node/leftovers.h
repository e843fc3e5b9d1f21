// Workers left behind by an earlier life of this agent. Every worker's environment carries
// TORUS_WORKER_OF=<the agent's work dir>, which its children inherit; a worker dies with its agent (parent-death
// signal), but processes it started do not. When the agent starts again with the same work dir it kills whatever
// still carries the mark, so that a restarted host never has stray processes holding its chips.
//
// Thread-safety: functions over /proc; call before starting workers.
#pragma once

#include <string>

namespace torus::node {

inline constexpr char kWorkerMarkVariable[] = "TORUS_WORKER_OF";

// SIGKILLs every process (other than this one) whose environment has TORUS_WORKER_OF=`work_dir`, reading
// <proc_root>/<pid>/environ. Returns how many were killed.
int KillLeftoverWorkers(const std::string& work_dir, const std::string& proc_root = "/proc");

}  // namespace torus::node
