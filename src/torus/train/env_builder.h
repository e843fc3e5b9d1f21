// The distributed environment of every worker of a gang run, computed from the actual placement at each (re)start
// (reference/semantics.md §8, tpu.md §§4 and 6). Pure functions; thread-safe.
//
// Worked example: a TPU-V6E 4x4 x2 run, one worker per host (8 ranks); rank 5 is slice 1, worker 1:
//   RANK=5 WORLD_SIZE=8 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 NODE_RANK=5 MASTER_ADDR=<rank 0 host> MASTER_PORT=<port>
//   JAX_COORDINATOR_ADDRESS=<rank 0 host>:<jax port> JAX_NUM_PROCESSES=8 JAX_PROCESS_ID=5 JAX_PLATFORMS=tpu
//   TPU_WORKER_ID=1 TPU_WORKER_HOSTNAMES=<slice 1 hosts in worker order>
//   MEGASCALE_COORDINATOR_ADDRESS=<rank 0 host> MEGASCALE_PORT=8081 MEGASCALE_NUM_SLICES=2 MEGASCALE_SLICE_ID=1
//   TORUS_RUN_NAME TORUS_RUN_ID TORUS_ATTEMPT TORUS_RANK=5 TORUS_WORLD_SIZE=8 TORUS_SLICE_ID=1 ...
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/common/device_env.h"
#include "torus/common/tpu_shape.h"

namespace torus::train {

// Where one rank runs.
struct RankPlacement {
  std::string node_id;
  std::string address;              // the host's IP (MASTER_ADDR etc. use rank 0's)
  // TPU
  std::string slice_name;           // empty for non-TPU runs
  int slice_index = 0;              // 0..num_slices-1 in slice-group order
  int tpu_worker_id = -1;           // the host's worker id in its slice
  std::vector<int> chips;           // chips of the host this rank holds (ascending)
  int host_chips = 0;               // chips the host has
  // GPU
  std::vector<int> gpus;            // GPU indices this rank holds
};

struct GangEnvInput {
  std::string run_id;
  std::string run_name;
  int attempt = 1;                                  // 1-based
  std::string storage_path;                         // <storage_path>/<run name>
  std::string checkpoint_dir;                       // latest committed, or "" on a fresh start
  std::string report_url;
  std::string run_token;
  std::optional<TpuGeneration> tpu_generation;      // set for TPU runs
  bool use_gpu = false;
  std::vector<RankPlacement> ranks;                 // rank order (= bundle order)
  // Hosts of each slice in worker-id order (addresses), by slice_index. TPU runs only.
  std::vector<std::vector<std::string>> slice_hosts;
  // Topology of each slice ("4x4"), by slice_index. TPU runs only.
  std::vector<std::string> slice_topologies;
  int master_port = 0;                              // free port on rank 0's host
  int jax_port = 0;                                 // free port on rank 0's host for the JAX coordinator
  std::map<std::string, std::string> user_env;      // runtime env of the run; wins except where noted
};

// One EnvChange per rank, to apply to the environment the agent would otherwise start the worker with.
//
// Precedence. The user's env (user_env) is copied into every rank's `set` and wins over torus's values, except:
//   - identity, always from the placement: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK,
//     JAX_NUM_PROCESSES, JAX_PROCESS_ID and the TORUS_* variables this function writes;
//   - TPU topology: TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, and MEGASCALE_COORDINATOR_ADDRESS, MEGASCALE_NUM_SLICES,
//     MEGASCALE_SLICE_ID; MEGASCALE_PORT keeps a user's value (else 8081). A single-slice run removes all four
//     MEGASCALE_* (stale ones, a user's included);
//   - device isolation, applied last so that it wins over everything above: TpuIsolationEnv (its `inherited` is
//     user_env, so a user's stale sub-host bounds are dropped for a whole host) or GpuIsolationEnv.
// A sub-host rank (fewer chips than its host) is a slice of its own, as tpu.md §4 says: isolation gives it
// TPU_WORKER_ID=0, TPU_WORKER_HOSTNAMES=localhost and removes MEGASCALE_* even in a multislice run; its JAX
// coordinator variables still join it to the whole gang. MASTER_ADDR, MASTER_PORT, JAX_COORDINATOR_ADDRESS and
// JAX_PLATFORMS (=tpu, TPU runs only) are defaults a user's value replaces. JAX variables are set for every run;
// an IPv6 rank-0 address is bracketed in JAX_COORDINATOR_ADDRESS ("[fd00::1]:29501"). Non-TPU runs remove
// TORUS_SLICE_ID. TORUS_CHECKPOINT_DIR is set even when empty (a fresh start).
//
// NODE_RANK numbers hosts (by node_id) in order of first appearance in rank order; LOCAL_RANK is the number of
// earlier ranks on the same host, LOCAL_WORLD_SIZE the run's ranks on it. MEGASCALE_NUM_SLICES is
// slice_hosts.size(), MEGASCALE_COORDINATOR_ADDRESS rank 0's address (no port).
//
// Errors (InvalidArgument) name the rank and field: empty ranks; a rank without node_id or address; attempt < 1;
// a port out of 1..65535 where it is used (master_port unless the user set MASTER_PORT, jax_port unless the user
// set JAX_COORDINATOR_ADDRESS); both a TPU generation and use_gpu; for TPU runs: no slice_hosts, a slice_index
// outside them, a rank with no chips, chips that TpuIsolationEnv refuses ("rank 3: ..."), two ranks sharing a chip
// of one host, a whole-host rank whose tpu_worker_id is not a host of its slice.
absl::StatusOr<std::vector<EnvChange>> BuildGangEnv(const GangEnvInput& input);

}  // namespace torus::train
