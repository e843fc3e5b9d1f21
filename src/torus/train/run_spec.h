// A gang run request (reference/semantics.md §8): what to run, on how many workers of which shape, and how to
// restart it; its validation into the reservation the head makes; and its REST JSON form. Pure functions;
// thread-safe.
//
// How a TPU run maps onto a slice group (sched/slice_group_policy.h). TPU per worker k comes from
// resources_per_worker (absent = a whole host); every alternative (primary and fallbacks) is checked against its
// own chips per host (cph) with ValidateTpuRequest (1, 2, 4, 8 or the whole host; k must divide cph).
//   k absent, or k = cph of every alternative -> bundle_unit host, resources_per_bundle without TPU: the policy
//       fills in each alternative's own cph, so a fallback with other hosts still gets whole hosts.
//   otherwise -> bundle_unit chip, TPU k per bundle: cph/k bundles per host, chips in aligned blocks.
// Workers of an alternative = chips x num_slices / k (k = cph for whole hosts) = hosts x num_slices x cph/k.
// Examples: v6e 4x4 x2 whole hosts -> 8 workers; TPU 1 -> 32 (chip unit); v6e 2x4 (one 8-chip host) TPU 4 -> 2.
// Chips per host is settled in the request when the user names it or the shape admits more than one (v5e/v6e
// 2x4: 8, the default, or 4), so that a shape always yields one worker count; a fallback without chips_per_host
// uses its shape's default. The label selector is AND-ed onto every alternative.
//
// A non-TPU run is a placement group of num_workers identical bundles under placement_strategy, the selector on
// every bundle.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "torus/common/resources.h"
#include "torus/sched/bundle_policy.h"
#include "torus/sched/slice_group_policy.h"

namespace torus::train {

inline constexpr char kDefaultStoragePath[] = "/tmp/torus/runs";
// The most workers a run may have (on every alternative): 10,000 hosts of 8 one-chip workers fit.
inline constexpr int kMaxWorkers = 100000;

struct ScalingConfig {
  std::optional<int> num_workers;  // TPU: derived when absent; otherwise required
  bool use_tpu = false;
  bool use_gpu = false;
  std::string accelerator_type;  // TPU only: "TPU-V6E"
  std::string topology;          // TPU only: "4x4"
  int num_slices = 1;            // TPU only
  std::optional<int> chips_per_host;
  // TPU default {CPU: 1, TPU: chips per host}; otherwise {CPU: 1}, plus GPU: 1 when use_gpu (also added to a
  // given set that has no GPU).
  std::optional<ResourceSet> resources_per_worker;
  std::string placement_strategy = "PACK";          // non-TPU
  std::map<std::string, std::string> label_selector;  // raw; parsed with LabelSelector::Parse
  struct Fallback {
    std::string accelerator_type, topology;
    int num_slices = 0;                 // 0 = as the primary
    std::optional<int> chips_per_host;  // absent = the shape's default
    bool operator==(const Fallback&) const = default;
  };
  std::vector<Fallback> fallbacks;  // TPU only
  bool operator==(const ScalingConfig&) const = default;
};

struct RunConfig {
  std::string name;          // empty = derived from the entrypoint (ApplyRunDefaults)
  std::string storage_path;  // empty = kDefaultStoragePath
  int max_failures = 0;      // -1 unlimited
  std::optional<int> checkpoints_to_keep;  // unset = all
  // How long the run waits for its slices each time (at first, and after a host loss to renew them) before it
  // fails; 0 = as long as it takes.
  int placement_timeout_s = 0;
  bool operator==(const RunConfig&) const = default;
};

struct RunSpec {
  ScalingConfig scaling;
  RunConfig run;
  std::vector<std::string> entrypoint;  // argv
  std::map<std::string, std::string> env;
  std::string working_dir;              // a path on the node, or a package URI ("gcs://<name>.zip")
  std::vector<std::string> py_modules;  // package URIs or paths on the node, put on PYTHONPATH
  bool operator==(const RunSpec&) const = default;
};

// What the head reserves for a validated spec: a slice group (TPU) or a placement group (CPU/GPU).
struct GangPlan {
  bool tpu = false;
  sched::SliceGroupRequest slice_request;  // tpu
  sched::BundleRequest bundle_request;     // !tpu
  int num_workers = 0;                     // for the primary shape
  int workers_per_host = 1;                // TPU: chips per host / TPU per worker (primary)
};

// Validates every field and builds the plan. An empty name or storage_path is accepted (ApplyRunDefaults fills
// them in). Errors (InvalidArgument) name the field; the exact ones of semantics §§7–8 include
//   "use_tpu and use_gpu cannot both be set"
//   "use_tpu requires accelerator_type and topology"
//   "num_workers=6 does not match TPU-V6E 4x4 x2 with 4 chips per worker; expected 8"
//   "TPU request of 3 chips is not supported; use 1, 2, 4 or 8 chips, or a whole host"
//   "topology \"4x5\" is not valid for TPU-V6E; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16"
// and, for fallback i (1-based), the same prefixed "fallback i: ". Others: TPU-only fields without use_tpu;
// placement_strategy other than PACK with use_tpu; TPU or GPU amounts where they do not belong; num_workers < 1;
// more than kMaxWorkers workers on any alternative;
// an empty entrypoint or program; a name not of 1-64 [a-z0-9-_.] starting with a letter or digit; a relative
// storage_path; max_failures < -1; checkpoints_to_keep < 1; placement_timeout_s < 0; an env name that is empty or
// has '='.
absl::StatusOr<GangPlan> PlanRun(const RunSpec& spec);

// For a plan placed on alternative `a` (0 = primary, i = fallback i): its number of workers (fallback shapes
// bring their own count). 0 for an alternative the plan does not have.
int WorkersForAlternative(const GangPlan& plan, int alternative);

// A run name from the entrypoint: the script (first argument ending in .py or .sh, without it), else the module
// of `-m module`, else the program's base name; lower-cased, other characters than [a-z0-9-_.] as '-', leading
// ones dropped, at most 64; "run" if nothing is left. A `/bin/sh -c "cmd"` entrypoint is read from cmd's words.
//   ["python3", "/src/train.py", "--lr=1"] -> "train";  ["python3", "-m", "pkg.Fit"] -> "pkg.fit"
std::string DefaultRunName(const std::vector<std::string>& entrypoint);

// The spec with an empty name (DefaultRunName) and storage_path (kDefaultStoragePath) filled in.
RunSpec ApplyRunDefaults(RunSpec spec);

// Parses the REST body. Fields: scaling_config.{num_workers, use_tpu, use_gpu, accelerator_type, topology,
// num_slices, chips_per_host, resources_per_worker, placement_strategy, label_selector,
// fallbacks[{accelerator_type, topology, num_slices, chips_per_host}]}, run_config.{name, storage_path,
// max_failures, checkpoints_to_keep, placement_timeout_s}, entrypoint (a list of strings, or a string run as /bin/sh -c), env
// (string map), working_dir, py_modules (list of strings). Optional values may be null (= absent). Checks types only; PlanRun checks values.
// Errors (InvalidArgument) name the field by its path:
//   `scaling_config: unknown field "num_worker"; accepted: num_workers, use_tpu, ...`
//   `scaling_config.num_workers: expected an integer, got "4"`, `duplicate field "env.A"`, `invalid JSON: ...`
absl::StatusOr<RunSpec> RunSpecFromJson(std::string_view json);

// The JSON form RunSpecFromJson reads back to an equal spec (the entrypoint always as a list; unset optional
// fields left out).
std::string RunSpecToJson(const RunSpec& spec);

}  // namespace torus::train
