#include "torus/sched/policy_util.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/device_env.h"

namespace torus::sched {

bool ChipBlockFree(const ClusterIndex& index, int node, int64_t tpu_fixed) {
  if (tpu_fixed <= 0) return true;
  const int host_chips = static_cast<int>(index.nodes()[node].total.GetFixed(kResourceTpu) / kResourceScale);
  if (tpu_fixed % kResourceScale != 0 || host_chips <= 0) return false;
  const std::vector<int>& busy_chips = index.node_facts(node).busy_chips;
  std::vector<bool> busy(host_chips, false);
  for (int chip : busy_chips) {
    if (chip >= 0 && chip < host_chips) busy[chip] = true;
  }
  return AllocateChipBlock(busy, static_cast<int>(tpu_fixed / kResourceScale)).ok();
}

bool NeedsAccelerator(const ResourceSet& demand) {
  return demand.GetFixed(kResourceTpu) > 0 || demand.GetFixed(kResourceGpu) > 0;
}

double UtilisationAfter(const ClusterIndex& index, int node, const ResourceSet& free, const ResourceSet& demand) {
  const ResourceSet& total = index.nodes()[node].total;
  double worst = index.node_facts(node).utilisation;
  for (const auto& [name, amount] : demand.amounts()) {
    int64_t t = total.GetFixed(name);
    if (t <= 0) return 1e9;  // cannot hold it at all
    int64_t used = std::max<int64_t>(0, t - free.GetFixed(name)) + amount;
    worst = std::max(worst, static_cast<double>(used) / static_cast<double>(t));
  }
  return worst;
}

double Headroom(const ClusterIndex& index, int node, const ResourceSet& free, const ResourceSet& demand) {
  const ResourceSet& total = index.nodes()[node].total;
  double headroom = 0;
  for (const auto& [name, amount] : demand.amounts()) {
    int64_t t = total.GetFixed(name);
    if (t <= 0) continue;
    headroom += static_cast<double>(free.GetFixed(name) - amount) / static_cast<double>(t);
  }
  return headroom;
}

std::string SelectorPhrase(const LabelSelector& selector) {
  return selector.empty() ? std::string() : absl::StrCat(" matching ", selector.ToString());
}

std::string AlternativePrefix(int alternative) {
  return alternative == 0 ? std::string() : absl::StrCat("fallback ", alternative, ": ");
}

std::string JoinLines(const std::vector<std::string>& lines) { return absl::StrJoin(lines, "\n"); }

std::string Count(size_t n, std::string_view singular, std::string_view plural) {
  return absl::StrCat(n, " ", std::string(n == 1 ? singular : plural));
}

}  // namespace torus::sched
