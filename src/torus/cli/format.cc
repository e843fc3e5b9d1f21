#include "torus/cli/format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "torus/common/resources.h"
#include "torus/common/well_known_labels.h"

namespace torus::cli {
namespace {

using rpc::NodeStateName;
using rpc::SliceStateName;

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

std::string Label(const rpc::NodeInfo& info, std::string_view key) {
  auto it = info.labels().find(std::string(key));
  return it == info.labels().end() ? "" : it->second;
}

int64_t Get(const google::protobuf::Map<std::string, int64_t>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
}

std::string Age(int64_t ms) {
  if (ms < 1000) return absl::StrCat(ms, "ms");
  if (ms < 120'000) return absl::StrFormat("%.1fs", ms / 1000.0);
  return absl::StrCat(ms / 60'000, "m");
}

}  // namespace

std::string FormatAutoscaler(const nlohmann::json& a, int64_t now_ms) {
  if (!a.is_object() || !a.value("enabled", false)) return "";
  std::string out = "\nAutoscaler\n";
  Table types({"NODE TYPE", "SHAPE", "CLASSES", "RUNNING", "PROVISIONING", "MIN", "MAX"});
  for (const auto& t : a["node_types"]) {
    std::vector<std::string> classes;
    for (const auto& c : t["capacity_classes"]) classes.push_back(c["class"].get<std::string>());
    types.Add({t["name"].get<std::string>(),
               absl::StrCat(t["accelerator_type"].get<std::string>(), " ", t["topology"].get<std::string>()),
               absl::StrJoin(classes, ">"), absl::StrCat(t["slices"]["running"].get<int>()),
               absl::StrCat(t["slices"]["provisioning"].get<int>()), absl::StrCat(t["min_slices"].get<int>()),
               absl::StrCat(t["max_slices"].get<int>())});
  }
  absl::StrAppend(&out, types.Render("  "));
  if (!a["slices"].empty()) {
    Table slices({"SLICE", "NODE TYPE", "CLASS", "PHASE", "AGE", "IDLE"});
    for (const auto& s : a["slices"]) {
      const int64_t idle = s["idle_since_ms"].get<int64_t>();
      slices.Add({s["name"].get<std::string>(), s["node_type"].get<std::string>(),
                  s["capacity_class"].get<std::string>(), s["phase"].get<std::string>(),
                  Age(now_ms - s["launched_ms"].get<int64_t>()), idle == 0 ? "-" : Age(now_ms - idle)});
    }
    absl::StrAppend(&out, "\n", slices.Render("  "));
  }
  if (!a["pending"].empty()) {
    absl::StrAppend(&out, "\n  Waiting groups:\n");
    for (const auto& p : a["pending"]) {
      const std::string name = p["name"].get<std::string>();
      absl::StrAppend(&out, "    ", name.empty() ? p["group"].get<std::string>() : name, ": ",
                      p["note"].get<std::string>(), "\n");
    }
  }
  if (!a["failures"].empty()) {
    absl::StrAppend(&out, "\n  Recent failures (the class is not tried again until the time shown):\n");
    for (const auto& f : a["failures"]) {
      absl::StrAppend(&out, "    ", f["node_type"].get<std::string>(), " ", f["capacity_class"].get<std::string>(),
                      ": ", f["reason"].get<std::string>(), " (", Age(now_ms - f["at_ms"].get<int64_t>()),
                      " ago; retried in ", Age(std::max<int64_t>(0, f["until_ms"].get<int64_t>() - now_ms)), ")\n");
    }
  }
  return out;
}

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
    Table slices({"NAME", "TYPE", "TOPOLOGY", "POD TYPE", "HOSTS", "STATE", "HELD BY", "REASON"});
    for (const auto& s : status.slices()) {
      slices.Add({s.name(), s.accelerator_type(), s.topology(), s.pod_type(),
                  absl::StrCat(s.hosts_alive(), "/", s.expected_hosts()), SliceStateName(s.state()),
                  s.reserved_by().empty() ? "-" : s.reserved_by(), s.reason()});
    }
    absl::StrAppend(&out, slices.Render("  "));
  }

  if (status.pending_size() > 0) {
    absl::StrAppend(&out, "\nPending placement groups (", status.pending_size(), ")\n");
    for (const auto& g : status.pending()) {
      absl::StrAppend(&out, "  ", g.id(), g.name().empty() ? "" : absl::StrCat(" (", g.name(), ")"), "  ", g.state(),
                      "  ", g.request(), "\n");
      for (absl::string_view line : absl::StrSplit(g.reason(), '\n')) absl::StrAppend(&out, "    ", line, "\n");
    }
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

std::string FormatPlacementGroup(const rpc::PlacementGroupView& g) {
  std::string out = absl::StrCat(g.id(), g.name().empty() ? "" : absl::StrCat(" (", g.name(), ")"), "  ", g.state(),
                                 "  ", g.kind(), "\n  request: ", g.request(), "\n");
  if (g.alternative() > 0) absl::StrAppend(&out, "  placed with fallback ", g.alternative(), "\n");
  if (!g.reason().empty()) {
    absl::StrAppend(&out, "  reason:\n");
    for (absl::string_view line : absl::StrSplit(g.reason(), '\n')) absl::StrAppend(&out, "    ", line, "\n");
  }
  if (g.slices_size() > 0) absl::StrAppend(&out, "  slices: ", absl::StrJoin(g.slices(), ", "), "\n");
  if (g.bundles_size() > 0) {
    Table table({"BUNDLE", "NODE", "ADDRESS", "SLICE", "WORKER", "CHIPS", "RESOURCES"});
    for (const auto& b : g.bundles()) {
      table.Add({absl::StrCat(b.index()), b.node_id().empty() ? "(lost)" : b.node_id(),
                 b.address().empty() ? "-" : b.address(), b.slice_name().empty() ? "-" : b.slice_name(),
                 b.slice_name().empty() ? "-" : absl::StrCat(b.worker_id()),
                 b.chips().empty() ? "-" : absl::StrJoin(b.chips(), ","), rpc::ResourcesToJson(b.resources()).dump()});
    }
    absl::StrAppend(&out, table.Render("  "));
  }
  absl::StrAppend(&out, "  history:\n");
  for (const auto& e : g.history()) {
    absl::StrAppend(&out, "    ",
                    absl::FormatTime("%H:%M:%E3S", absl::FromUnixMillis(e.time_ms()), absl::LocalTimeZone()), "  ",
                    e.state(), "  ", e.message(), "\n");
  }
  return out;
}

std::string FormatPlacementGroups(const std::vector<rpc::PlacementGroupView>& groups) {
  Table table({"ID", "NAME", "KIND", "STATE", "REQUEST", "HOLDS"});
  for (const auto& g : groups) {
    std::string holds = g.slices_size() > 0 ? absl::StrJoin(g.slices(), ",")
                                            : absl::StrCat(g.bundles_size(), " bundles");
    table.Add({g.id(), g.name().empty() ? "-" : g.name(), g.kind(), g.state(), g.request(), holds});
  }
  return table.Render("");
}

}  // namespace torus::cli
