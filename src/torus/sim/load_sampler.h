// LoadSampler: measures, from a /proc tree, how busy the workers bound to each TPU chip of one simulated host are.
// Part of torus-tpu-sim, the simulator of libtpu's metrics service for local clusters.
//
// A process counts for this host when its environment (<proc_root>/<pid>/environ) holds
// TORUS_WORKER_OF=<worker mark> (the agent's work dir, which the agent sets for every worker). Such a process with
// TPU_VISIBLE_CHIPS="0,2" holds chips 0 and 2; one with TPU_WORKER_ID but no TPU_VISIBLE_CHIPS (a whole-host TPU
// worker: its framework opens every chip) holds all of them. A descendant (by parent pid) of a holder that lacks its own
// TPU_VISIBLE_CHIPS counts for its nearest holding ancestor. CPU usage comes from the utime+stime deltas of
// <pid>/stat between two samples, memory from its resident set; both are split evenly over the chips a process
// holds. Zombies (state Z) are dead.
//
// Example: holder A (TPU_VISIBLE_CHIPS=0,1) used 1.2 CPU-seconds over a 1 s interval and has 400 MB resident;
// then chips 0 and 1 each get cpu_percent 60 and rss_bytes 200 MB, holders {A}.
//
// Thread-safety: not thread-safe; owned and called by one sampling thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace torus::sim {

// The load on one chip, as of one sample.
struct ChipLoad {
  std::vector<pid_t> holders;  // processes with this chip in their TPU_VISIBLE_CHIPS, ascending
  double cpu_percent = 0;      // CPU of holders and their descendants, split over their chips (100 = one core)
  int64_t rss_bytes = 0;       // resident memory, split the same way

  bool held() const { return !holders.empty(); }
};

struct LoadSamplerOptions {
  std::string proc_root = "/proc";
  std::string worker_mark;        // the value of TORUS_WORKER_OF to match
  int chips = 0;                  // chips of this host: indices 0..chips-1 (others in TPU_VISIBLE_CHIPS are ignored)
  int64_t ticks_per_second = 100; // sysconf(_SC_CLK_TCK)
  int64_t page_size = 4096;       // sysconf(_SC_PAGESIZE)
};

class LoadSampler {
 public:
  explicit LoadSampler(LoadSamplerOptions options);

  // Reads the proc tree once; `now_seconds` is a monotonic time. Returns one ChipLoad per chip. CPU usage is the
  // delta since the previous call (0 on the first call, and for a process first seen in this call).
  std::vector<ChipLoad> Sample(double now_seconds);

 private:
  // A process is known by pid and start time, so that a reused pid does not inherit another's CPU ticks.
  using ProcessKey = std::pair<pid_t, uint64_t>;

  LoadSamplerOptions options_;
  std::string mark_;  // "TORUS_WORKER_OF=<worker_mark>"
  std::map<ProcessKey, uint64_t> last_ticks_;
  double last_time_ = -1;
};

// Parses TPU_VISIBLE_CHIPS ("0,1,3"); entries outside [0, chips) or not integers are skipped, duplicates dropped.
std::vector<int> ParseVisibleChips(const std::string& text, int chips);

}  // namespace torus::sim
