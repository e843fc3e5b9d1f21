// What a service's replicas do next (DESIGN.md §9), decided from where they stand. Pure: facts in, a step out;
// level-triggered (the same facts give the same step however often they are looked at).
//
// Replicas are gang runs of the service (Run.service). With `target` replicas wanted and the spec at `version`:
//   - too few replicas of the current version (not draining): new ones are submitted;
//   - too many: those not READY are stopped first, then READY ones (fewest in flight first) drain;
//   - older versions (a rolling update): kept while the READY replicas of the current version number fewer than
//     target, READY ones first; the rest drain (not READY ones stop at once). So the ready count never drops below
//     target while new replicas start where there is room. A new replica still not placed (holding its reservation) surge_wait after
//     its submission (no room beside the old ones: a cluster whose slices the old replicas hold) releases one old
//     replica (those draining or stopping already count), so a full cluster rolls one replica at a time, as Ray Serve's
//     rolling update does;
//   - a replica whose gang runs but is not READY readiness_timeout after its start is stopped (and so replaced);
//     one that was READY and failed its health checks (unhealthy) is stopped at once;
//   - a draining replica (it gets no new requests) stops once nothing is in flight on it, or after
//     graceful_shutdown_timeout;
//   - a deleted service has target 0: every replica drains.
//
// Autoscaling: the replicas wanted for `ongoing` requests (in flight plus waiting) are ceil(ongoing /
// target_ongoing_requests) within [min_replicas, max_replicas], at least 1 while any request is ongoing. A change up
// is made once wanted has stayed above the target for upscale_delay (at once from 0 replicas: a request waits), a
// change down once it stayed below for downscale_delay.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "torus/head/state/ids.h"
#include "torus/train/service_spec.h"

namespace torus::head {

struct ReplicaFacts {
  RunId run;
  int64_t version = 0;
  bool running = false;        // its gang runs (RUNNING)
  int64_t running_since_ms = 0;
  bool placed = true;          // its gang holds its reservation (it has started an attempt)
  int64_t submitted_ms = 0;
  bool ready = false;          // READY: its health path answered 200 (and it is not draining)
  bool unhealthy = false;      // was READY, then failed its health checks
  bool draining = false;
  int64_t draining_since_ms = 0;
  int in_flight = 0;
};

struct ServiceFacts {
  int64_t version = 0;
  int target = 0;
  int64_t readiness_timeout_ms = 0;
  int64_t graceful_shutdown_timeout_ms = 0;
  int64_t surge_wait_ms = 10'000;
  std::vector<ReplicaFacts> replicas;  // not ended, not being stopped
};

struct ReplicaStop {
  RunId run;
  std::string reason;
  bool operator==(const ReplicaStop&) const = default;
};

struct ServiceStep {
  int submit = 0;               // new replicas of the current version
  std::vector<RunId> drain;     // stop sending them requests
  std::vector<ReplicaStop> stop;
  bool operator==(const ServiceStep&) const = default;
};

ServiceStep DecideService(const ServiceFacts& facts, int64_t now_ms);

struct AutoscaleState {
  int target = 0;
  int64_t above_since_ms = 0;  // 0: wanted is not above target
  int64_t below_since_ms = 0;
  bool operator==(const AutoscaleState&) const = default;
};

// The replicas `ongoing` requests want (before the delays).
int WantedReplicas(const train::AutoscalingConfig& config, double ongoing);
AutoscaleState Autoscale(const train::AutoscalingConfig& config, AutoscaleState state, double ongoing, int64_t now_ms);

}  // namespace torus::head
