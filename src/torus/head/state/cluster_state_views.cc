// ClusterState's lookups and the views derived from its records (cluster_state.h); applying records is in
// cluster_state.cc.
#include "torus/head/state/cluster_state.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace torus::head {
namespace {

template <typename T>
void SortUnique(std::vector<T>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

}  // namespace

// ---- Lookups ----

const Node* ClusterState::FindNode(const NodeId& id) const {
  auto it = nodes_.find(id);
  return it == nodes_.end() ? nullptr : &it->second;
}

const Group* ClusterState::FindGroup(const GroupId& id) const {
  auto it = groups_.find(id);
  return it == groups_.end() ? nullptr : &it->second;
}

const Group* ClusterState::FindGroup(std::string_view id_or_name) const {
  if (const Group* g = FindGroup(GroupId(std::string(id_or_name)))) return g;
  auto named = live_names_.find(id_or_name);
  return named == live_names_.end() ? nullptr : FindGroup(named->second);
}

Group* ClusterState::MutableGroup(const GroupId& id) {
  auto it = groups_.find(id);
  return it == groups_.end() ? nullptr : &it->second;
}

const Worker* ClusterState::FindWorker(const WorkerId& id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

const Job* ClusterState::FindJob(const JobId& id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

const Package* ClusterState::FindPackage(std::string_view name) const {
  auto it = packages_.find(name);
  return it == packages_.end() ? nullptr : &it->second;
}

const Actor* ClusterState::FindActor(const ActorId& id) const {
  auto it = actors_.find(id);
  return it == actors_.end() ? nullptr : &it->second;
}

const Actor* ClusterState::FindNamedActor(const std::string& ns, const std::string& name) const {
  auto it = actor_names_.find({ns, name});
  return it == actor_names_.end() ? nullptr : FindActor(it->second);
}

absl::Status ClusterState::CheckPackageStored(const std::string& field, const std::string& uri) const {
  auto name = PackageNameOf(uri);
  if (!name || FindPackage(*name) != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(field, ": package ", uri,
                                                    " is not on the head; upload it first (PUT /api/packages/gcs/",
                                                    *name, ")"));
}

const Run* ClusterState::FindRun(const RunId& id) const {
  auto it = runs_.find(id);
  return it == runs_.end() ? nullptr : &it->second;
}

const Run* ClusterState::FindRun(std::string_view id_or_name) const {
  if (const Run* run = FindRun(RunId(std::string(id_or_name)))) return run;
  const Run* latest = nullptr;
  for (const auto& [id, run] : runs_) {
    if (run.spec.run.name == id_or_name && (latest == nullptr || run.created_time_ms >= latest->created_time_ms)) {
      latest = &run;
    }
  }
  return latest;
}

// ---- Derived views ----

std::map<NodeId, ClusterState::Held> ClusterState::HeldByNode() const {
  std::map<NodeId, Held> held;
  for (const GroupId& id : live_groups_) {
    const Group& g = groups_.at(id);
    for (const HeldBundle& b : g.bundles) {
      if (b.lost) continue;
      Held& h = held[b.node];
      h.resources.Add(b.resources);
      h.chips.insert(h.chips.end(), b.chips.begin(), b.chips.end());
      h.gpus.insert(h.gpus.end(), b.gpus.begin(), b.gpus.end());
    }
  }
  for (auto& [node, h] : held) {
    SortUnique(h.chips);
    SortUnique(h.gpus);
  }
  return held;
}

std::vector<sched::NodeSnapshot> ClusterState::NodeSnapshots(bool include_dead) const {
  std::vector<sched::NodeSnapshot> none;
  return NodeSnapshots(include_dead, none);
}

std::vector<sched::NodeSnapshot> ClusterState::NodeSnapshots(bool include_dead,
                                                             std::vector<sched::NodeSnapshot>& previous) const {
  const std::map<NodeId, Held> held = HeldByNode();
  std::vector<sched::NodeSnapshot> out;
  out.reserve(nodes_.size());
  auto before = previous.begin();  // both by node id: walked together
  for (const auto& [id, n] : nodes_) {
    if (!include_dead && !n.alive()) continue;
    while (before != previous.end() && before->node_id < id.str()) ++before;
    sched::NodeSnapshot s{id.str(), n.info.address, n.alive(), {}, n.info.total, n.info.total, n.incarnation};
    if (before != previous.end() && before->node_id == s.node_id && before->generation == n.incarnation &&
        n.incarnation != 0) {
      s.labels = std::move(before->labels);
      before->labels.clear();
    } else {
      s.labels = n.info.labels;
    }
    if (auto it = held.find(id); it != held.end()) s.available.Subtract(it->second.resources);
    out.push_back(std::move(s));
  }
  return out;
}

std::map<std::string, std::string> ClusterState::SliceHolders() const {
  std::map<std::string, std::string> holders;
  for (const GroupId& id : live_groups_) {
    for (const std::string& s : groups_.at(id).slices) holders[s] = id.str();
  }
  return holders;
}

std::vector<sched::Slice> ClusterState::Slices() const {
  std::vector<sched::Slice> slices = sched::BuildSlices(NodeSnapshots(/*include_dead=*/true));
  const std::map<std::string, std::string> holders = SliceHolders();
  for (sched::Slice& s : slices) {
    if (s.state == sched::SliceState::kReady && holders.contains(s.name)) s.state = sched::SliceState::kReserved;
  }
  return slices;
}

std::vector<const Worker*> ClusterState::LiveWorkersOn(const NodeId& node) const {
  std::vector<const Worker*> out;
  for (const auto& [id, w] : workers_) {
    if (w.node == node && w.phase != WorkerPhase::kExited) out.push_back(&w);
  }
  return out;
}

std::vector<const Group*> ClusterState::GroupsOn(const NodeId& node) const {
  std::vector<const Group*> out;
  for (const GroupId& id : live_groups_) {
    const Group& g = groups_.at(id);
    for (const HeldBundle& b : g.bundles) {
      if (!b.lost && b.node == node) {
        out.push_back(&g);
        break;
      }
    }
  }
  return out;
}

}  // namespace torus::head
