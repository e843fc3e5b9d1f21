#include "torus/head/services/service_machine.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace torus::head {

ServiceStep DecideService(const ServiceFacts& facts, int64_t now_ms) {
  ServiceStep step;
  std::vector<const ReplicaFacts*> current, old;
  for (const ReplicaFacts& r : facts.replicas) {
    if (r.draining) {
      if (r.in_flight == 0) {
        step.stop.push_back({r.run, "drained"});
      } else if (now_ms - r.draining_since_ms >= facts.graceful_shutdown_timeout_ms) {
        step.stop.push_back({r.run, absl::StrCat("graceful_shutdown_timeout_s passed with ", r.in_flight,
                                                 " requests in flight")});
      }
      continue;
    }
    if (r.unhealthy) {
      step.stop.push_back({r.run, "failed its health checks"});
      continue;
    }
    if (r.running && !r.ready && now_ms - r.running_since_ms >= facts.readiness_timeout_ms) {
      step.stop.push_back({r.run, absl::StrCat("not READY within readiness_timeout_s (",
                                               facts.readiness_timeout_ms / 1000.0, " s)")});
      continue;
    }
    (r.version == facts.version ? current : old).push_back(&r);
  }
  // Ready ones last, so that the first are the ones to remove; among ready, most in flight last.
  auto removal_order = [](const ReplicaFacts* a, const ReplicaFacts* b) {
    if (a->ready != b->ready) return !a->ready;
    if (a->running != b->running) return !a->running;
    return a->in_flight < b->in_flight;
  };
  auto remove = [&](const ReplicaFacts* r, const std::string& reason) {
    if (r->ready) {
      step.drain.push_back(r->run);
    } else {
      step.stop.push_back({r->run, reason});
    }
  };

  const int have = static_cast<int>(current.size());
  if (have < facts.target) {
    step.submit = facts.target - have;
  } else if (have > facts.target) {
    std::stable_sort(current.begin(), current.end(), removal_order);
    for (int i = 0; i < have - facts.target; ++i) remove(current[i], "scaled down");
  }

  // Older versions stay while the current one has fewer READY replicas than wanted.
  const int ready_current = static_cast<int>(
      std::count_if(current.begin(), current.end(), [](const ReplicaFacts* r) { return r->ready; }));
  // A new replica that found no room counts as one old replica fewer to keep (draining or stopping ones are
  // already out of `old`).
  const int waiting = static_cast<int>(std::count_if(current.begin(), current.end(), [&](const ReplicaFacts* r) {
    return !r->placed && now_ms - r->submitted_ms >= facts.surge_wait_ms;
  }));
  const int keep_old = std::max(0, facts.target - ready_current - waiting);
  std::stable_sort(old.begin(), old.end(), removal_order);  // the ones to keep are at the end
  for (int i = 0; i < static_cast<int>(old.size()) - keep_old; ++i) remove(old[i], "replaced by a newer version");
  return step;
}

int WantedReplicas(const train::AutoscalingConfig& config, double ongoing) {
  int wanted = static_cast<int>(std::ceil(ongoing / config.target_ongoing_requests - 1e-9));
  if (ongoing > 0) wanted = std::max(wanted, 1);
  return std::clamp(wanted, config.min_replicas, config.max_replicas);
}

AutoscaleState Autoscale(const train::AutoscalingConfig& config, AutoscaleState state, double ongoing,
                         int64_t now_ms) {
  const int wanted = WantedReplicas(config, ongoing);
  state.target = std::clamp(state.target, config.min_replicas, config.max_replicas);
  if (wanted > state.target) {
    state.below_since_ms = 0;
    if (state.above_since_ms == 0) state.above_since_ms = now_ms;
    if (state.target == 0 || now_ms - state.above_since_ms >= config.upscale_delay_ms) {
      state.target = wanted;
      state.above_since_ms = 0;
    }
  } else if (wanted < state.target) {
    state.above_since_ms = 0;
    if (state.below_since_ms == 0) state.below_since_ms = now_ms;
    if (now_ms - state.below_since_ms >= config.downscale_delay_ms) {
      state.target = wanted;
      state.below_since_ms = 0;
    }
  } else {
    state.above_since_ms = 0;
    state.below_since_ms = 0;
  }
  return state;
}

}  // namespace torus::head
