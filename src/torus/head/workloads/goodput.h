// Goodput of a gang run: how its wall time splits into waiting, start-up, productive work, lost work and restarts.
// Pure.
//
// The run's time from submission to its end (or now) is cut into consecutive parts, so that they sum to the wall
// time exactly:
//   queued     submission -> the first attempt's start (placement, waiting for capacity)
//   startup    each attempt's start -> its first report (process start, framework init, checkpoint restore, the
//              first step)
//   productive an attempt's first report -> its end, on steps that were kept: a failed attempt keeps the work up to
//              its last committed checkpoint (the next attempt resumes from there); an attempt that succeeded, was
//              stopped, or still runs keeps all of it
//   lost       a failed attempt's work after its last committed checkpoint, redone by the next attempt
//   restart    an attempt's end -> the next attempt's start (or the run's end / now, while it waits)
// goodput = productive / wall. Reports are any rank's (`torus_train.report`).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "torus/head/state/model.h"

namespace torus::head {

struct AttemptGoodput {
  int number = 0;
  int64_t waiting_ms = 0;  // before it started: queued (attempt 1) or restart (later ones)
  int64_t startup_ms = 0;
  int64_t productive_ms = 0;
  int64_t lost_ms = 0;
};

struct Goodput {
  int64_t wall_ms = 0;
  int64_t queued_ms = 0;
  int64_t startup_ms = 0;
  int64_t productive_ms = 0;
  int64_t lost_ms = 0;
  int64_t restart_ms = 0;
  double ratio = 0;  // productive / wall; 0 when wall is 0
  std::vector<AttemptGoodput> attempts;
};

// `now_ms` ends the time of a run that has not ended.
Goodput RunGoodput(const Run& run, int64_t now_ms);

}  // namespace torus::head
