#include "torus/rpc/status_json.h"

#include <algorithm>

#include "torus/common/resources.h"

namespace torus::rpc {

std::string NodeStateName(NodeState s) {
  switch (s) {
    case ALIVE: return "ALIVE";
    case DEAD: return "DEAD";
    case DRAINING: return "DRAINING";
    default: return "UNKNOWN";
  }
}

std::string SliceStateName(SliceState s) {
  switch (s) {
    case READY: return "READY";
    case INCOMPLETE: return "INCOMPLETE";
    case RESERVED: return "RESERVED";
    case DEGRADED: return "DEGRADED";
    default: return "UNKNOWN";
  }
}

nlohmann::json ResourcesToJson(const google::protobuf::Map<std::string, int64_t>& m) {
  nlohmann::json out = nlohmann::json::object();
  std::vector<std::string> keys;
  for (const auto& [k, v] : m) keys.push_back(k);
  std::sort(keys.begin(), keys.end());
  for (const auto& k : keys) {
    int64_t v = m.at(k);
    if (v % kResourceScale == 0) {
      out[k] = v / kResourceScale;
    } else {
      out[k] = FromFixed(v);
    }
  }
  return out;
}

nlohmann::json NodeToJson(const NodeView& node) {
  const auto& info = node.info();
  nlohmann::json labels = nlohmann::json::object();
  for (const auto& [k, v] : info.labels()) labels[k] = v;
  return {
      {"node_id", info.node_id()},
      {"state", NodeStateName(node.state())},
      {"address", info.address()},
      {"hostname", info.hostname()},
      {"incarnation", node.incarnation()},
      {"labels", labels},
      {"resources_total", ResourcesToJson(info.resources_total())},
      {"resources_available", ResourcesToJson(node.resources_available())},
      {"last_heartbeat_age_ms", node.last_heartbeat_age_ms()},
      {"death_reason", node.death_reason()},
      {"pid", info.pid()},
      {"start_time_ms", info.start_time_ms()},
      {"registered_time_ms", node.registered_time_ms()},
  };
}

nlohmann::json SliceToJson(const SliceView& s) {
  nlohmann::json hosts = nlohmann::json::array();
  for (const auto& h : s.hosts()) {
    hosts.push_back({{"worker_id", h.worker_id()},
                     {"node_id", h.node_id()},
                     {"state", NodeStateName(h.node_state())},
                     {"address", h.address()},
                     {"chips", h.chips()}});
  }
  return {{"name", s.name()},
          {"accelerator_type", s.accelerator_type()},
          {"topology", s.topology()},
          {"pod_type", s.pod_type()},
          {"chips_per_host", s.chips_per_host()},
          {"expected_hosts", s.expected_hosts()},
          {"hosts_alive", s.hosts_alive()},
          {"state", SliceStateName(s.state())},
          {"reason", s.reason()},
          {"reserved_by", s.reserved_by()},
          {"hosts", hosts}};
}

nlohmann::json PlacementGroupToJson(const PlacementGroupView& g) {
  nlohmann::json bundles = nlohmann::json::array();
  for (const auto& b : g.bundles()) {
    nlohmann::json bundle = {{"index", b.index()},
                             {"node_id", b.node_id()},
                             {"address", b.address()},
                             {"resources", ResourcesToJson(b.resources())}};
    if (!b.slice_name().empty()) {
      bundle["slice_name"] = b.slice_name();
      bundle["worker_id"] = b.worker_id();
      bundle["chips"] = std::vector<int>(b.chips().begin(), b.chips().end());
    }
    bundles.push_back(std::move(bundle));
  }
  nlohmann::json history = nlohmann::json::array();
  for (const auto& e : g.history()) {
    history.push_back({{"time_ms", e.time_ms()}, {"state", e.state()}, {"message", e.message()}});
  }
  return {{"id", g.id()},
          {"name", g.name()},
          {"kind", g.kind()},
          {"state", g.state()},
          {"reason", g.reason()},
          {"request", g.request()},
          {"alternative", g.alternative()},
          {"slices", std::vector<std::string>(g.slices().begin(), g.slices().end())},
          {"bundles", bundles},
          {"history", history},
          {"created_time_ms", g.created_time_ms()}};
}

nlohmann::json StatusToJson(const ClusterStatus& status) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : status.nodes()) nodes.push_back(NodeToJson(n));
  nlohmann::json slices = nlohmann::json::array();
  for (const auto& s : status.slices()) slices.push_back(SliceToJson(s));
  int alive = 0;
  for (const auto& n : status.nodes()) alive += n.state() == ALIVE;
  nlohmann::json pending = nlohmann::json::array();
  for (const auto& g : status.pending()) pending.push_back(PlacementGroupToJson(g));
  return {{"cluster_id", status.cluster_id()},
          {"pending", pending},
          {"nodes_alive", alive},
          {"nodes_dead", status.nodes_size() - alive},
          {"resources_total", ResourcesToJson(status.resources_total())},
          {"resources_available", ResourcesToJson(status.resources_available())},
          {"nodes", nodes},
          {"slices", slices}};
}

}  // namespace torus::rpc
