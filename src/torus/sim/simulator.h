// Simulator: the loop body of torus-tpu-sim, the simulated libtpu of a local cluster's TPU host. Each Tick samples
// the host's workers (LoadSampler), turns their load into chip values (ChipModel), publishes them to the metrics
// service, and writes a libtpu-style log line whenever a chip gets or loses a holder.
//
// Thread-safety: not thread-safe; Tick from one thread (the service it publishes to is thread-safe).
#pragma once

#include <string>
#include <vector>

#include "torus/sim/chip_model.h"
#include "torus/sim/load_sampler.h"
#include "torus/sim/metric_service.h"
#include "torus/sim/tpu_log.h"

namespace torus::sim {

class Simulator {
 public:
  // `service` must outlive this; `log` may be null (no log file).
  Simulator(LoadSamplerOptions sampler, ChipModelOptions model, SimulatedMetricService* service, TpuLog* log);

  // One round: sample at monotonic `now_seconds`, publish values stamped `unix_nanos`.
  void Tick(double now_seconds, int64_t unix_nanos);

 private:
  LoadSampler sampler_;
  ChipModel model_;
  SimulatedMetricService* service_;
  TpuLog* log_;
  std::vector<ChipLoad> last_loads_;
};

// libtpu-style messages for chips whose holders changed from `before` to `after` (same length, or `before` empty
// for "nothing held"), e.g. "TPU chip 2 opened by pid 4242" and "TPU chip 2 released by pid 4242".
std::vector<std::string> HolderChanges(const std::vector<ChipLoad>& before, const std::vector<ChipLoad>& after);

// The lines a starting simulator logs: a banner saying it is a simulator, then one line per chip found.
std::vector<std::string> StartupLines(TpuGeneration generation, int chips, const std::string& address);

}  // namespace torus::sim
