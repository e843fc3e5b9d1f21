// The head's metrics and node-log routes, and the node/chip gauges of GET /metrics.
//
//   GET /api/v0/metrics                      {"names": {"<metric>": <series count>, ...}}
//   GET /api/v0/metrics?name=M[&since=T][&until=T][&latest=true][&max_points=N][&limit=N][&<label>=<value>...]
//       {"now_ms": N, "series": [{"name": M, "labels": {...}, "points": [[t_ms, value], ...]}]}
//       T is Unix ms or relative ("-5m"); labels to filter on: node_id, slice, worker_id, chip, gpu, run_id, rank,
//       job_id, process, owner.
//   GET /api/v0/nodes/{id}/logs              {"node_id": id, "tpu_log_dir": D, "files": [{"name", "size", "modified_ms"}]}
//   GET /api/v0/nodes/{id}/log?file=NAME[&offset=N][&max_bytes=N]
//       {"node_id": id, "file": NAME, "data": "...", "offset": N, "next_offset": N, "size": N}; offset < 0 counts
//       from the end; next_offset is where the next read starts (offset + bytes read).
//
// Thread-safety: handlers run on the HTTP server's threads and use only thread-safe components.
#pragma once

#include <string>

#include "nlohmann/json.hpp"
#include "torus/common/clock.h"
#include "torus/head/agents/agent_pool.h"
#include "torus/head/metrics/metrics_store.h"
#include "torus/head/metrics/prometheus.h"
#include "torus/head/state/state_store.h"

namespace httplib {
class Server;
}

namespace torus::head {

void RegisterMetricsRoutes(httplib::Server& server, const MetricsStore* metrics, const StateStore* state,
                           AgentPool* agents, const Clock* clock);

// A node's metric sources as JSON: [{"source", "available", "error", "since_ms"}].
nlohmann::json MetricSourcesJson(const std::vector<SourceState>& sources);

// The newest sample of every fresh series as Prometheus gauges, and torus_metrics_source_up{node_id, source}.
void WriteNodeMetrics(PrometheusWriter& w, const MetricsStore& store, int64_t now_ms);

}  // namespace torus::head
