// The job state machine: what a job does next, decided from where it stands (level-triggered: the same facts give
// the same step, however often they are looked at). Pure: facts in, a step out.
//
//   PENDING  --its group CREATED (or a node picked, without resources)--> start its worker
//   PENDING  --the worker runs--> RUNNING
//   RUNNING  --the worker exits--> SUCCEEDED (0) | FAILED (non-zero, signal, lost with its node) | STOPPED (asked)
//   PENDING  --stop--> STOPPED;  --its group removed or failed--> FAILED
//   RUNNING  --its group removed--> FAILED, and the worker is stopped
// A terminal job releases its group and stops a worker that still runs. Messages and error types are Ray's.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "torus/head/state/cluster_state.h"
#include "torus/head/state/model.h"
#include "torus/head/state/records.h"

namespace torus::head {

struct JobFacts {
  const Job* job = nullptr;
  const Group* group = nullptr;     // its reservation; null when it has none (or it was forgotten)
  const Worker* worker = nullptr;   // its worker, once one was started
  bool worker_node_alive = false;   // the worker's node is ALIVE
};

struct JobStep {
  std::optional<JobUpdated> update;  // a status to record
  bool start = false;                // start its worker
  bool stop_worker = false;          // its worker runs and must stop
  bool release_group = false;        // its group is live and must end (REMOVED)
  bool operator==(const JobStep&) const;
};

JobStep DecideJob(const JobFacts& facts, int64_t wall_ms);

// The facts of `job` in `state`.
JobFacts JobFactsOf(const ClusterState& state, const Job& job);

// Where a job that reserves nothing runs: the alive node at `head_address` (the head host's agent) when it matches
// the job's label selector, else the alive node with the lowest id that does; nullopt when none does.
// `placeable(node)` narrows the alive nodes to those that may be used now.
template <typename Placeable>
std::optional<NodeId> PickNodeForJob(const ClusterState& state, const Job& job, const std::string& head_address,
                                     Placeable placeable);

// "Job is waiting for resources: <group's reason>", "Job is waiting for a node that matches its label selector."...
std::string PendingMessage(const ClusterState& state, const Job& job);

}  // namespace torus::head

#include "torus/common/label_selector.h"

namespace torus::head {

template <typename Placeable>
std::optional<NodeId> PickNodeForJob(const ClusterState& state, const Job& job, const std::string& head_address,
                                     Placeable placeable) {
  auto selector = LabelSelector::Parse(job.request.label_selector);
  if (!selector.ok()) return std::nullopt;  // validated at submission
  std::optional<NodeId> first;
  for (const auto& [id, n] : state.nodes()) {
    if (!n.alive() || !placeable(id) || !selector->Matches(n.info.labels)) continue;
    if (n.info.address == head_address) return id;
    if (!first) first = id;
  }
  return first;
}

}  // namespace torus::head
