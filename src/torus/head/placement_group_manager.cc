#include "torus/head/placement_group_manager.h"

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"
#include "torus/rpc/auth.h"
#include "torus/rpc/convert.h"

namespace torus::head {
namespace {

std::string NewGroupId() {
  auto token = rpc::GenerateToken();
  return absl::StrCat("pg-", token.ok() ? token->substr(0, 10) : "0000000000");
}

bool IsWaiting(const PlacementGroup& g) {
  return g.state == PgState::kPending || g.state == PgState::kRescheduling;
}

bool IsSettled(const PlacementGroup& g) {
  return g.state == PgState::kCreated || g.state == PgState::kFailed || g.state == PgState::kRemoved;
}

rpc::PlacementGroupView View(const PlacementGroup& g) {
  rpc::PlacementGroupView view;
  ToView(g, &view);
  return view;
}

}  // namespace

PlacementGroupManager::PlacementGroupManager(const NodeRegistry* registry, AgentPool* agents, const Clock* clock,
                                             Options options)
    : registry_(registry), agents_(agents), clock_(clock), options_(options) {}

PlacementGroupManager::~PlacementGroupManager() { Stop(); }

void PlacementGroupManager::Start() { thread_ = std::thread([this] { Run(); }); }

void PlacementGroupManager::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PlacementGroupManager::AddStateListener(StateListener listener) { listeners_.push_back(std::move(listener)); }

void PlacementGroupManager::FlushEvents(Lock& lock) {
  if (events_.empty() || listeners_.empty()) {
    events_.clear();
    return;
  }
  std::vector<std::pair<std::string, PgState>> events;
  events.swap(events_);
  lock.unlock();
  for (const auto& [id, state] : events) {
    for (const StateListener& listener : listeners_) listener(id, state);
  }
  lock.lock();
}

void PlacementGroupManager::NotifyClusterChanged() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    dirty_ = true;
  }
  cv_.notify_all();
}

void PlacementGroupManager::NotifyNodeDead(const std::string& node_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    dead_nodes_.push_back(node_id);
    dirty_ = true;
  }
  cv_.notify_all();
}

PlacementGroupManager::ViewOr PlacementGroupManager::CreatePlacementGroup(const rpc::PlacementGroupSpec& spec) {
  auto request = BundleRequestFromProto(spec);
  if (!request.ok()) return request.status();
  auto group = std::make_unique<PlacementGroup>();
  group->kind = PgKind::kBundles;
  group->request_text = DescribeBundleRequest(*request);
  group->bundle_request = *std::move(request);
  group->timeout_s = spec.timeout_s();
  return Submit(std::move(group), spec.name());
}

PlacementGroupManager::ViewOr PlacementGroupManager::ReserveSlices(const rpc::SliceGroupSpec& spec) {
  auto request = SliceRequestFromProto(spec);
  if (!request.ok()) return request.status();
  auto group = std::make_unique<PlacementGroup>();
  group->kind = PgKind::kSlices;
  group->request_text = DescribeSliceRequest(*request);
  group->slice_request = *std::move(request);
  group->timeout_s = spec.timeout_s();
  return Submit(std::move(group), spec.name());
}

PlacementGroupManager::ViewOr PlacementGroupManager::SubmitBundles(sched::BundleRequest request,
                                                                   const std::string& name) {
  if (absl::Status s = sched::ValidateBundleRequest(request); !s.ok()) return s;
  auto group = std::make_unique<PlacementGroup>();
  group->kind = PgKind::kBundles;
  group->request_text = DescribeBundleRequest(request);
  group->bundle_request = std::move(request);
  return Submit(std::move(group), name);
}

PlacementGroupManager::ViewOr PlacementGroupManager::SubmitSlices(sched::SliceGroupRequest request,
                                                                  const std::string& name) {
  if (absl::Status s = sched::ValidateSliceGroupRequest(request); !s.ok()) return s;
  auto group = std::make_unique<PlacementGroup>();
  group->kind = PgKind::kSlices;
  group->request_text = DescribeSliceRequest(request);
  group->slice_request = std::move(request);
  return Submit(std::move(group), name);
}

PlacementGroupManager::ViewOr PlacementGroupManager::Submit(std::unique_ptr<PlacementGroup> group,
                                                            const std::string& name) {
  if (name.size() > 128) return absl::InvalidArgumentError("name must be at most 128 characters");
  std::lock_guard<std::mutex> lock(mu_);
  if (!name.empty() && live_names_.contains(name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("a placement group named \"", name, "\" exists (", live_names_[name], "); remove it first"));
  }
  group->id = NewGroupId();
  group->name = name;
  group->seq = next_seq_++;
  group->created_wall_ms = clock_->WallMillis();
  group->created_micros = clock_->NowMicros();
  group->state = PgState::kPending;
  group->reason = "waiting to be scheduled";
  group->history.push_back({group->created_wall_ms, "PENDING", "submitted: " + group->request_text});
  if (!name.empty()) live_names_[name] = group->id;
  rpc::PlacementGroupView view = View(*group);
  spdlog::info("placement group {} submitted: {}", group->id, group->request_text);
  groups_[group->id] = std::move(group);
  dirty_ = true;
  cv_.notify_all();
  return view;
}

PlacementGroup* PlacementGroupManager::FindLocked(const std::string& id_or_name) const {
  auto it = groups_.find(id_or_name);
  if (it != groups_.end()) return it->second.get();
  auto named = live_names_.find(id_or_name);
  if (named != live_names_.end()) return groups_.at(named->second).get();
  return nullptr;
}

PlacementGroupManager::ViewOr PlacementGroupManager::Get(const std::string& id_or_name) const {
  std::lock_guard<std::mutex> lock(mu_);
  const PlacementGroup* g = FindLocked(id_or_name);
  if (g == nullptr) return absl::NotFoundError(absl::StrCat("placement group ", id_or_name, " does not exist"));
  return View(*g);
}

void PlacementGroupManager::WaitReady(const std::string& id_or_name, int64_t wait_ms,
                                      std::function<void(ViewOr)> done) {
  Lock lock(mu_);
  const PlacementGroup* g = FindLocked(id_or_name);
  if (g == nullptr) {
    lock.unlock();
    done(absl::NotFoundError(absl::StrCat("placement group ", id_or_name, " does not exist")));
    return;
  }
  if (IsSettled(*g) || wait_ms <= 0) {
    ViewOr view = View(*g);
    lock.unlock();
    done(std::move(view));
    return;
  }
  waiters_.push_back({g->id, clock_->NowMicros() + wait_ms * 1000, std::move(done)});
  cv_.notify_all();
}

PlacementGroupManager::ViewOr PlacementGroupManager::Remove(const std::string& id_or_name) {
  std::vector<std::pair<std::function<void(ViewOr)>, ViewOr>> finished;
  ViewOr result;
  {
    Lock lock(mu_);
    PlacementGroup* g = FindLocked(id_or_name);
    if (g == nullptr) return absl::NotFoundError(absl::StrCat("placement group ", id_or_name, " does not exist"));
    if (g->Live()) {
      std::vector<HeldBundle> held;
      for (const HeldBundle& b : g->bundles) {
        if (!b.lost) held.push_back(b);
      }
      QueueReleaseLocked(held);
      g->bundles.clear();
      g->slices.clear();
      if (!g->name.empty()) live_names_.erase(g->name);
      g->reason.clear();
      SetStateLocked(*g, PgState::kRemoved, "removed");
      FinishWaitersLocked(finished, /*all_due=*/false);
      dirty_ = true;
    }
    result = View(*g);
    FlushEvents(lock);
  }
  cv_.notify_all();
  for (auto& [done, view] : finished) done(std::move(view));
  return result;
}

std::vector<rpc::PlacementGroupView> PlacementGroupManager::List(bool include_removed) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const PlacementGroup*> sorted;
  for (const auto& [id, g] : groups_) {
    if (include_removed || g->Live()) sorted.push_back(g.get());
  }
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->seq < b->seq; });
  std::vector<rpc::PlacementGroupView> out;
  for (const PlacementGroup* g : sorted) out.push_back(View(*g));
  return out;
}

std::vector<int> PlacementGroupManager::BusyChips(const std::string& node_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::set<int> busy;
  for (const auto& [id, g] : groups_) {
    if (!g->Live()) continue;
    for (const HeldBundle& b : g->bundles) {
      if (!b.lost && b.node_id == node_id) busy.insert(b.chips.begin(), b.chips.end());
    }
  }
  return {busy.begin(), busy.end()};
}

std::map<std::string, std::string> PlacementGroupManager::SliceHolders() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::string> holders;
  for (const auto& [id, g] : groups_) {
    if (!g->Live()) continue;
    for (const std::string& s : g->slices) holders[s] = id;
  }
  return holders;
}

std::vector<rpc::PlacementGroupView> PlacementGroupManager::Waiting() const {
  std::vector<rpc::PlacementGroupView> out;
  for (auto& view : List(false)) {
    if (view.state() == "PENDING" || view.state() == "RESCHEDULING") out.push_back(std::move(view));
  }
  return out;
}

void PlacementGroupManager::SetStateLocked(PlacementGroup& group, PgState state, const std::string& message) {
  if (group.state == state && !group.history.empty() && group.history.back().message == message) return;
  group.state = state;
  events_.emplace_back(group.id, state);
  group.history.push_back({clock_->WallMillis(), PgStateName(state), message});
  // Keep the history bounded for long-lived groups that flap.
  if (group.history.size() > 100) group.history.erase(group.history.begin() + 1);
  spdlog::info("placement group {}: {} ({})", group.id, PgStateName(state), message);
}

void PlacementGroupManager::QueueReleaseLocked(const std::vector<HeldBundle>& bundles) {
  to_release_.insert(to_release_.end(), bundles.begin(), bundles.end());
}

void PlacementGroupManager::FinishWaitersLocked(std::vector<std::pair<std::function<void(ViewOr)>, ViewOr>>& out,
                                                bool all_due) {
  const int64_t now = clock_->NowMicros();
  std::erase_if(waiters_, [&](Waiter& w) {
    auto it = groups_.find(w.id);
    if (it == groups_.end()) {
      out.emplace_back(std::move(w.done), absl::NotFoundError("placement group was forgotten"));
      return true;
    }
    if (IsSettled(*it->second) || (all_due && w.deadline_micros <= now)) {
      out.emplace_back(std::move(w.done), View(*it->second));
      return true;
    }
    return false;
  });
}

int64_t PlacementGroupManager::NextWakeMicrosLocked() const {
  int64_t next = clock_->NowMicros() + 1'000'000;  // a slow tick bounds the cost of a missed event
  for (const Waiter& w : waiters_) next = std::min(next, w.deadline_micros);
  for (const auto& [id, g] : groups_) {
    if (!IsWaiting(*g)) continue;
    if (g->retry_at_micros > 0) next = std::min(next, g->retry_at_micros);
    if (g->timeout_s > 0) next = std::min(next, g->created_micros + static_cast<int64_t>(g->timeout_s * 1e6));
  }
  return next;
}

void PlacementGroupManager::Run() {
  Lock lock(mu_);
  while (!stopping_) {
    dirty_ = false;
    HandleDeathsLocked();
    ReleaseQueued(lock);
    ExpireTimeoutsLocked();
    ScheduleWaiting(lock);
    FlushEvents(lock);
    std::vector<std::pair<std::function<void(ViewOr)>, ViewOr>> finished;
    FinishWaitersLocked(finished, /*all_due=*/true);
    if (!finished.empty()) {
      lock.unlock();
      for (auto& [done, view] : finished) done(std::move(view));
      lock.lock();
    }
    if (dirty_ || stopping_) continue;
    const int64_t wait = std::max<int64_t>(0, NextWakeMicrosLocked() - clock_->NowMicros());
    cv_.wait_for(lock, std::chrono::microseconds(wait), [this] { return dirty_ || stopping_; });
  }
}

void PlacementGroupManager::HandleDeathsLocked() {
  if (dead_nodes_.empty()) return;
  std::set<std::string> dead(dead_nodes_.begin(), dead_nodes_.end());
  dead_nodes_.clear();
  for (auto& [id, g] : groups_) {
    if (!g->Live()) continue;
    std::vector<std::string> lost_nodes;
    if (g->kind == PgKind::kBundles) {
      std::vector<int> lost;
      for (HeldBundle& b : g->bundles) {
        if (!b.lost && dead.contains(b.node_id)) {
          b.lost = true;
          lost.push_back(b.index);
          lost_nodes.push_back(b.node_id);
        }
      }
      if (lost.empty()) continue;
      SetStateLocked(*g, PgState::kRescheduling,
                     absl::StrCat("node ", absl::StrJoin(std::set<std::string>(lost_nodes.begin(), lost_nodes.end()),
                                                         ", "),
                                  " died: bundle", lost.size() == 1 ? " " : "s ", absl::StrJoin(lost, ", "),
                                  " lost; placing again"));
    } else {
      // The slice is the unit of failure: every slice with a dead host is released whole.
      std::set<std::string> degraded;
      for (const HeldBundle& b : g->bundles) {
        if (dead.contains(b.node_id)) degraded.insert(b.slice_name);
      }
      if (degraded.empty()) continue;
      std::vector<HeldBundle> keep, release;
      for (const HeldBundle& b : g->bundles) {
        if (!degraded.contains(b.slice_name)) {
          keep.push_back(b);
        } else if (!dead.contains(b.node_id)) {
          release.push_back(b);
        }
      }
      QueueReleaseLocked(release);
      g->bundles = std::move(keep);
      std::erase_if(g->slices, [&](const std::string& s) { return degraded.contains(s); });
      SetStateLocked(*g, PgState::kRescheduling,
                     absl::StrCat("slice", degraded.size() == 1 ? " " : "s ", absl::StrJoin(degraded, ", "),
                                  " degraded (a host died): released whole; reserving a replacement"));
    }
    g->retry_at_micros = 0;
    g->backoff_ms = 0;
  }
}

void PlacementGroupManager::ReleaseQueued(Lock& lock) {
  if (to_release_.empty()) return;
  std::vector<HeldBundle> release;
  release.swap(to_release_);
  lock.unlock();
  agents_->Release(GroupByAgent(release));
  lock.lock();
}

void PlacementGroupManager::ExpireTimeoutsLocked() {
  const int64_t now = clock_->NowMicros();
  for (auto& [id, g] : groups_) {
    if (!IsWaiting(*g) || g->timeout_s <= 0) continue;
    if (now - g->created_micros < static_cast<int64_t>(g->timeout_s * 1e6)) continue;
    std::vector<HeldBundle> held;
    for (const HeldBundle& b : g->bundles) {
      if (!b.lost) held.push_back(b);
    }
    QueueReleaseLocked(held);
    g->bundles.clear();
    g->slices.clear();
    if (!g->name.empty()) live_names_.erase(g->name);
    g->reason = absl::StrCat("timed out after ", g->timeout_s, " s: ", g->reason);
    SetStateLocked(*g, PgState::kFailed, g->reason);
    dirty_ = true;
  }
}

void PlacementGroupManager::ScheduleWaiting(Lock& lock) {
  std::vector<PlacementGroup*> waiting;
  for (auto& [id, g] : groups_) {
    if (IsWaiting(*g)) waiting.push_back(g.get());
  }
  if (waiting.empty()) return;
  std::sort(waiting.begin(), waiting.end(), [](const PlacementGroup* a, const PlacementGroup* b) {
    bool ar = a->state == PgState::kRescheduling, br = b->state == PgState::kRescheduling;
    return ar != br ? ar : a->seq < b->seq;
  });
  std::vector<std::string> ids;
  for (const PlacementGroup* g : waiting) ids.push_back(g->id);

  // Groups that hold nothing yet are decided one after another against one accounting (each decision counted as
  // held for the next), then reserved together: one round of prepares and one of commits for the whole batch.
  // A group that already holds bundles (rescheduling) is placed on its own.
  std::vector<PlacementDecision> batch;
  std::optional<sched::IndexInput> shared;
  const Targets where = AgentTargets();
  auto flush = [&] {
    ReserveBatch(batch, lock);
    for (PlacementDecision& d : batch) ApplyLocked(d);
    batch.clear();
    shared.reset();
  };
  for (const std::string& id : ids) {
    if (stopping_) break;
    auto it = groups_.find(id);
    if (it == groups_.end() || !IsWaiting(*it->second)) continue;
    PlacementGroup& g = *it->second;
    const int64_t now = clock_->NowMicros();
    const bool old = now - g.created_micros > options_.fifo_after_ms * 1000;
    if (g.retry_at_micros > now) {
      if (old) break;
      continue;
    }
    bool placed = false;
    if (!g.bundles.empty() || !g.slices.empty()) {
      flush();
      placed = TrySchedule(id, lock);
    } else {
      if (!shared) shared = IndexInputLocked(g);
      PlacementDecision d = DecideLocked(&g, *shared, where);
      placed = d.placed;
      if (placed) {
        HoldInInput(d, *shared);
        batch.push_back(std::move(d));
      }
    }
    if (!placed && old) break;  // strict FIFO behind a request that has waited long
  }
  flush();
}

}  // namespace torus::head
