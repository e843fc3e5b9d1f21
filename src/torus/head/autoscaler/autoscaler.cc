#include "torus/head/autoscaler/autoscaler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/common/well_known_labels.h"

namespace torus::head {
namespace {

// Plans are at least this far apart however fast records come.
constexpr int64_t kMinTickGapMicros = 100'000;
// A removed slice's hosts stay draining this long (they are gone well before).
constexpr int64_t kDrainMemoryMs = 10 * 60'000;

std::string ClassLabel(autoscale::CapacityClass c) { return std::string(autoscale::CapacityClassName(c)); }

// The slice a node is a host of (its torus.io/tpu-slice-name label); "" for a node of no slice.
std::string_view SliceOf(const Labels& labels) {
  auto it = labels.find(kLabelTpuSliceName);
  return it == labels.end() ? std::string_view() : std::string_view(it->second);
}

bool Interesting(const Record& r) {
  return std::holds_alternative<GroupSubmitted>(r) || std::holds_alternative<GroupPlaced>(r) ||
         std::holds_alternative<GroupEnded>(r) || std::holds_alternative<GroupBundlesLost>(r) ||
         std::holds_alternative<NodeRegistered>(r) || std::holds_alternative<NodeDied>(r) ||
         std::holds_alternative<WorkerStarting>(r) || std::holds_alternative<WorkerExited>(r);
}

}  // namespace

Autoscaler::Autoscaler(autoscale::AutoscalerConfig config, StateStore* store, const Liveness* liveness,
                       SliceProvider* provider, const Clock* clock, std::function<std::string()> new_suffix,
                       Options options)
    : config_(std::move(config)),
      store_(store),
      liveness_(liveness),
      provider_(provider),
      clock_(clock),
      new_suffix_(std::move(new_suffix)),
      options_(options) {}

Autoscaler::~Autoscaler() { Stop(); }

void Autoscaler::OnNotesChanged(std::function<void()> listener) { on_notes_changed_ = std::move(listener); }

void Autoscaler::Start() {
  const int64_t now = clock_->WallMillis();
  const std::vector<SliceProvider::Launched> launched = provider_->List();  // may call an API server: not locked
  {
    absl::MutexLock lock(&mu_);
    for (const SliceProvider::Launched& l : launched) {
      // Its hosts register again with this head: a fresh provisioning timeout from now.
      slices_.push_back({.name = l.slice,
                         .node_type = l.node_type,
                         .capacity_class = l.capacity_class,
                         .phase = ScaledSlice::Phase::kProvisioning,
                         .launched_ms = now});
    }
    std::sort(slices_.begin(), slices_.end(),
              [](const ScaledSlice& a, const ScaledSlice& b) { return a.name < b.name; });
    if (!slices_.empty()) spdlog::info("autoscaler: took up {} slices launched earlier", slices_.size());
  }
  thread_ = std::thread([this] { Run(); });
}

void Autoscaler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    cv_.Signal();
  }
  if (thread_.joinable()) thread_.join();
}

void Autoscaler::OnRecords(const std::vector<Record>& records) {
  if (std::any_of(records.begin(), records.end(), Interesting)) Wake();
}

void Autoscaler::Wake() {
  absl::MutexLock lock(&mu_);
  dirty_ = true;
  cv_.Signal();
}

std::string Autoscaler::NoteFor(const GroupId& group) const {
  absl::MutexLock lock(&mu_);
  auto it = notes_.find(group);
  return it == notes_.end() ? std::string() : it->second;
}

bool Autoscaler::Draining(const sched::NodeSnapshot& node) const {
  const std::string_view slice = SliceOf(node.labels);
  if (slice.empty()) return false;
  absl::MutexLock lock(&mu_);
  return draining_.find(slice) != draining_.end();
}

Autoscaler::Status Autoscaler::GetStatus() const {
  absl::MutexLock lock(&mu_);
  Status s;
  s.node_types = config_.node_types;
  s.slices = slices_;
  const int64_t now = clock_->WallMillis();
  for (const ClassFailure& f : failures_) {
    if (f.until_ms > now) s.failures.push_back(f);
  }
  s.notes = notes_;
  s.events.assign(events_.begin(), events_.end());
  s.launches = launches_;
  s.launch_failures = launch_failures_;
  s.removals = removals_;
  return s;
}

void Autoscaler::AddEvent(Event event) {
  spdlog::info("autoscaler: {} {} ({} {}): {}", event.kind, event.slice, event.node_type, event.capacity_class,
               event.message);
  events_.push_back(std::move(event));
  while (events_.size() > kMaxEvents) events_.pop_front();
}

void Autoscaler::Run() {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      const int64_t deadline = clock_->NowMicros() + options_.period_ms * 1000;
      while (!stopping_ && !dirty_ && clock_->NowMicros() < deadline) {
        cv_.WaitWithTimeout(&mu_, absl::Microseconds(deadline - clock_->NowMicros()));
      }
      if (stopping_) return;
      const int64_t gap = last_tick_micros_ + kMinTickGapMicros - clock_->NowMicros();
      if (gap > 0) {
        cv_.WaitWithTimeout(&mu_, absl::Microseconds(gap));
        if (stopping_) return;
      }
      dirty_ = false;
      last_tick_micros_ = clock_->NowMicros();
    }
    Tick();
  }
}

void Autoscaler::Tick() {
  const int64_t now = clock_->WallMillis();
  std::vector<std::string> terminate;
  std::set<std::string, std::less<>> removing;  // slices being removed
  ScalingInput in;
  in.config = &config_;
  in.now_ms = now;
  // Asked outside the lock: a provider may call its API server (the scheduler asks for notes meanwhile).
  const std::map<std::string, std::string> provider_failures = provider_->TakeFailures();
  {
    absl::MutexLock lock(&mu_);
    // Launches the provider gave up on: the class failed; what came up of the slice is removed.
    for (const auto& [slice, why] : provider_failures) {
      auto it = std::find_if(slices_.begin(), slices_.end(), [&slice = slice](const ScaledSlice& s) { return s.name == slice; });
      if (it == slices_.end()) continue;
      failures_.push_back({it->node_type, it->capacity_class, why, now, now + config_.failure_backoff_ms});
      ++launch_failures_[{it->node_type, ClassLabel(it->capacity_class)}];
      AddEvent({now, "launch-failed", slice, it->node_type, ClassLabel(it->capacity_class), why});
      draining_[slice] = now;
      terminate.push_back(slice);
      slices_.erase(it);
    }
    std::erase_if(failures_, [now](const ClassFailure& f) { return f.until_ms <= now; });
    std::erase_if(draining_, [now](const auto& d) { return d.second + kDrainMemoryMs < now; });
    in.slices = slices_;
    in.failures = failures_;
    for (const auto& [slice, since] : draining_) removing.insert(slice);
  }
  for (const std::string& slice : terminate) {
    if (absl::Status s = provider_->Terminate(slice); !s.ok()) {
      spdlog::warn("autoscaler: removing slice {}: {}", slice, std::string(s.message()));
    }
  }

  std::set<std::string> names;
  for (const ScaledSlice& s : in.slices) names.insert(s.name);
  in.new_slice_name = [this, &names](const autoscale::NodeType& t) {
    std::string name;
    do {
      name = absl::StrCat(t.name, "-", new_suffix_());
    } while (!names.insert(name).second);
    return name;
  };
  const std::map<NodeId, LeaseHoldings> leased = liveness_->Leased();
  auto placeable = [this](const sched::NodeSnapshot& n) {
    return liveness_->Confirmed(NodeId(n.node_id)) && !Draining(n);
  };
  // Hosts of removed slices: once every one is DEAD, they are forgotten, and the slice with them.
  std::map<std::string, std::vector<NodeId>> dead_hosts;
  std::set<std::string> live_hosts;
  store_->Read([&](const ClusterState& s) {
    for (const auto& [id, node] : s.nodes()) {
      const std::string_view slice = SliceOf(node.info.labels);
      if (slice.empty() || removing.find(slice) == removing.end()) continue;
      if (node.alive()) {
        live_hosts.insert(std::string(slice));
      } else {
        dead_hosts[std::string(slice)].push_back(id);
      }
    }
    in.cluster = BuildPassInput(s, placeable, leased);
    for (const GroupId& id : s.waiting_groups()) in.waiting.push_back(*s.FindGroup(id));
    for (const auto& [id, node] : s.nodes()) {
      if (!s.LiveWorkersOn(id).empty()) in.running_workers.insert(id);
    }
  });
  std::vector<NodeId> forget;
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& slice : removing) {
      // A slice none of whose hosts registered stays draining until forgotten (one may still come up).
      if (live_hosts.count(slice) || dead_hosts[slice].empty()) continue;
      for (const NodeId& id : dead_hosts[slice]) forget.push_back(id);
      draining_.erase(slice);
    }
  }
  if (!forget.empty()) {
    store_->Update([&](Txn& txn) {
      for (const NodeId& id : forget) txn.Apply(NodeRemoved{id, "its slice was removed by the autoscaler", now}).IgnoreError();
    });
  }
  // The scheduler's order: groups being rescheduled first, then by submission.
  std::sort(in.waiting.begin(), in.waiting.end(), [](const Group& a, const Group& b) {
    const bool ar = a.state == PgState::kRescheduling, br = b.state == PgState::kRescheduling;
    return ar != br ? ar : a.seq < b.seq;
  });

  ScalingPlan plan = PlanScaling(in);

  bool notes_changed = false;
  {
    absl::MutexLock lock(&mu_);
    for (ScaledSlice& s : slices_) {
      if (plan.now_running.count(s.name)) {
        s.phase = ScaledSlice::Phase::kRunning;
        s.running_ms = now;
        AddEvent({now, "running", s.name, s.node_type, ClassLabel(s.capacity_class),
                  absl::StrCat("every host registered, ", (now - s.launched_ms) / 1000.0, " s after its launch")});
      }
      auto idle = plan.idle_since.find(s.name);
      s.idle_since_ms = idle == plan.idle_since.end() ? 0 : idle->second;
    }
    for (const ClassFailure& f : plan.new_failures) {
      failures_.push_back(f);
      ++launch_failures_[{f.node_type, ClassLabel(f.capacity_class)}];
    }
    for (const SliceRemoval& r : plan.removals) {
      auto it = std::find_if(slices_.begin(), slices_.end(), [&](const ScaledSlice& s) { return s.name == r.slice; });
      if (it == slices_.end()) continue;
      ++removals_[{it->node_type, ClassLabel(it->capacity_class)}];
      AddEvent({now, "remove", r.slice, it->node_type, ClassLabel(it->capacity_class), r.why});
      draining_[r.slice] = now;
      slices_.erase(it);
    }
    notes_changed = plan.notes != notes_;
    notes_ = plan.notes;
  }
  for (const SliceRemoval& r : plan.removals) {
    if (absl::Status s = provider_->Terminate(r.slice); !s.ok()) {
      spdlog::warn("autoscaler: removing slice {}: {}", r.slice, std::string(s.message()));
    }
  }
  for (const SliceLaunch& l : plan.launches) {
    const autoscale::NodeType* type = config_.Find(l.node_type);
    absl::Status launched = provider_->Launch({l.slice, type, l.capacity_class, now});
    absl::MutexLock lock(&mu_);
    const std::pair<std::string, std::string> key{l.node_type, ClassLabel(l.capacity_class)};
    if (launched.ok()) {
      slices_.push_back({.name = l.slice,
                         .node_type = l.node_type,
                         .capacity_class = l.capacity_class,
                         .phase = ScaledSlice::Phase::kProvisioning,
                         .launched_ms = now});
      ++launches_[key];
      AddEvent({now, "launch", l.slice, l.node_type, key.second, l.why});
    } else {
      // Refused: the class fails now, and the next plan falls back.
      failures_.push_back({l.node_type, l.capacity_class, std::string(launched.message()), now,
                           now + config_.failure_backoff_ms});
      ++launch_failures_[key];
      AddEvent({now, "launch-failed", l.slice, l.node_type, key.second, std::string(launched.message())});
      dirty_ = true;
    }
  }
  if (notes_changed && on_notes_changed_) on_notes_changed_();
}

}  // namespace torus::head
