#include "torus/head/api/metrics_http.h"

#include <httplib.h>

#include <charconv>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/utf8.h"
#include "torus/head/api/http_util.h"

namespace torus::head {
namespace {

// Labels a metrics query may filter on; the other parameters of the route.
const std::set<std::string>& FilterLabels() {
  static const std::set<std::string> kLabels = {"node_id", "slice",  "worker_id", "chip",    "gpu",
                                                "run_id",  "rank",   "job_id",    "process", "owner"};
  return kLabels;
}
const std::set<std::string>& QueryParams() {
  static const std::set<std::string> kParams = {"name", "since", "until", "latest", "max_points", "limit"};
  return kParams;
}

const char* HelpOf(const std::string& name) {
  static const std::map<std::string, const char*> kHelp = {
      {"torus_node_cpu_percent", "Host CPU busy, percent of all CPUs."},
      {"torus_node_memory_used_bytes", "Host memory in use (total minus available)."},
      {"torus_node_memory_total_bytes", "Host memory."},
      {"torus_worker_cpu_percent", "CPU of a worker process, percent of one CPU."},
      {"torus_worker_rss_bytes", "Resident memory of a worker process."},
      {"torus_tpu_duty_cycle_percent", "TensorCore duty cycle of a TPU chip (libtpu)."},
      {"torus_tpu_hbm_used_bytes", "HBM in use on a TPU chip (libtpu)."},
      {"torus_tpu_hbm_total_bytes", "HBM of a TPU chip (libtpu)."},
      {"torus_tpu_tensorcore_utilization_percent", "TensorCore utilization of a TPU chip (GKE device plugin)."},
      {"torus_tpu_memory_bandwidth_utilization_percent", "HBM bandwidth utilization of a TPU chip (GKE device plugin)."},
      {"torus_gpu_utilization_percent", "GPU utilization (NVML)."},
      {"torus_gpu_memory_used_bytes", "GPU memory in use (NVML)."},
      {"torus_gpu_memory_total_bytes", "GPU memory (NVML)."},
      {"torus_gpu_power_watts", "GPU power draw (NVML)."},
      {"torus_gpu_temperature_celsius", "GPU temperature (NVML)."},
      {"torus_node_task_leases", "Worker leases held for tasks and actors, per job (agent)."},
      {"torus_node_task_workers", "Task and actor worker processes of an agent: leased or idle in its pool."},
      {"torus_node_task_lease_requests_waiting", "Lease requests an agent holds until resources free up."},
  };
  auto it = kHelp.find(name);
  return it == kHelp.end() ? "Sampled by agents." : it->second;
}

bool ParseInt(const std::string& text, int64_t* out) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

// The agent target of an alive node, or an HTTP error already sent.
std::optional<std::string> AgentTarget(const StateStore& state, const std::string& id, httplib::Response& res) {
  struct Found {
    bool known = false;
    bool alive = false;
    std::string target;
    std::string death_reason;
  };
  const Found found = state.Read([&](const ClusterState& s) {
    const Node* n = s.FindNode(NodeId(id));
    return n == nullptr ? Found{} : Found{true, n->alive(), n->target(), n->death_reason};
  });
  if (!found.known) {
    SendError(res, 404, absl::StrCat("node ", id, " does not exist"));
    return std::nullopt;
  }
  if (!found.alive) {
    SendError(res, 409, absl::StrCat("node ", id, " is DEAD (", found.death_reason, "); its agent cannot be asked"));
    return std::nullopt;
  }
  return found.target;
}

void SendAgentError(httplib::Response& res, const std::string& id, const absl::Status& status) {
  int code = 502;
  if (absl::IsInvalidArgument(status)) code = 400;
  if (absl::IsNotFound(status)) code = 404;
  SendError(res, code, absl::StrCat("node ", id, ": ", status.message()));
}

void HandleMetricsQuery(const httplib::Request& req, httplib::Response& res, const MetricsStore& store,
                        int64_t now_ms) {
  for (const auto& [key, value] : req.params) {
    if (QueryParams().count(key) == 0 && FilterLabels().count(key) == 0) {
      return SendError(res, 400,
                       absl::StrCat("unknown parameter \"", key, "\"; accepted: ", absl::StrJoin(QueryParams(), ", "),
                                    " and the labels ", absl::StrJoin(FilterLabels(), ", ")));
    }
  }
  if (!req.has_param("name")) {
    nlohmann::json names = nlohmann::json::object();
    for (const auto& [name, count] : store.Names()) names[name] = count;
    return SendJson(res, 200, {{"names", names}});
  }
  MetricsQuery query;
  query.name = req.get_param_value("name");
  if (!IsValidMetricName(query.name)) {
    return SendError(res, 400, absl::StrCat("name \"", query.name, "\" is not a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)"));
  }
  query.since_ms = now_ms - 3'600'000;
  for (const char* key : {"since", "until"}) {
    if (!req.has_param(key)) continue;
    auto t = ParseMetricsTime(req.get_param_value(key), now_ms);
    if (!t.ok()) return SendError(res, 400, absl::StrCat(key, ": ", t.status().message()));
    (std::string(key) == "since" ? query.since_ms : query.until_ms) = *t;
  }
  if (req.has_param("latest")) {
    const std::string latest = req.get_param_value("latest");
    if (latest != "true" && latest != "false") return SendError(res, 400, "latest: use true or false");
    query.latest_only = latest == "true";
  }
  for (const char* key : {"max_points", "limit"}) {
    if (!req.has_param(key)) continue;
    int64_t n = 0;
    if (!ParseInt(req.get_param_value(key), &n) || n < 1 || n > 100'000) {
      return SendError(res, 400, absl::StrCat(key, ": use a whole number from 1 to 100000"));
    }
    (std::string(key) == "max_points" ? query.max_points : query.max_series) = static_cast<int>(n);
  }
  for (const auto& label : FilterLabels()) {
    if (req.has_param(label)) query.label_equals[label] = req.get_param_value(label);
  }
  nlohmann::json series = nlohmann::json::array();
  for (const SeriesView& view : store.Query(query, now_ms)) {
    nlohmann::json labels = nlohmann::json::object();
    for (const auto& [k, v] : view.labels) labels[k] = v;
    nlohmann::json points = nlohmann::json::array();
    for (const MetricPoint& p : view.points) points.push_back({p.time_ms, p.value});
    series.push_back({{"name", view.name}, {"labels", std::move(labels)}, {"points", std::move(points)}});
  }
  res.status = 200;
  res.set_content(nlohmann::json({{"now_ms", now_ms}, {"series", std::move(series)}})
                      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "application/json");
}

}  // namespace

nlohmann::json MetricSourcesJson(const std::vector<SourceState>& sources) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : sources) {
    out.push_back({{"source", s.source}, {"available", s.available}, {"error", s.error}, {"since_ms", s.since_ms}});
  }
  return out;
}

void RegisterMetricsRoutes(httplib::Server& server, const MetricsStore* store, const StateStore* state,
                           AgentPool* agents, const Clock* clock) {
  server.Get("/api/v0/metrics", [store, clock](const httplib::Request& req, httplib::Response& res) {
    HandleMetricsQuery(req, res, *store, clock->WallMillis());
  });

  server.Get(R"(/api/v0/nodes/([^/]+)/logs)", [state, agents](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    auto target = AgentTarget(*state, id, res);
    if (!target) return;
    auto reply = agents->ListLogs(*target);
    if (!reply.ok()) return SendAgentError(res, id, reply.status());
    nlohmann::json files = nlohmann::json::array();
    for (const auto& f : reply->files()) {
      files.push_back({{"name", f.name()}, {"size", f.size()}, {"modified_ms", f.modified_ms()}});
    }
    SendJson(res, 200, {{"node_id", id}, {"tpu_log_dir", reply->tpu_log_dir()}, {"files", files}});
  });

  server.Get(R"(/api/v0/nodes/([^/]+)/log)", [state, agents](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (!req.has_param("file")) {
      return SendError(res, 400, "file is required: a name from GET /api/v0/nodes/{id}/logs (agent, tpu/..., workers/...)");
    }
    rpc::ReadLogRequest request;
    request.set_name(req.get_param_value("file"));
    if (!IsValidUtf8(request.name())) {
      return SendError(res, 400, "file: not a name from GET /api/v0/nodes/{id}/logs (not UTF-8)");
    }
    for (const char* key : {"offset", "max_bytes"}) {
      if (!req.has_param(key)) continue;
      int64_t n = 0;
      if (!ParseInt(req.get_param_value(key), &n) || (std::string(key) == "max_bytes" && n < 0)) {
        return SendError(res, 400, absl::StrCat(key, ": use a whole number of bytes",
                                                std::string(key) == "offset" ? " (negative = from the end)" : ""));
      }
      std::string(key) == "offset" ? request.set_offset(n) : request.set_max_bytes(n);
    }
    auto target = AgentTarget(*state, id, res);
    if (!target) return;
    auto reply = agents->ReadLog(*target, request);
    if (!reply.ok()) return SendAgentError(res, id, reply.status());
    // `data` is text: bytes that are not UTF-8 become U+FFFD, so the next offset is given in bytes of the file.
    SendJson(res, 200,
             {{"node_id", id}, {"file", request.name()}, {"data", reply->data()}, {"offset", reply->offset()},
              {"next_offset", reply->offset() + static_cast<int64_t>(reply->data().size())},
              {"size", reply->size()}});
  });
}

void WriteNodeMetrics(PrometheusWriter& w, const MetricsStore& store, int64_t now_ms) {
  const std::string* family = nullptr;
  store.ForEachLatest(now_ms, [&](const LatestSample& s) {
    if (family == nullptr || *family != *s.name) {
      family = s.name;
      w.Family(*s.name, "gauge", HelpOf(*s.name));
    }
    w.Sample(*s.name, *s.labels, s.point.value);
  });
  w.Family("torus_metrics_source_up", "gauge",
           "Whether a metrics source of a node answered its latest sampling (1) or not (0).");
  for (const auto& [node_id, sources] : store.AllSources(now_ms)) {
    for (const auto& s : sources) {
      w.Sample("torus_metrics_source_up", {{"node_id", node_id}, {"source", s.source}}, s.available ? 1 : 0);
    }
  }
}

}  // namespace torus::head
