#include "torus/cli/format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "torus/common/resources.h"
#include "torus/common/well_known_labels.h"

namespace torus::cli {
namespace {

// A table whose columns are as wide as their widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render(const std::string& indent) const {
    std::vector<size_t> widths;
    for (const auto& row : rows_) {
      widths.resize(std::max(widths.size(), row.size()));
      for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
    }
    std::string out;
    for (const auto& row : rows_) {
      std::string line = indent;
      for (size_t i = 0; i < row.size(); ++i) {
        absl::StrAppend(&line, row[i]);
        if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 2, ' ');
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      absl::StrAppend(&out, line, "\n");
    }
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string NodeStateName(rpc::NodeState s) {
  switch (s) {
    case rpc::ALIVE: return "ALIVE";
    case rpc::DEAD: return "DEAD";
    case rpc::DRAINING: return "DRAINING";
    default: return "UNKNOWN";
  }
}

std::string SliceStateName(rpc::SliceState s) {
  switch (s) {
    case rpc::READY: return "READY";
    case rpc::INCOMPLETE: return "INCOMPLETE";
    case rpc::RESERVED: return "RESERVED";
    case rpc::DEGRADED: return "DEGRADED";
    default: return "UNKNOWN";
  }
}

std::string Label(const rpc::NodeInfo& info, std::string_view key) {
  auto it = info.labels().find(std::string(key));
  return it == info.labels().end() ? "" : it->second;
}

int64_t Get(const google::protobuf::Map<std::string, int64_t>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
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

std::string Age(int64_t ms) {
  if (ms < 1000) return absl::StrCat(ms, "ms");
  if (ms < 120'000) return absl::StrFormat("%.1fs", ms / 1000.0);
  return absl::StrCat(ms / 60'000, "m");
}

}  // namespace

std::string FormatAmount(const std::string& resource, int64_t fixed) {
  if (resource == kResourceMemory) {
    double bytes = FromFixed(fixed);
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (bytes >= 1024 && u < 5) {
      bytes /= 1024;
      ++u;
    }
    return u == 0 ? absl::StrFormat("%.0f B", bytes) : absl::StrFormat("%.1f %s", bytes, units[u]);
  }
  return FormatFixed(fixed);
}

std::string FormatStatus(const rpc::ClusterStatus& status, const std::string& address) {
  int alive = 0, dead = 0;
  for (const auto& n : status.nodes()) (n.state() == rpc::ALIVE ? alive : dead)++;
  std::string out = absl::StrCat("Cluster ", status.cluster_id(), " at ", address, "\n");
  absl::StrAppend(&out, "Nodes: ", alive, " alive, ", dead, " dead\n");

  absl::StrAppend(&out, "\nResources (used / total, alive nodes)\n");
  std::vector<std::string> names;
  for (const auto& [name, amount] : status.resources_total()) names.push_back(name);
  auto rank = [](const std::string& n) {
    if (n == kResourceCpu) return 0;
    if (n == kResourceMemory) return 1;
    if (n == kResourceTpu) return 2;
    if (n == kResourceGpu) return 3;
    return 4;
  };
  std::sort(names.begin(), names.end(),
            [&](const auto& a, const auto& b) { return std::pair(rank(a), a) < std::pair(rank(b), b); });
  Table resources({"RESOURCE", "USED", "TOTAL"});
  for (const auto& name : names) {
    int64_t total = Get(status.resources_total(), name);
    int64_t used = std::max<int64_t>(0, total - Get(status.resources_available(), name));
    resources.Add({name, FormatAmount(name, used), FormatAmount(name, total)});
  }
  absl::StrAppend(&out, resources.Render("  "));

  if (status.slices_size() > 0) {
    int ready = 0;
    for (const auto& s : status.slices()) ready += s.state() == rpc::READY;
    absl::StrAppend(&out, "\nSlices (", status.slices_size(), ", ", ready, " READY)\n");
    Table slices({"NAME", "TYPE", "TOPOLOGY", "POD TYPE", "HOSTS", "STATE", "REASON"});
    for (const auto& s : status.slices()) {
      slices.Add({s.name(), s.accelerator_type(), s.topology(), s.pod_type(),
                  absl::StrCat(s.hosts_alive(), "/", s.expected_hosts()), SliceStateName(s.state()), s.reason()});
    }
    absl::StrAppend(&out, slices.Render("  "));
  }

  if (dead > 0) {
    absl::StrAppend(&out, "\nDead nodes\n");
    Table table({"NODE", "ADDRESS", "REASON"});
    for (const auto& n : status.nodes()) {
      if (n.state() != rpc::DEAD) continue;
      table.Add({n.info().node_id(), n.info().address(), n.death_reason()});
    }
    absl::StrAppend(&out, table.Render("  "));
  }
  return out;
}

std::string FormatNodes(const rpc::ClusterStatus& status) {
  Table table({"NODE", "STATE", "ADDRESS", "ACCELERATOR", "SLICE", "WORKER", "CPU", "TPU", "GPU", "MEMORY",
               "HEARTBEAT"});
  for (const auto& n : status.nodes()) {
    const auto& info = n.info();
    auto used_of = [&](const std::string& r) {
      int64_t total = Get(info.resources_total(), r);
      if (total == 0) return std::string("-");
      int64_t used = std::max<int64_t>(0, total - Get(n.resources_available(), r));
      return absl::StrCat(FormatAmount(r, used), "/", FormatAmount(r, total));
    };
    std::string accel = Label(info, kLabelAcceleratorType);
    table.Add({info.node_id(), NodeStateName(n.state()), info.address(), accel.empty() ? "-" : accel,
               Label(info, kLabelTpuSliceName).empty() ? "-" : Label(info, kLabelTpuSliceName),
               Label(info, kLabelTpuWorkerId).empty() ? "-" : Label(info, kLabelTpuWorkerId), used_of("CPU"),
               used_of("TPU"), used_of("GPU"),
               FormatAmount("memory", Get(info.resources_total(), "memory")),
               n.state() == rpc::ALIVE ? Age(n.last_heartbeat_age_ms()) + " ago" : "-"});
  }
  return table.Render("");
}

nlohmann::json NodeToJson(const rpc::NodeView& node) {
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

nlohmann::json SliceToJson(const rpc::SliceView& s) {
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
          {"hosts", hosts}};
}

nlohmann::json StatusToJson(const rpc::ClusterStatus& status) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : status.nodes()) nodes.push_back(NodeToJson(n));
  nlohmann::json slices = nlohmann::json::array();
  for (const auto& s : status.slices()) slices.push_back(SliceToJson(s));
  int alive = 0;
  for (const auto& n : status.nodes()) alive += n.state() == rpc::ALIVE;
  return {{"cluster_id", status.cluster_id()},
          {"nodes_alive", alive},
          {"nodes_dead", status.nodes_size() - alive},
          {"resources_total", ResourcesToJson(status.resources_total())},
          {"resources_available", ResourcesToJson(status.resources_available())},
          {"nodes", nodes},
          {"slices", slices}};
}

}  // namespace torus::cli
