// Starting simulated hosts into a `torus up` session: each host's device root (the TPU chips' or GPUs' device files
// as the kernel and driver show them), its simulated libtpu metrics server (TPU hosts), and its agent, started with
// the environment GKE gives a TPU pod so that it goes through the same detection as a real host. Used by `torus up`
// for the spec's hosts and by `torus node add-slice` for the slices the head's autoscaler launches.
//
// Thread-safety: used from the CLI's main thread.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/cli/cluster_spec.h"

namespace torus::cli {

struct SimulatedHostOptions {
  bool tpu_sim = true;                       // a simulated libtpu metrics server per TPU host
  std::optional<int64_t> metrics_period_ms;  // the agents' sampling period (their default when unset)
};

// Lays out every host's device root and starts its simulator (all first, so that they come up together), then each
// agent once its host's simulator serves. Returns host name -> agent pid. Does not wait for the agents to register.
absl::StatusOr<std::map<std::string, pid_t>> StartSimulatedHosts(const std::string& session,
                                                                 const std::string& head_address,
                                                                 const std::vector<SimulatedHost>& hosts,
                                                                 const SimulatedHostOptions& options);

}  // namespace torus::cli
