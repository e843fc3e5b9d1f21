// Why a job or a gang attempt ended: the root cause first, then the symptoms after it. Pure.
//
// Each worker's end is a finding with a time: a host lost (when it was last heard from, since the loss began
// then), an operator's mark, a failed start, the kernel's OOM killer, a signal from outside torus, a libtpu error, a
// non-zero exit — or, never a cause, a stop by torus and a clean exit. The cause is the earliest finding (a host
// loss before an exit at the same moment), so that a rank whose collective broke because its peer's host died is
// told as a symptom of that host's loss, although its exit reached the head seconds before the host was declared
// dead. A user's stop is the cause whenever one was asked for.
//
//   host v6e-0-w2 lost (no heartbeat for 3.0 s); ranks 1, 3 exited 1 after their peer died; rank 0 stopped by torus
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "torus/common/strings.h"
#include "torus/head/state/model.h"

namespace torus::head {

enum class CauseKind {
  kNone,             // nothing failed (yet)
  kStopRequested,    // the user stopped it (torus train stop, torus job stop)
  kHostLost,         // a host's agent went silent: host or agent dead, or cut off
  kNodeMarkedDead,   // an operator marked a node dead (torus node mark-dead)
  kAgentRestarted,   // the agent of a host restarted or left
  kStartFailed,      // a worker could not be started (exec failed, ...)
  kOomKilled,        // the kernel's OOM killer killed a worker
  kSignal,           // a worker was killed by a signal from outside torus
  kAcceleratorError, // a worker failed after libtpu logged an error
  kExitCode,         // a worker exited non-zero
  kPlacement,        // the reservation could not be kept or renewed
};
// "stopped", "host_lost", "node_marked_dead", "agent_restarted", "start_failed", "oom_killed", "signal",
// "accelerator_error", "exit_code", "placement"; "" for kNone.
std::string CauseKindName(CauseKind kind);

struct Explanation {
  CauseKind kind = CauseKind::kNone;
  std::string text;     // one line: the cause, then the symptoms
  std::string details;  // the cause's own evidence: the failed worker's last output lines, libtpu's error line
  bool operator==(const Explanation&) const = default;
};

// A gang attempt: `workers` by rank (null for a rank whose worker is unknown); `stop_requested` when the user
// stopped the run. Workers still running are told as such.
Explanation ExplainAttempt(const std::vector<const Worker*>& workers, bool stop_requested);

// A job's one worker, ended.
Explanation ExplainWorker(const Worker& worker, bool stop_requested);

}  // namespace torus::head
