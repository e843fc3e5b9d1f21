#include "torus/head/autoscaler/plan.h"

#include <optional>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/well_known_labels.h"

namespace torus::head {
namespace {

using autoscale::CapacityClass;
using autoscale::NodeType;

// Unplaced groups tried against new slices per plan: each try decides the group several times.
constexpr size_t kMaxGroupsToLaunchFor = 32;

std::string ClassName(CapacityClass c) { return std::string(autoscale::CapacityClassName(c)); }

std::string ShapeText(const NodeType& t) {
  return absl::StrCat(std::string(GetGenerationInfo(t.shape.generation).accelerator_type), " ",
                      t.shape.topology.ToString());
}

std::string Seconds(int64_t ms) {
  return ms % 1000 == 0 ? absl::StrCat(ms / 1000, " s") : absl::StrCat(static_cast<double>(ms) / 1000, " s");
}

std::string GroupName(const Group& g) { return g.name.empty() ? g.id.str() : g.name; }

int64_t ProvisioningTimeout(const NodeType& t, CapacityClass c) {
  for (const autoscale::ClassOption& o : t.classes) {
    if (o.capacity_class == c) return o.provisioning_timeout_ms;
  }
  return t.classes.empty() ? 600'000 : t.classes.front().provisioning_timeout_ms;
}

std::string_view SliceOf(const sched::NodeSnapshot& n) {
  auto it = n.labels.find(kLabelTpuSliceName);
  return it == n.labels.end() ? std::string_view() : std::string_view(it->second);
}

int RegisteredHosts(const PassInput& input, const std::string& slice) {
  int n = 0;
  for (const sched::NodeSnapshot& node : input.index.nodes) {
    if (node.alive && SliceOf(node) == slice) ++n;
  }
  return n;
}

void MakeUnplaceable(const std::string& slice, PassInput& input) {
  for (sched::NodeSnapshot& node : input.index.nodes) {
    if (SliceOf(node) == slice) node.alive = false;
  }
  input.IndexChanged();
}

// The slices (of those in `launched`) that a decision's bundles are on.
std::set<std::string> SlicesUsed(const Decision& d, const std::map<NodeId, std::string>& host_slice) {
  std::set<std::string> used;
  for (const HeldBundle& b : d.bundles) {
    if (auto it = host_slice.find(b.node); it != host_slice.end()) used.insert(it->second);
  }
  return used;
}

class Planner {
 public:
  explicit Planner(const ScalingInput& in) : in_(in), config_(*in.config), sim_(in.cluster) {}

  ScalingPlan Run() {
    TakeStockOfSlices();
    size_t tried = 0;
    for (const Group& g : in_.waiting) {
      if (Covered(g)) continue;
      if (tried++ < kMaxGroupsToLaunchFor) LaunchFor(g);
    }
    KeepMinimum();
    RemoveIdle();
    return std::move(plan_);
  }

 private:
  struct Candidate {
    int alternative = 0;
    size_t type_index = 0;
    CapacityClass capacity_class = CapacityClass::kOnDemand;
    int slices = 0;
  };

  const ClassFailure* Failed(const std::string& type, CapacityClass c) const {
    for (const ClassFailure& f : plan_.new_failures) {
      if (f.node_type == type && f.capacity_class == c) return &f;
    }
    for (const ClassFailure& f : in_.failures) {
      if (f.node_type == type && f.capacity_class == c && f.until_ms > in_.now_ms) return &f;
    }
    return nullptr;
  }

  void Track(const NodeType& t, const std::string& slice, CapacityClass c, bool provisioning) {
    for (const autoscale::HostPlan& h : autoscale::SliceHosts(t, slice, c)) host_slice_[NodeId(h.name)] = slice;
    if (provisioning) provisioning_[slice] = absl::StrCat(ShapeText(t), ", ", ClassName(c));
  }

  // The first host of running slice `s` that is not alive and placeable (dead, gone, or not registered), or "".
  std::string LostHost(const NodeType& t, const ScaledSlice& s) const {
    std::set<std::string> alive;
    for (const sched::NodeSnapshot& n : sim_.index.nodes) {
      if (n.alive && SliceOf(n) == s.name) alive.insert(n.node_id);
    }
    for (const autoscale::HostPlan& h : autoscale::SliceHosts(t, s.name, s.capacity_class)) {
      if (!alive.count(h.name)) return h.name;
    }
    return "";
  }

  // Provisioning slices: started, timed out, or still to count as coming.
  void TakeStockOfSlices() {
    for (const ScaledSlice& s : in_.slices) {
      const NodeType* t = config_.Find(s.node_type);
      if (t == nullptr) {
        plan_.removals.push_back({s.name, absl::StrCat("node type ", s.node_type, " is no longer configured")});
        MakeUnplaceable(s.name, sim_);
        continue;
      }
      if (s.phase == ScaledSlice::Phase::kProvisioning) {
        if (RegisteredHosts(sim_, s.name) >= t->shape.hosts) {
          plan_.now_running.insert(s.name);
        } else if (const int64_t timeout = ProvisioningTimeout(*t, s.capacity_class);
                   in_.now_ms - s.launched_ms >= timeout) {
          const std::string reason = absl::StrCat("no capacity within ", Seconds(timeout));
          plan_.removals.push_back({s.name, reason});
          if (Failed(t->name, s.capacity_class) == nullptr) {
            plan_.new_failures.push_back({t->name, s.capacity_class, reason, in_.now_ms,
                                          in_.now_ms + config_.failure_backoff_ms});
          }
          MakeUnplaceable(s.name, sim_);
          continue;
        } else {
          AddPlannedSlice(*t, s.name, s.capacity_class, sim_);
          Track(*t, s.name, s.capacity_class, /*provisioning=*/true);
          ++count_[t->name];
          continue;
        }
      }
      // A running slice that lost a host (preempted, crashed) is lost whole: removed, so that another can come.
      if (s.phase == ScaledSlice::Phase::kRunning) {
        if (std::string lost = LostHost(*t, s); !lost.empty()) {
          plan_.removals.push_back({s.name, absl::StrCat("host ", lost, " was lost; the slice is replaced whole")});
          MakeUnplaceable(s.name, sim_);
          continue;
        }
      }
      Track(*t, s.name, s.capacity_class, /*provisioning=*/false);
      running_.push_back(&s);
      ++count_[t->name];
    }
  }

  // Whether `g` fits the cluster with the slices being launched; if so it is counted as held there.
  bool Covered(const Group& g) {
    PassInput trial = sim_;
    DecideOutcome outcome = Decide(g, trial);
    auto* d = std::get_if<Decision>(&outcome);
    if (d == nullptr) return false;
    sim_ = std::move(trial);
    std::vector<std::string> waiting_for;
    for (const std::string& slice : SlicesUsed(*d, host_slice_)) {
      used_.insert(slice);
      if (auto it = provisioning_.find(slice); it != provisioning_.end()) {
        waiting_for.push_back(absl::StrCat(slice, " (", it->second, ")"));
      }
    }
    if (!waiting_for.empty()) {
      plan_.notes[g.id] = absl::StrCat("autoscaler: waiting for ", waiting_for.size() == 1 ? "slice " : "slices ",
                                       absl::StrJoin(waiting_for, ", "), " to start");
    }
    return true;
  }

  // The fewest new slices of `t` in class `c` (at most `room`) that place `g`.
  std::optional<Candidate> Try(const Group& g, size_t type_index, CapacityClass c, int room) const {
    const NodeType& t = config_.node_types[type_index];
    PassInput trial = sim_;
    for (int k = 1; k <= room; ++k) {
      AddPlannedSlice(t, absl::StrCat(t.name, "-planned-", k), c, trial);
      PassInput attempt = trial;
      DecideOutcome outcome = Decide(g, attempt);
      if (auto* d = std::get_if<Decision>(&outcome)) return Candidate{d->alternative, type_index, c, k};
    }
    return std::nullopt;
  }

  // Whether node type `type_index` could hold `g` in some class with no max_slices: with as many new slices as the
  // group has slices or bundles (each needs at most one).
  bool FitsAtAll(const Group& g, size_t type_index) const {
    const NodeType& t = config_.node_types[type_index];
    int most = 1;
    if (g.kind == PgKind::kSlices) {
      most = g.slice_request.primary.num_slices;
      for (const auto& f : g.slice_request.fallbacks) most = std::max(most, f.num_slices);
    } else {
      most = static_cast<int>(g.bundle_request.primary.bundles.size());
      for (const auto& f : g.bundle_request.fallbacks) most = std::max(most, static_cast<int>(f.bundles.size()));
    }
    most = std::min(most, 1000);
    for (const autoscale::ClassOption& option : t.classes) {
      if (Try(g, type_index, option.capacity_class, most)) return true;
    }
    return false;
  }

  void LaunchFor(const Group& g) {
    std::optional<Candidate> best;
    std::vector<std::string> blocked;  // node types that would fit but cannot launch now
    for (size_t i = 0; i < config_.node_types.size(); ++i) {
      const NodeType& t = config_.node_types[i];
      const int room = t.max_slices - count_[t.name] - planned_[t.name];
      std::optional<Candidate> found;
      std::vector<std::string> failed;
      for (const autoscale::ClassOption& option : t.classes) {
        const ClassFailure* failure = Failed(t.name, option.capacity_class);
        if (failure != nullptr) {
          failed.push_back(absl::StrCat(ClassName(option.capacity_class), ": ", failure->reason));
          continue;
        }
        if (room > 0 && (found = Try(g, i, option.capacity_class, room))) break;
      }
      if (found) {
        if (!best || found->alternative < best->alternative) best = found;
        continue;
      }
      // It would fit with more slices, or with a class that failed: say why it does not launch.
      if (!FitsAtAll(g, i)) continue;
      if (!failed.empty() && room > 0) {
        blocked.push_back(absl::StrCat("every capacity class of ", t.name, " failed lately (",
                                       absl::StrJoin(failed, "; "), "); each is tried again ",
                                       Seconds(config_.failure_backoff_ms), " after it failed"));
      } else {
        blocked.push_back(absl::StrCat(t.name, " is at max_slices (", t.max_slices, ")"));
      }
    }
    if (!best) {
      plan_.notes[g.id] = blocked.empty()
                              ? std::string("autoscaler: no node type can hold it")
                              : absl::StrCat("autoscaler: cannot launch for it: ", absl::StrJoin(blocked, "; "));
      return;
    }
    const NodeType& t = config_.node_types[best->type_index];
    std::vector<std::string> names;
    for (int k = 0; k < best->slices; ++k) {
      std::string name = in_.new_slice_name(t);
      AddPlannedSlice(t, name, best->capacity_class, sim_);
      Track(t, name, best->capacity_class, /*provisioning=*/true);
      plan_.launches.push_back({name, t.name, best->capacity_class, absl::StrCat("for group ", GroupName(g))});
      ++planned_[t.name];
      names.push_back(std::move(name));
    }
    std::string note = absl::StrCat("autoscaler: launching ", names.size() == 1 ? "slice " : "slices ",
                                    absl::StrJoin(names, ", "), " (", ShapeText(t), ", ",
                                    ClassName(best->capacity_class), ")");
    for (const autoscale::ClassOption& option : t.classes) {
      if (option.capacity_class == best->capacity_class) break;
      if (const ClassFailure* f = Failed(t.name, option.capacity_class)) {
        absl::StrAppend(&note, "; ", ClassName(option.capacity_class), ": ", f->reason);
      }
    }
    plan_.notes[g.id] = note;
    // Held in the plan's cluster, so that the groups after it do not count on the same slices.
    PassInput trial = sim_;
    DecideOutcome outcome = Decide(g, trial);
    if (auto* d = std::get_if<Decision>(&outcome)) {
      for (const std::string& slice : SlicesUsed(*d, host_slice_)) used_.insert(slice);
      sim_ = std::move(trial);
    }
  }

  void KeepMinimum() {
    for (const NodeType& t : config_.node_types) {
      while (count_[t.name] + planned_[t.name] < t.min_slices) {
        const autoscale::ClassOption* usable = nullptr;
        for (const autoscale::ClassOption& option : t.classes) {
          if (Failed(t.name, option.capacity_class) == nullptr) {
            usable = &option;
            break;
          }
        }
        if (usable == nullptr) break;
        std::string name = in_.new_slice_name(t);
        plan_.launches.push_back({name, t.name, usable->capacity_class, absl::StrCat("min_slices ", t.min_slices)});
        ++planned_[t.name];
      }
    }
  }

  void RemoveIdle() {
    std::map<std::string, int> removed;
    for (const ScaledSlice* s : running_) {
      if (used_.count(s->name)) continue;
      bool idle = true;
      int hosts = 0;
      for (const sched::NodeSnapshot& n : in_.cluster.index.nodes) {
        if (SliceOf(n) != s->name || !n.alive) continue;
        ++hosts;
        if (!(n.available == n.total) || in_.running_workers.count(NodeId(n.node_id))) idle = false;
      }
      if (!idle || hosts == 0) continue;
      const NodeType& t = *config_.Find(s->node_type);
      const int64_t since = s->idle_since_ms != 0 ? s->idle_since_ms : in_.now_ms;
      plan_.idle_since[s->name] = since;
      if (in_.now_ms - since >= t.idle_timeout_ms && count_[t.name] - removed[t.name] > t.min_slices) {
        plan_.removals.push_back({s->name, absl::StrCat("idle for ", Seconds(in_.now_ms - since))});
        ++removed[t.name];
      }
    }
  }

  const ScalingInput& in_;
  const autoscale::AutoscalerConfig& config_;
  PassInput sim_;                                    // the cluster as it will be
  ScalingPlan plan_;
  std::map<std::string, int> count_;                 // node type -> slices launched and kept
  std::map<std::string, int> planned_;               // node type -> launches of this plan
  std::map<NodeId, std::string> host_slice_;         // hosts of launched slices -> slice
  std::map<std::string, std::string> provisioning_;  // slice -> "TPU-V6E 4x4, spot"
  std::vector<const ScaledSlice*> running_;
  std::set<std::string> used_;                       // slices a waiting group would use
};

}  // namespace

std::string_view ScaledSlicePhaseName(ScaledSlice::Phase p) {
  return p == ScaledSlice::Phase::kRunning ? "RUNNING" : "PROVISIONING";
}

void AddPlannedSlice(const autoscale::NodeType& type, const std::string& slice,
                     autoscale::CapacityClass capacity_class, PassInput& input) {
  for (autoscale::HostPlan& h : autoscale::SliceHosts(type, slice, capacity_class)) {
    const NodeId id(h.name);
    bool present = false;
    for (sched::NodeSnapshot& n : input.index.nodes) {
      if (n.node_id == h.name) {
        n.alive = true;
        present = true;
      }
    }
    if (!present) {
      sched::NodeSnapshot n;
      n.node_id = h.name;
      n.alive = true;
      n.labels = std::move(h.labels);
      n.total = h.resources;
      n.available = h.resources;
      input.index.nodes.push_back(std::move(n));
    }
    NodeDevices& d = input.devices[id];
    d.host_chips = type.shape.chips_per_host;
  }
  input.IndexChanged();
}

ScalingPlan PlanScaling(const ScalingInput& input) { return Planner(input).Run(); }

}  // namespace torus::head
