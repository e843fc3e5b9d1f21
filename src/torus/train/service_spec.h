// A service: a set of replicas of one model server behind the ingress (DESIGN.md §9). Each replica is a gang on
// its own reservation, exactly as a gang run's (train/run_spec.h): one process per host of its slice (or per
// bundle), rank 0 serving HTTP on the port in TORUS_SERVE_PORT, the other ranks engine workers with the same
// distributed environment as a gang run's.
//
// The spec, as `torus serve deploy FILE` reads it (YAML, or JSON) and POST /api/v0/services takes it:
//   name: llm                          # 1-40 of a-z, 0-9, '-'; starts and ends with a letter or digit
//   route_prefix: /llm                 # default /<name>; requests under it go to this service, the prefix removed
//   entrypoint: python3 server.py      # a shell command, or a list of arguments (as a gang run's)
//   env: {MODEL_ID: tiny}              # values are strings (plain YAML scalars are taken as written)
//   working_dir: /src                  # a path on the node, or a package URI; py_modules: [...]
//   replica:                           # each replica's gang: the fields of a run's scaling_config
//     accelerator_type: TPU-V6E        # use_tpu is implied by accelerator_type
//     topology: 2x4
//     num_slices: 1
//     fallbacks: [{accelerator_type: TPU-V5P, topology: 2x2x1}]
//     label_selector: {cloud.google.com/gke-spot: "true"}
//     # or, without TPUs: num_workers: 2, resources_per_worker: {CPU: 1, GPU: 1}, use_gpu: true
//   health_path: /health               # READY once it answers 200
//   health_check_period_s: 2
//   health_check_timeout_s: 5
//   readiness_timeout_s: 600           # a replica not READY this long after its gang started is replaced
//   num_replicas: 2                    # or autoscaling (not both):
//   autoscaling: {min_replicas: 1, max_replicas: 4, target_ongoing_requests: 2, upscale_delay_s: 30,
//                 downscale_delay_s: 600, initial_replicas: 1}
//   graceful_shutdown_timeout_s: 20    # a draining replica's in-flight requests may take this long
//   request_timeout_s: 300             # a request not answered in full by then fails with 504
//   max_request_bytes: 16Mi            # a larger request body gets 413
//   max_queued_requests: 100           # requests waiting for a READY replica; more get 503 at once
//   queue_timeout_s: 60                # a waiting request gets 503 after this long
//
// Errors (InvalidArgument) name the field and the accepted forms: `autoscaling.max_replicas: must be an integer
// from 1 to 1000`, `replica: use_tpu requires accelerator_type and topology`, `num_replicas and autoscaling cannot
// both be given`.
//
// Thread-safety: value types and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "torus/train/run_spec.h"

namespace torus::train {

inline constexpr int kMaxReplicas = 1000;

struct AutoscalingConfig {
  int min_replicas = 1;
  int max_replicas = 1;
  double target_ongoing_requests = 2;  // in-flight requests per replica the service is scaled to
  int64_t upscale_delay_ms = 30'000;   // demand above the replicas for this long adds replicas
  int64_t downscale_delay_ms = 600'000;
  int initial_replicas = 1;            // default: min_replicas, or 1 when that is 0
  bool operator==(const AutoscalingConfig&) const = default;
};

struct ServiceSpec {
  std::string name;
  std::string route_prefix;   // "/llm"; "/" takes every path no other prefix does
  train::RunSpec replica;     // entrypoint, env, working_dir, py_modules, scaling; run_config left default
  std::string health_path = "/health";
  int64_t health_check_period_ms = 2'000;
  int64_t health_check_timeout_ms = 5'000;
  int64_t readiness_timeout_ms = 600'000;
  int num_replicas = 1;       // without autoscaling
  std::optional<AutoscalingConfig> autoscaling;
  int64_t graceful_shutdown_timeout_ms = 20'000;
  int64_t request_timeout_ms = 300'000;
  int64_t max_request_bytes = int64_t{16} << 20;
  int max_queued_requests = 100;
  int64_t queue_timeout_ms = 60'000;
  bool operator==(const ServiceSpec&) const = default;
};

// Parses and validates a spec (YAML or JSON text). The replica is checked as a gang run's spec (PlanRun).
absl::StatusOr<ServiceSpec> ParseServiceSpec(absl::string_view text);

// The JSON form ParseServiceSpec reads back to an equal spec (kept in the head's journal).
std::string ServiceSpecToJson(const ServiceSpec& spec);

// The gang run of one replica: the spec's replica with the run's name, never restarted in place (a failed replica
// is replaced by a new one).
train::RunSpec ReplicaRunSpec(const ServiceSpec& spec, const std::string& run_name);

// The replicas a service starts with: num_replicas, or autoscaling.initial_replicas.
int InitialReplicas(const ServiceSpec& spec);

// "/llm" matches "/llm", "/llm/", "/llm/v1/models" but not "/llmx"; "/" matches every path.
bool PrefixMatches(absl::string_view prefix, absl::string_view path);

}  // namespace torus::train
