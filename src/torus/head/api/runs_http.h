// Gang runs over HTTP (the head's JSON API):
//
//   POST /api/v0/runs                    body: the run spec (train/run_spec.h) -> {"run_id", "name"}
//   GET  /api/v0/runs                    [run]
//   GET  /api/v0/runs/{id or name}       run: status, attempts with ranks and metrics, committed checkpoints
//   POST /api/v0/runs/{id}/stop          {"stopped": bool}
//   GET  /api/v0/runs/{id}/logs?rank=R[&attempt=A][&offset=O][&max_bytes=N]
//                                        {"data", "next_offset", "finished", "attempt"}
//   GET  /api/v0/runs/{id}/logs?ranks=all[&attempt=A][&offsets=O0,O1,...][&max_bytes=N]
//                                        every rank at once (read in parallel), rank r from O<r> (default 0):
//                                        {"attempt", "ranks": [{"rank", "data", "next_offset", "finished"} or
//                                        {"rank", "error"}]}; N per rank, default 256 KiB
//   POST /api/v0/runs/{id}/report        a worker's report, with the run's own token (torus_train.report)
//
// Thread-safety: handlers call the thread-safe RunService.
#pragma once

#include <httplib.h>

#include "torus/head/workloads/run_service.h"

namespace torus::head {

void RegisterRunRoutes(httplib::Server& server, RunService* runs);

}  // namespace torus::head
