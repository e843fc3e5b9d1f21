// The part of a workload's next step that is a change of state — its status records and the release of its group —
// applied inside a transaction, by the driver and by the services that change a workload on a user's request (a
// stop), so that the change is visible as soon as the request returns. Starting and stopping workers (agent calls)
// stay with the driver.
//
// Thread-safety: functions over a Txn (called under the store's lock).
#pragma once

#include <vector>

#include "torus/head/state/state_store.h"
#include "torus/head/workloads/job_machine.h"
#include "torus/head/workloads/run_machine.h"

namespace torus::head {

// Decides `job`'s step, applies its status update, and — when the job is (now) finished — ends its group, adding
// the group's bundles to `release`. Returns the step as decided after the update. A job that does not exist: an
// empty step.
JobStep ApplyJobStep(Txn& txn, const JobId& job, int64_t wall_ms, std::vector<HeldBundle>& release);

// The same for a run: settles the last attempt's cause, ends the attempt and finishes the run as its machine says,
// and ends its group when the run is finished.
RunStep ApplyRunStep(Txn& txn, const RunId& run, int64_t wall_ms, std::vector<HeldBundle>& release,
                     int64_t failure_window_ms = 4000);

}  // namespace torus::head
