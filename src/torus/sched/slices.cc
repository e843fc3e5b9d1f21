#include "torus/sched/slices.h"

#include <algorithm>
#include <map>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/tpu_shape.h"
#include "torus/common/well_known_labels.h"

namespace torus::sched {
namespace {

std::string LabelOr(const Labels& labels, std::string_view key) {
  auto it = labels.find(key);
  return it == labels.end() ? std::string() : it->second;
}

// Hosts of one slice grouped by the value they report for one shape field.
// Returns "" when they agree, else "topology: 4x4 (workers 0,1), 2x4 (worker 2)".
std::string Disagreement(std::string_view field, const std::vector<const NodeSnapshot*>& hosts,
                         std::string_view key) {
  std::map<std::string, std::vector<std::string>> by_value;
  for (const NodeSnapshot* n : hosts) {
    std::string worker = LabelOr(n->labels, kLabelTpuWorkerId);
    by_value[LabelOr(n->labels, key)].push_back(worker.empty() ? "?" : worker);
  }
  if (by_value.size() <= 1) return "";
  std::vector<std::string> parts;
  for (auto& [value, workers] : by_value) {
    std::sort(workers.begin(), workers.end());
    parts.push_back(absl::StrCat(value.empty() ? "(none)" : value, " (worker", workers.size() > 1 ? "s " : " ",
                                 absl::StrJoin(workers, ","), ")"));
  }
  return absl::StrCat(std::string(field), ": ", absl::StrJoin(parts, ", "));
}

int ChipsOf(const NodeSnapshot& n) {
  return static_cast<int>(n.total.GetFixed(kResourceTpu) / kResourceScale);
}

// Fills the shape fields of `slice`; returns a reason when the shape cannot be known.
std::string ResolveShape(const std::vector<const NodeSnapshot*>& hosts, Slice& slice) {
  std::vector<std::string> disagreements;
  for (auto [field, key] : {std::pair{"accelerator type", kLabelAcceleratorType},
                            std::pair{"topology", kLabelTpuTopology}, std::pair{"pod type", kLabelTpuPodType},
                            std::pair{"chips per host", kLabelTpuChipsPerHost}}) {
    std::string d = Disagreement(field, hosts, key);
    if (!d.empty()) disagreements.push_back(std::move(d));
  }
  const Labels& first = hosts.front()->labels;
  slice.accelerator_type = LabelOr(first, kLabelAcceleratorType);
  slice.topology = LabelOr(first, kLabelTpuTopology);
  slice.pod_type = LabelOr(first, kLabelTpuPodType);
  int cph = 0;
  if (!absl::SimpleAtoi(LabelOr(first, kLabelTpuChipsPerHost), &cph)) cph = ChipsOf(*hosts.front());
  slice.chips_per_host = cph;
  if (!disagreements.empty()) {
    return absl::StrCat("hosts disagree on ", absl::StrJoin(disagreements, "; "));
  }
  auto gen = ParseAcceleratorType(slice.accelerator_type);
  if (!gen.ok()) return absl::StrCat("unknown accelerator type \"", slice.accelerator_type, "\"");
  auto topology = ParseTopology(*gen, slice.topology);
  if (!topology.ok()) return std::string(topology.status().message());
  auto shape = MakeSliceShape(*gen, *topology, cph > 0 ? std::optional<int>(cph) : std::nullopt);
  if (!shape.ok()) return std::string(shape.status().message());
  slice.expected_hosts = shape->hosts;
  return "";
}

Slice BuildOne(const std::string& name, const std::vector<const NodeSnapshot*>& hosts) {
  Slice slice;
  slice.name = name;
  std::string shape_problem = ResolveShape(hosts, slice);

  // Choose one host per worker id: alive before dead, then input order.
  std::map<int, std::vector<const NodeSnapshot*>> by_worker;
  std::vector<const NodeSnapshot*> unplaced;
  for (const NodeSnapshot* n : hosts) {
    int worker = -1;
    if (!absl::SimpleAtoi(LabelOr(n->labels, kLabelTpuWorkerId), &worker) || worker < 0 ||
        (slice.expected_hosts > 0 && worker >= slice.expected_hosts)) {
      unplaced.push_back(n);
      continue;
    }
    by_worker[worker].push_back(n);
  }

  std::vector<std::string> dead, missing, duplicate, out_of_range;
  for (auto& [worker, candidates] : by_worker) {
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const NodeSnapshot* a, const NodeSnapshot* b) { return a->alive > b->alive; });
    const NodeSnapshot* chosen = candidates.front();
    if (candidates.size() > 1 && candidates[1]->alive) {
      duplicate.push_back(absl::StrCat("worker ", worker, " claimed by nodes ", chosen->node_id, " and ",
                                       candidates[1]->node_id));
    }
    if (!chosen->alive) dead.push_back(absl::StrCat("worker ", worker, " dead (node ", chosen->node_id, ")"));
    slice.hosts.push_back({worker, chosen->node_id, chosen->alive, chosen->address, ChipsOf(*chosen)});
    if (chosen->alive) ++slice.hosts_alive;
  }
  for (int w = 0; w < slice.expected_hosts; ++w) {
    if (!by_worker.contains(w)) missing.push_back(absl::StrCat("worker ", w, " missing"));
  }
  for (const NodeSnapshot* n : unplaced) {
    out_of_range.push_back(absl::StrCat("node ", n->node_id, " has worker id \"",
                                        LabelOr(n->labels, kLabelTpuWorkerId), "\" outside 0..",
                                        slice.expected_hosts - 1));
    slice.hosts.push_back({-1, n->node_id, n->alive, n->address, ChipsOf(*n)});
  }

  std::vector<std::string> reasons;
  if (!shape_problem.empty()) reasons.push_back(shape_problem);
  for (auto* list : {&dead, &missing, &duplicate, &out_of_range}) {
    reasons.insert(reasons.end(), list->begin(), list->end());
  }
  slice.reason = absl::StrJoin(reasons, "; ");
  if (reasons.empty()) {
    slice.state = SliceState::kReady;
  } else if (!dead.empty() && shape_problem.empty()) {
    slice.state = SliceState::kDegraded;
  } else {
    slice.state = SliceState::kIncomplete;
  }
  return slice;
}

}  // namespace

std::string_view SliceStateName(SliceState s) {
  switch (s) {
    case SliceState::kIncomplete: return "INCOMPLETE";
    case SliceState::kReady: return "READY";
    case SliceState::kReserved: return "RESERVED";
    case SliceState::kDegraded: return "DEGRADED";
  }
  return "UNKNOWN";
}

std::vector<Slice> BuildSlices(const std::vector<NodeSnapshot>& nodes) {
  std::map<std::string, std::vector<const NodeSnapshot*>> by_name;
  for (const NodeSnapshot& n : nodes) {
    auto it = n.labels.find(kLabelTpuSliceName);
    if (it == n.labels.end() || it->second.empty()) continue;
    by_name[it->second].push_back(&n);
  }
  std::vector<Slice> slices;
  slices.reserve(by_name.size());
  for (const auto& [name, hosts] : by_name) slices.push_back(BuildOne(name, hosts));
  return slices;
}

}  // namespace torus::sched
