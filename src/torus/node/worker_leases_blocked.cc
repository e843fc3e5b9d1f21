// WorkerLeases::SetWorkerBlocked: a leased worker blocked in get/wait lends its lease's CPU to the host until it runs
// again (as Ray's raylet releases a blocked worker's CPU). See worker_leases.h.
#include "absl/strings/str_cat.h"
#include "torus/node/worker_leases.h"

namespace torus::node {

absl::Status WorkerLeases::SetWorkerBlocked(const std::string& worker_id, bool blocked) {
  {
    absl::MutexLock lock(&mu_);
    auto owner = worker_lease_.find(worker_id);
    if (owner == worker_lease_.end()) {
      return absl::NotFoundError(absl::StrCat("worker ", worker_id, " holds no lease on this node"));
    }
    Lease& lease = leases_.at(owner->second);
    if (lease.info.blocked == blocked) return absl::OkStatus();
    lease.info.blocked = blocked;
    // A lease inside a placement group's bundle holds the group's CPUs, not the host's: it lends nothing.
    const bool own_bundle = lease.bundle.first.empty();
    const std::string group = kLeaseGroupPrefix + lease.info.lease_id;
    if (blocked) {
      const int64_t cpu = lease.info.resources.GetFixed(kResourceCpu);
      if (!own_bundle || cpu == 0) return absl::OkStatus();
      ResourceSet lend;
      lend.SetFixed(kResourceCpu, cpu);
      if (absl::Status s = ledger_->Lend(group, 0, lend); !s.ok()) return s;
      lease.info.lent = std::move(lend);
      // Requests waiting for a CPU may fit now.
      changed_.SignalAll();
    } else {
      if (lease.info.lent.empty()) return absl::OkStatus();
      // Taken back at once, even past what is free: the worker runs now (the host is over-subscribed until enough
      // other leases end, and nothing new fits meanwhile).
      ledger_->Reclaim(group, 0);
      lease.info.lent = ResourceSet();
    }
  }
  if (on_ledger_change_) on_ledger_change_();
  return absl::OkStatus();
}

}  // namespace torus::node
