#include "torus/core/lease_policy.h"

#include <algorithm>

namespace torus::core {

int LeasesToRequest(const LeaseDemand& d) {
  const int need = d.queued - d.spare - d.requested;
  if (need <= 0) return 0;
  if (d.task_ms.has_value() && d.held > 0 && d.grant_ms > 0) {
    // The queue's work over the leases held, against what a new worker takes to start.
    const double backlog_ms = static_cast<double>(d.queued - d.spare) * *d.task_ms / d.held;
    if (backlog_ms <= d.grant_ms) return 0;
  }
  const int in_flight_cap = std::min(d.max_requests, std::max(1, d.held));
  return std::max(0, std::min(need, in_flight_cap - d.requested));
}

int64_t WorkersFitting(const std::map<std::string, int64_t>& want, const std::map<std::string, int64_t>& total) {
  int64_t fit = -1;
  for (const auto& [name, amount] : want) {
    if (amount <= 0) continue;
    auto it = total.find(name);
    const int64_t here = it == total.end() ? 0 : it->second / amount;
    fit = fit < 0 ? here : std::min(fit, here);
  }
  return fit;
}

size_t NextCandidate(const std::vector<int64_t>& capacity, const std::vector<int>& taken, bool take_turns,
                     size_t& turn) {
  if (!take_turns) {
    for (size_t i = 0; i < capacity.size() && i < taken.size(); ++i) {
      if (capacity[i] < 0 || taken[i] < capacity[i]) return i;
    }
  }
  return capacity.empty() ? 0 : turn++ % capacity.size();
}

}  // namespace torus::core
