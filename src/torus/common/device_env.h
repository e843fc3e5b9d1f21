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
  bool operator==(const EnvChange&) const = default;
};

// Environment for a worker holding `chips` (chip indices, tpu.md §3 order) of a host with `host_chips` chips.
// Sub-host workers get the full set of variables rather than TPU_VISIBLE_CHIPS alone, so that bounds a worker
// would otherwise inherit never contradict its chips (Ray's ray#66400).
//   whole host (chips = 0..host_chips-1) -> sets nothing: the host's detected TPU_* pass through. Removes
//       TPU_VISIBLE_CHIPS, and TPU_CHIPS_PER_HOST_BOUNDS with TPU_HOST_BOUNDS only when `inherited` holds
//       sub-host bounds: chips-per-host bounds covering fewer chips than the host (1,1,1 or 1,2,1 on a 4- or
//       8-chip host, 2,2,1 on an 8-chip one), left by an earlier isolation. The host's own bounds (a multi-host
//       slice's 2,2,1 on GKE) are kept.
//   1 chip i   -> TPU_VISIBLE_CHIPS=i, TPU_CHIPS_PER_HOST_BOUNDS=1,1,1, TPU_HOST_BOUNDS=1,1,1,
//                 TPU_WORKER_ID=0, TPU_WORKER_HOSTNAMES=localhost; removes MEGASCALE_COORDINATOR_ADDRESS,
//                 MEGASCALE_NUM_SLICES, MEGASCALE_PORT, MEGASCALE_SLICE_ID, TPU_PROCESS_ADDRESSES and
//                 TPU_PROCESS_PORT (a sub-host worker is a slice of its own, never part of a multi-host job)
//   2 chips    -> the same with TPU_VISIBLE_CHIPS=i,i+1 and bounds 1,2,1;  4 of 8 -> i,...,i+3 and 2,2,1
//   none       -> JAX_PLATFORMS=cpu, PJRT_DEVICE=CPU, so a stray JAX import does not lock the host's chips
//                 (callers skip keys the user set); host_chips is not checked, a host that detected no chips
//                 gets the same guard
// `chips` may come in any order. Errors (InvalidArgument): host_chips not one of the generation's
// ValidChipsPerHost; a count other than 1, 2, 4, 8 or the whole host; a chip index out of range or repeated;
// a block that is not contiguous and aligned (starting at a multiple of its size). TPU7x chips are counted
// whole, so its two devices per chip always go together.
// `inherited` is the environment the worker would otherwise start with; only the whole-host case reads it.
absl::StatusOr<EnvChange> TpuIsolationEnv(TpuGeneration gen, int host_chips, const std::vector<int>& chips,
                                          const std::map<std::string, std::string>& inherited = {});

// CUDA_VISIBLE_DEVICES = indices ascending (duplicates dropped) joined by ",", and CUDA_DEVICE_ORDER=PCI_BUS_ID
// so that CUDA numbers devices as NVML does; an empty list sets CUDA_VISIBLE_DEVICES= (empty: no GPU).
EnvChange GpuIsolationEnv(const std::vector<int>& gpus);

// The lowest free aligned block of k chips (k·j … k·j+k−1) on a host whose chip i is busy iff busy[i];
// k = busy.size() means the whole host. Lowest-first keeps large aligned blocks free for later workers.
// Error (ResourceExhausted) when no aligned block is free; InvalidArgument when k is not 1, 2, 4, 8 or the
// whole host, or is larger than the host.
// Example: busy = {1,0,0,0,0,0,0,0}, k = 2 -> {2, 3}; k = 4 -> {4, 5, 6, 7}; k = 8 -> ResourceExhausted.
absl::StatusOr<std::vector<int>> AllocateChipBlock(const std::vector<bool>& busy, int k);

// Validates a TPU amount asked by a task, actor, gang worker or job entrypoint (semantics.md §7).
// `amount` is the raw number the user gave; 0 (no TPU) is valid. `host_chips` is the whole-host count when
// known (0 = unknown); a request of exactly that many chips is a whole host, and a known host also lowers the
// limit of the last message below from 8 to its own count. InvalidArgument messages exactly as semantics.md §7:
//   "TPU request of 3 chips is not supported; use 1, 2, 4 or 8 chips, or a whole host"
//   "TPU request of 0.5 chips is not supported; TPU is counted in whole chips; use 1, 2, 4 or 8 chips, or a whole host"
//   "TPU request of 16 chips is not supported; a host has at most 8 chips; use a slice group"
absl::Status ValidateTpuRequest(double amount, int host_chips = 0);

}  // namespace torus
