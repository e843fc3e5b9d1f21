// The autoscaler over HTTP (the head's JSON API), and its Prometheus samples:
//
//   GET /api/v0/autoscaler   {"enabled": true, "node_types": [{name, accelerator_type, topology, pod_type,
//                            hosts_per_slice, chips_per_host, min_slices, max_slices, idle_timeout_s,
//                            capacity_classes: [{class, provisioning_timeout_s}], slices: {provisioning, running}}],
//                            "slices": [{name, node_type, capacity_class, phase, launched_ms, running_ms,
//                            idle_since_ms}], "failures": [{node_type, capacity_class, reason, at_ms, until_ms}],
//                            "pending": [{group, name, note}], "events": [{time_ms, kind, slice, node_type,
//                            capacity_class, message}] (newest last)}
//                            {"enabled": false} when the head runs without --autoscaler-config.
//
//   torus_autoscaler_slices{node_type, phase}                          gauge
//   torus_autoscaler_launches_total{node_type, capacity_class}         counter
//   torus_autoscaler_launch_failures_total{node_type, capacity_class}  counter (timeouts and refusals)
//   torus_autoscaler_removals_total{node_type, capacity_class}         counter
//
// Thread-safety: handlers call the thread-safe Autoscaler and StateStore.
#pragma once

#include <httplib.h>

#include "nlohmann/json.hpp"
#include "torus/head/autoscaler/autoscaler.h"
#include "torus/head/metrics/prometheus.h"
#include "torus/head/state/state_store.h"

namespace torus::head {

// `autoscaler` may be null (not configured).
void RegisterAutoscalerRoutes(httplib::Server& server, const Autoscaler* autoscaler, const StateStore* store);

nlohmann::json AutoscalerJson(const Autoscaler::Status& status, const StateStore& store);

void WriteAutoscalerMetrics(PrometheusWriter& w, const Autoscaler::Status& status);

}  // namespace torus::head
