#include "torus/head/workloads/goodput.h"

#include <algorithm>

namespace torus::head {

Goodput RunGoodput(const Run& run, int64_t now_ms) {
  Goodput g;
  const int64_t begin = run.created_time_ms;
  const int64_t end = std::max(begin, run.Terminal() && run.end_time_ms > 0 ? run.end_time_ms : now_ms);
  g.wall_ms = end - begin;
  int64_t at = begin;  // where the parts so far end
  // Each boundary is kept within [at, end], so that the parts stay consecutive.
  auto clamp = [&](int64_t t) { return std::clamp<int64_t>(t, at, end); };
  for (size_t i = 0; i < run.attempts.size(); ++i) {
    const RunAttempt& a = run.attempts[i];
    AttemptGoodput part{.number = a.number};
    const int64_t start = clamp(a.start_time_ms);
    part.waiting_ms = start - at;
    (i == 0 ? g.queued_ms : g.restart_ms) += part.waiting_ms;
    at = start;
    const int64_t a_end = clamp(a.ended() ? a.end_time_ms : end);
    const bool last = i + 1 == run.attempts.size();
    // Failed: it ended, and not as the run's success or stop.
    const bool failed = a.ended() && !(last && (run.status == RunStatus::kSucceeded || run.status == RunStatus::kStopped));
    if (a.first_report_ms == 0 || a.first_report_ms >= a_end) {
      part.startup_ms = a_end - at;
    } else {
      const int64_t first = clamp(a.first_report_ms);
      part.startup_ms = first - at;
      at = first;
      const int64_t kept = failed ? std::clamp<int64_t>(a.kept_until_ms, at, a_end) : a_end;
      part.productive_ms = kept - at;
      part.lost_ms = a_end - kept;
    }
    at = a_end;
    g.startup_ms += part.startup_ms;
    g.productive_ms += part.productive_ms;
    g.lost_ms += part.lost_ms;
    g.attempts.push_back(part);
  }
  // After the last attempt (or with none): waiting for the next one, or for the first.
  (run.attempts.empty() ? g.queued_ms : g.restart_ms) += end - at;
  g.ratio = g.wall_ms > 0 ? static_cast<double>(g.productive_ms) / static_cast<double>(g.wall_ms) : 0;
  return g;
}

}  // namespace torus::head
