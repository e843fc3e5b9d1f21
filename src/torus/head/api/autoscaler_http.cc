#include "torus/head/api/autoscaler_http.h"

#include "torus/head/api/http_util.h"

namespace torus::head {
namespace {

std::string ClassText(autoscale::CapacityClass c) { return std::string(autoscale::CapacityClassName(c)); }

}  // namespace

nlohmann::json AutoscalerJson(const Autoscaler::Status& status, const StateStore& store) {
  nlohmann::json out = {{"enabled", true}};
  nlohmann::json types = nlohmann::json::array();
  for (const autoscale::NodeType& t : status.node_types) {
    nlohmann::json classes = nlohmann::json::array();
    for (const autoscale::ClassOption& c : t.classes) {
      classes.push_back({{"class", ClassText(c.capacity_class)},
                         {"provisioning_timeout_s", static_cast<double>(c.provisioning_timeout_ms) / 1000}});
    }
    int provisioning = 0, running = 0;
    for (const ScaledSlice& s : status.slices) {
      if (s.node_type != t.name) continue;
      (s.phase == ScaledSlice::Phase::kRunning ? running : provisioning) += 1;
    }
    types.push_back({{"name", t.name},
                     {"accelerator_type", std::string(GetGenerationInfo(t.shape.generation).accelerator_type)},
                     {"topology", t.shape.topology.ToString()},
                     {"pod_type", t.shape.pod_type.ToString()},
                     {"hosts_per_slice", t.shape.hosts},
                     {"chips_per_host", t.shape.chips_per_host},
                     {"min_slices", t.min_slices},
                     {"max_slices", t.max_slices},
                     {"idle_timeout_s", static_cast<double>(t.idle_timeout_ms) / 1000},
                     {"capacity_classes", classes},
                     {"slices", {{"provisioning", provisioning}, {"running", running}}}});
  }
  out["node_types"] = types;
  nlohmann::json slices = nlohmann::json::array();
  for (const ScaledSlice& s : status.slices) {
    slices.push_back({{"name", s.name},
                      {"node_type", s.node_type},
                      {"capacity_class", ClassText(s.capacity_class)},
                      {"phase", std::string(ScaledSlicePhaseName(s.phase))},
                      {"launched_ms", s.launched_ms},
                      {"running_ms", s.running_ms},
                      {"idle_since_ms", s.idle_since_ms}});
  }
  out["slices"] = slices;
  nlohmann::json failures = nlohmann::json::array();
  for (const ClassFailure& f : status.failures) {
    failures.push_back({{"node_type", f.node_type},
                        {"capacity_class", ClassText(f.capacity_class)},
                        {"reason", f.reason},
                        {"at_ms", f.at_ms},
                        {"until_ms", f.until_ms}});
  }
  out["failures"] = failures;
  nlohmann::json pending = nlohmann::json::array();
  store.Read([&](const ClusterState& s) {
    for (const auto& [id, note] : status.notes) {
      const Group* g = s.FindGroup(id);
      pending.push_back({{"group", id.str()}, {"name", g == nullptr ? "" : g->name}, {"note", note}});
    }
  });
  out["pending"] = pending;
  nlohmann::json events = nlohmann::json::array();
  for (const Autoscaler::Event& e : status.events) {
    events.push_back({{"time_ms", e.wall_ms},
                      {"kind", e.kind},
                      {"slice", e.slice},
                      {"node_type", e.node_type},
                      {"capacity_class", e.capacity_class},
                      {"message", e.message}});
  }
  out["events"] = events;
  return out;
}

void RegisterAutoscalerRoutes(httplib::Server& server, const Autoscaler* autoscaler, const StateStore* store) {
  server.Get("/api/v0/autoscaler", [autoscaler, store](const httplib::Request&, httplib::Response& res) {
    if (autoscaler == nullptr) {
      SendJson(res, 200, {{"enabled", false}});
      return;
    }
    SendJson(res, 200, AutoscalerJson(autoscaler->GetStatus(), *store));
  });
}

void WriteAutoscalerMetrics(PrometheusWriter& w, const Autoscaler::Status& status) {
  w.Family("torus_autoscaler_slices", "gauge", "Slices the autoscaler launched and has not removed, by phase.");
  for (const autoscale::NodeType& t : status.node_types) {
    for (ScaledSlice::Phase phase : {ScaledSlice::Phase::kProvisioning, ScaledSlice::Phase::kRunning}) {
      int n = 0;
      for (const ScaledSlice& s : status.slices) n += s.node_type == t.name && s.phase == phase;
      w.Sample("torus_autoscaler_slices", {{"node_type", t.name}, {"phase", std::string(ScaledSlicePhaseName(phase))}},
               n);
    }
  }
  const std::pair<const char*, const std::map<std::pair<std::string, std::string>, int64_t>*> counters[] = {
      {"torus_autoscaler_launches_total", &status.launches},
      {"torus_autoscaler_launch_failures_total", &status.launch_failures},
      {"torus_autoscaler_removals_total", &status.removals}};
  const char* help[] = {"Slices launched, by node type and capacity class.",
                        "Launches that failed (refused, or not provisioned within the class's timeout).",
                        "Slices removed (idle, failed, or of a node type no longer configured)."};
  for (size_t i = 0; i < 3; ++i) {
    w.Family(counters[i].first, "counter", help[i]);
    for (const auto& [key, count] : *counters[i].second) {
      w.Sample(counters[i].first, {{"node_type", key.first}, {"capacity_class", key.second}},
               static_cast<double>(count));
    }
  }
}

}  // namespace torus::head
