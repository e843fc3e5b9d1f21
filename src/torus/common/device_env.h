// Device-isolation environment for a worker given a subset of a host's TPU chips or GPUs
// (reference/tpu.md §4), chip-block allocation, and validation of TPU requests (semantics.md §7).
// Pure functions; thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "torus/common/tpu_shape.h"

namespace torus {

// Variables to set and to remove from a worker's environment. A key is never in both.
struct EnvChange {
  std::map<std::string, std::string> set;
  std::vector<std::string> unset;  // sorted
  // Applies the change to an environment map.
  void ApplyTo(std::map<std::string, std::string>& env) const;
};

// Environment for a worker holding `chips` (ascending chip indices) of a host with `host_chips` chips.
//   whole host -> sets nothing; removes TPU_VISIBLE_CHIPS (and the bounds vars when the host itself is sub-slice
//                 sized 1 or 2 chips... see tpu.md §4)
//   1 chip i   -> TPU_VISIBLE_CHIPS=i, TPU_CHIPS_PER_HOST_BOUNDS=1,1,1, TPU_HOST_BOUNDS=1,1,1,
//                 TPU_WORKER_ID=0, TPU_WORKER_HOSTNAMES=localhost; removes MEGASCALE_* (the known names) and
//                 TPU_PROCESS_ADDRESSES / TPU_PROCESS_PORT
//   2 chips    -> TPU_VISIBLE_CHIPS=i,i+1 with bounds 1,2,1;  4 of 8 -> bounds 2,2,1
//   none       -> JAX_PLATFORMS=cpu, PJRT_DEVICE=CPU (callers skip keys the user set)
// Errors: a count other than 1, 2, 4, 8 or the whole host; a chip index out of range; a block that is not
// contiguous and aligned; splitting a TPU7x host below... (TPU7x chips are whole chips, never halves).
absl::StatusOr<EnvChange> TpuIsolationEnv(TpuGeneration gen, int host_chips, const std::vector<int>& chips);

// CUDA_VISIBLE_DEVICES = indices ascending joined by ",", CUDA_DEVICE_ORDER=PCI_BUS_ID; empty list -> "".
EnvChange GpuIsolationEnv(const std::vector<int>& gpus);

// The lowest free aligned block of k chips (k·j … k·j+k−1) on a host whose chip i is busy iff busy[i];
// k = busy.size() means the whole host. Error (ResourceExhausted) when no aligned block is free;
// InvalidArgument when k is not 1, 2, 4, 8 or the whole host.
absl::StatusOr<std::vector<int>> AllocateChipBlock(const std::vector<bool>& busy, int k);

// Validates a TPU amount asked by a task, actor, gang worker or job entrypoint (semantics.md §7).
// `amount` is the raw number the user gave. `host_chips` is the whole-host count when known (0 = unknown).
// Messages exactly as semantics.md §7, e.g.
//   "TPU request of 3 chips is not supported; use 1, 2, 4 or 8 chips, or a whole host"
//   "TPU request of 0.5 chips is not supported; TPU is counted in whole chips; use 1, 2, 4 or 8 chips, or a whole host"
//   "TPU request of 16 chips is not supported; a host has at most 8 chips; use a slice group"
absl::Status ValidateTpuRequest(double amount, int host_chips = 0);

}  // namespace torus
