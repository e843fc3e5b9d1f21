// ClusterState: every fact the head knows — nodes, reservations with the devices each bundle holds, workers, jobs
// and gang runs — changed only by applying typed records (records.h). Apply is a pure function of (state, record):
// no clock, no I/O, no randomness, so replaying a journal rebuilds exactly the state that wrote it.
//
// Volatile facts are not here: when each node was last heard from (Liveness), scheduling back-off, RPCs in flight.
//
// Bounds: dead nodes beyond kMaxDeadNodes, ended groups beyond kMaxEndedGroups and dead actors beyond kMaxDeadActors
// are forgotten, oldest first;
// a group's history keeps its first entry and its last 99.
//
// Thread-safety: not thread-safe; StateStore owns it behind its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "torus/head/state/model.h"
#include "torus/head/state/records.h"
#include "torus/sched/cluster_index.h"
#include "torus/sched/slices.h"

namespace torus::head {

class ClusterState {
 public:
  static constexpr size_t kMaxDeadNodes = 1000;
  static constexpr size_t kMaxEndedGroups = 10'000;
  static constexpr size_t kMaxGroupHistory = 100;
  static constexpr size_t kMaxDeadActors = 1000;

  // Applies one record. On an error (a record that does not fit: an unknown id, a terminal job updated, ...) the
  // state is unchanged; the message names the record and the id.
  absl::Status Apply(const Record& record);

  uint64_t epoch() const { return epoch_; }
  // The seq the next submitted group takes; and the highest node incarnation ever given.
  uint64_t next_group_seq() const { return next_group_seq_; }
  uint64_t last_incarnation() const { return last_incarnation_; }

  const std::map<NodeId, Node>& nodes() const { return nodes_; }
  const Node* FindNode(const NodeId& id) const;
  const std::map<GroupId, Group>& groups() const { return groups_; }
  // Live groups (not REMOVED or FAILED), and those waiting (PENDING or RESCHEDULING), by id: what the scheduler and
  // the accounting look at, without walking the ended groups kept for display.
  const std::set<GroupId>& live_groups() const { return live_groups_; }
  const std::set<GroupId>& waiting_groups() const { return waiting_groups_; }
  const Group* FindGroup(const GroupId& id) const;
  // By id, or by the name of a live group.
  const Group* FindGroup(std::string_view id_or_name) const;
  const std::map<WorkerId, Worker>& workers() const { return workers_; }
  const Worker* FindWorker(const WorkerId& id) const;
  const std::map<JobId, Job>& jobs() const { return jobs_; }
  const Job* FindJob(const JobId& id) const;
  const std::map<RunId, Run>& runs() const { return runs_; }
  const Run* FindRun(const RunId& id) const;
  // By id, or the newest run of that name.
  const Run* FindRun(std::string_view id_or_name) const;
  const std::map<ActorId, Actor>& actors() const { return actors_; }
  const Actor* FindActor(const ActorId& id) const;
  // The actor holding `name` in namespace `ns` (not DEAD), or null.
  const Actor* FindNamedActor(const std::string& ns, const std::string& name) const;
  const std::map<std::string, Service, std::less<>>& services() const { return services_; }
  const Service* FindService(std::string_view name) const;
  // Nodes whose certificates were revoked, and why.
  const std::map<NodeId, NodeRevoked>& revoked_nodes() const { return revoked_nodes_; }
  bool IsRevoked(const NodeId& node) const { return revoked_nodes_.count(node) > 0; }
  const std::map<std::string, Package, std::less<>>& packages() const { return packages_; }
  const Package* FindPackage(std::string_view name) const;
  // FailedPrecondition naming `field` and the upload route when `uri` is a package URI the head does not hold; OK
  // for a stored package or a path on the node.
  absl::Status CheckPackageStored(const std::string& field, const std::string& uri) const;

  // ---- Derived views ----

  // Nodes as the scheduler sees them, ordered by id; `available` is the total less what live bundles hold.
  std::vector<sched::NodeSnapshot> NodeSnapshots(bool include_dead) const;
  // The same, taking the labels of `previous` (snapshots of an earlier call, by node id) for the nodes whose
  // registration is the one they were copied from (same generation) instead of copying them again; the labels of
  // those entries of `previous` are left empty.
  std::vector<sched::NodeSnapshot> NodeSnapshots(bool include_dead, std::vector<sched::NodeSnapshot>& previous) const;
  // What live (not lost) bundles hold on each node, and their TPU chips and GPUs.
  struct Held {
    ResourceSet resources;
    std::vector<int> chips;  // ascending
    std::vector<int> gpus;   // ascending
  };
  std::map<NodeId, Held> HeldByNode() const;
  // slice name -> id of the live group holding it.
  std::map<std::string, std::string> SliceHolders() const;
  // The slices of every TPU node (alive and dead), ordered by name; RESERVED where a live group holds a READY one.
  std::vector<sched::Slice> Slices() const;
  // Workers not yet exited on `node`.
  std::vector<const Worker*> LiveWorkersOn(const NodeId& node) const;
  // Live groups with a (not lost) bundle on `node`.
  std::vector<const Group*> GroupsOn(const NodeId& node) const;

  // Counts for /metrics.
  size_t alive_nodes() const { return alive_; }

 private:
  absl::Status ApplyOne(const HeadStarted& r);
  absl::Status ApplyOne(const NodeRegistered& r);
  absl::Status ApplyOne(const NodeDied& r);
  absl::Status ApplyOne(const NodeRemoved& r);
  absl::Status ApplyOne(const GroupSubmitted& r);
  absl::Status ApplyOne(const GroupPlaced& r);
  absl::Status ApplyOne(const GroupWaiting& r);
  absl::Status ApplyOne(const GroupBundlesLost& r);
  absl::Status ApplyOne(const GroupEnded& r);
  absl::Status ApplyOne(const WorkerStarting& r);
  absl::Status ApplyOne(const WorkerStarted& r);
  absl::Status ApplyOne(const WorkerExited& r);
  absl::Status ApplyOne(const JobSubmitted& r);
  absl::Status ApplyOne(const JobUpdated& r);
  absl::Status ApplyOne(const JobStopRequested& r);
  absl::Status ApplyOne(const JobDeleted& r);
  absl::Status ApplyOne(const RunSubmitted& r);
  absl::Status ApplyOne(const AttemptStarted& r);
  absl::Status ApplyOne(const AttemptEnded& r);
  absl::Status ApplyOne(const AttemptExplained& r);
  absl::Status ApplyOne(const RunFinished& r);
  absl::Status ApplyOne(const RunStopRequested& r);
  absl::Status ApplyOne(const RunReported& r);
  absl::Status ApplyOne(const CheckpointCommitted& r);
  absl::Status ApplyOne(const PackageStored& r);
  absl::Status ApplyOne(const PackageRemoved& r);
  absl::Status ApplyOne(const ActorRegistered& r);
  absl::Status ApplyOne(const ActorUpdated& r);
  absl::Status ApplyOne(const ServiceDeployed& r);
  absl::Status ApplyOne(const ServiceDeleted& r);
  absl::Status ApplyOne(const NodeRevoked& r);

  Group* MutableGroup(const GroupId& id);
  void AddHistory(Group& group, int64_t wall_ms, const std::string& message);
  // Keeps live_groups_, waiting_groups_ and ended_groups_ in step with a group's state.
  void Index(const Group& group);
  void PruneDeadNodes();
  void PruneEndedGroups();

  uint64_t epoch_ = 0;
  uint64_t next_group_seq_ = 1;
  uint64_t last_incarnation_ = 0;
  size_t alive_ = 0;
  std::map<NodeId, Node> nodes_;
  std::map<GroupId, Group> groups_;
  std::set<GroupId> live_groups_;
  std::set<GroupId> waiting_groups_;
  std::set<std::pair<uint64_t, GroupId>> ended_groups_;  // by seq, oldest first
  std::map<std::string, GroupId, std::less<>> live_names_;
  std::map<WorkerId, Worker> workers_;
  std::map<JobId, Job> jobs_;
  std::map<RunId, Run> runs_;
  std::map<std::string, Package, std::less<>> packages_;
  std::map<std::string, Service, std::less<>> services_;
  std::map<NodeId, NodeRevoked> revoked_nodes_;
  std::map<ActorId, Actor> actors_;
  std::map<std::pair<std::string, std::string>, ActorId> actor_names_;  // (namespace, name) of actors not DEAD
  std::set<std::pair<int64_t, ActorId>> dead_actors_;                     // by end time, oldest first

  friend class StateCodec;  // snapshots read and restore every member
};

}  // namespace torus::head
