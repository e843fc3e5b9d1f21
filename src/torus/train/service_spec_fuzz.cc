// libFuzzer target for service specs (`torus serve deploy FILE`, POST /api/v0/services; docs/fuzzing.md): the whole
// input is the spec, YAML or JSON. Parsing may fail, with InvalidArgument; it must never crash or throw. What
// parses prints with ServiceSpecToJson and reads back to an equal spec (the head keeps that form in its journal),
// and it holds what the parser promises: a valid name, a route prefix starting with '/' (no trailing '/' but the
// root's), replica counts within bounds, and a replica run that plans.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "torus/train/service_spec.h"

namespace {

namespace train = torus::train;

// Aborts, so that libFuzzer records the input, when a property that parsing promises does not hold.
void Require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16384) return 0;
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<train::ServiceSpec> spec = train::ParseServiceSpec(input);
  if (!spec.ok()) {
    Require(spec.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  Require(!spec->name.empty() && spec->name.size() <= 40);
  Require(!spec->route_prefix.empty() && spec->route_prefix[0] == '/');
  Require(spec->route_prefix == "/" || spec->route_prefix.back() != '/');
  Require(!spec->health_path.empty() && spec->health_path[0] == '/');
  Require(spec->num_replicas >= 0 && spec->num_replicas <= train::kMaxReplicas);
  if (spec->autoscaling) {
    const train::AutoscalingConfig& a = *spec->autoscaling;
    Require(a.min_replicas >= 0 && a.min_replicas <= a.max_replicas && a.max_replicas <= train::kMaxReplicas);
    Require(a.initial_replicas >= a.min_replicas && a.initial_replicas <= a.max_replicas);
    Require(a.target_ongoing_requests > 0);
  }
  const int initial = train::InitialReplicas(*spec);
  Require(initial >= 0 && initial <= train::kMaxReplicas);
  Require(train::PrefixMatches(spec->route_prefix, spec->route_prefix));
  Require(torus::train::PlanRun(train::ReplicaRunSpec(*spec, "fuzz-replica")).ok());

  const std::string json = train::ServiceSpecToJson(*spec);
  absl::StatusOr<train::ServiceSpec> reparsed = train::ParseServiceSpec(json);
  Require(reparsed.ok());
  Require(*reparsed == *spec);
  Require(train::ServiceSpecToJson(*reparsed) == json);
  return 0;
}
