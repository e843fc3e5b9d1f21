#include "torus/head/placement/placement_scheduler.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/head/placement/group_ops.h"

namespace torus::head {
namespace {

// The group a record is about, if any.
std::optional<GroupId> GroupOf(const Record& r) {
  if (auto* x = std::get_if<GroupSubmitted>(&r)) return x->group.id;
  if (auto* x = std::get_if<GroupPlaced>(&r)) return x->group;
  if (auto* x = std::get_if<GroupWaiting>(&r)) return x->group;
  if (auto* x = std::get_if<GroupBundlesLost>(&r)) return x->group;
  if (auto* x = std::get_if<GroupEnded>(&r)) return x->group;
  return std::nullopt;
}

// Records after which a waiting group may fit where it did not.
bool MayFreeCapacity(const Record& r) {
  return std::holds_alternative<NodeRegistered>(r) || std::holds_alternative<NodeDied>(r) ||
         std::holds_alternative<GroupSubmitted>(r) || std::holds_alternative<GroupBundlesLost>(r) ||
         std::holds_alternative<GroupEnded>(r);
}

}  // namespace

PlacementScheduler::PlacementScheduler(StateStore* store, const Liveness* liveness, AgentPool* agents,
                                       const Clock* clock, Options options)
    : store_(store), liveness_(liveness), agents_(agents), clock_(clock), options_(options) {}

PlacementScheduler::~PlacementScheduler() { Stop(); }

void PlacementScheduler::Start() { thread_ = std::thread([this] { Run(); }); }

void PlacementScheduler::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

void PlacementScheduler::Wake() {
  absl::MutexLock lock(&mu_);
  dirty_ = true;
  cv_.SignalAll();
}

void PlacementScheduler::Release(std::vector<HeldBundle> bundles) {
  if (bundles.empty()) return;
  absl::MutexLock lock(&mu_);
  to_release_.insert(to_release_.end(), bundles.begin(), bundles.end());
  dirty_ = true;
  cv_.SignalAll();
}

void PlacementScheduler::OnRecords(const std::vector<Record>& records) {
  bool wake = false;
  std::set<GroupId> touched;
  for (const Record& r : records) {
    wake = wake || MayFreeCapacity(r);
    if (auto id = GroupOf(r)) touched.insert(*id);
  }
  if (wake) Wake();
  std::vector<GroupId> watched;
  {
    absl::MutexLock lock(&mu_);
    for (const GroupId& id : touched) {
      if (waiters_.contains(id)) watched.push_back(id);
    }
  }
  if (!watched.empty()) FinishWaiters(watched, /*due=*/false);
}

void PlacementScheduler::WaitSettled(const std::string& id_or_name, int64_t wait_ms, WaitDone done) {
  auto id = store_->Read([&](const ClusterState& s) -> std::optional<GroupId> {
    const Group* g = s.FindGroup(id_or_name);
    return g == nullptr ? std::nullopt : std::optional<GroupId>(g->id);
  });
  if (!id) {
    done(absl::NotFoundError(absl::StrCat("placement group ", id_or_name, " does not exist")));
    return;
  }
  {
    // Registered before the state is read again, so that a change committed in between is not missed.
    absl::MutexLock lock(&mu_);
    waiters_[*id].push_back({clock_->NowMicros() + std::max<int64_t>(wait_ms, 0) * 1000, std::move(done)});
    cv_.SignalAll();
  }
  FinishWaiters({*id}, /*due=*/wait_ms <= 0);
}

void PlacementScheduler::FinishWaiters(const std::vector<GroupId>& groups, bool due) {
  std::map<GroupId, std::optional<Group>> now = store_->Read([&](const ClusterState& s) {
    std::map<GroupId, std::optional<Group>> out;
    for (const GroupId& id : groups) {
      const Group* g = s.FindGroup(id);
      out[id] = g == nullptr ? std::nullopt : std::optional<Group>(*g);
    }
    return out;
  });
  std::vector<std::pair<WaitDone, absl::StatusOr<Group>>> finished;
  {
    absl::MutexLock lock(&mu_);
    const int64_t t = clock_->NowMicros();
    for (const auto& [id, group] : now) {
      auto it = waiters_.find(id);
      if (it == waiters_.end()) continue;
      std::erase_if(it->second, [&, &group = group](Waiter& w) {
        if (!group) {
          finished.emplace_back(std::move(w.done), absl::NotFoundError("placement group was forgotten"));
          return true;
        }
        if (group->Settled() || (due && w.deadline_micros <= t)) {
          finished.emplace_back(std::move(w.done), *group);
          return true;
        }
        return false;
      });
      if (it->second.empty()) waiters_.erase(it);
    }
  }
  for (auto& [done, result] : finished) done(std::move(result));
}

int64_t PlacementScheduler::NextWakeMicros() {
  absl::MutexLock lock(&mu_);
  int64_t next = clock_->NowMicros() + 1'000'000;  // a slow tick bounds the cost of a missed event
  for (const auto& [id, b] : backoffs_) {
    if (b.retry_at_micros > 0) next = std::min(next, b.retry_at_micros);
  }
  for (const auto& [id, list] : waiters_) {
    for (const Waiter& w : list) next = std::min(next, w.deadline_micros);
  }
  if (next_timeout_micros_ > 0) next = std::min(next, next_timeout_micros_);
  return next;
}

void PlacementScheduler::Run() {
  while (true) {
    const int64_t wake_at = NextWakeMicros();
    {
      absl::MutexLock lock(&mu_);
      while (!dirty_ && !stopping_) {
        const int64_t wait = wake_at - clock_->NowMicros();
        if (wait <= 0) break;
        cv_.WaitWithTimeout(&mu_, absl::Microseconds(wait));
      }
      if (stopping_) break;
      dirty_ = false;
    }
    Pass();
    std::vector<GroupId> watched;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [id, list] : waiters_) watched.push_back(id);
    }
    if (!watched.empty()) FinishWaiters(watched, /*due=*/true);
  }
  SendReleases();
}

void PlacementScheduler::Pass() {
  SendReleases();
  ExpireTimeouts();
  Schedule();
  SendReleases();
}

std::map<NodeId, std::string> PlacementScheduler::Targets(bool placeable_only,
                                                          std::map<NodeId, uint64_t>* incarnations) const {
  return store_->Read([&](const ClusterState& s) {
    std::map<NodeId, std::string> out;
    for (const auto& [id, n] : s.nodes()) {
      if (!n.alive() || (placeable_only && !liveness_->Confirmed(id))) continue;
      out[id] = n.target();
      if (incarnations != nullptr) (*incarnations)[id] = n.incarnation;
    }
    return out;
  });
}

void PlacementScheduler::SendReleases() {
  std::vector<HeldBundle> release;
  {
    absl::MutexLock lock(&mu_);
    release.swap(to_release_);
  }
  if (release.empty()) return;
  agents_->Release(GroupByAgent(release, Targets(/*placeable_only=*/false)));
}

void PlacementScheduler::ExpireTimeouts() {
  const int64_t wall = clock_->WallMillis();
  int64_t next_timeout_ms = 0;
  std::vector<HeldBundle> release = store_->Update([&](Txn& txn) {
    std::vector<GroupId> due;
    for (const GroupId& id : txn.state().waiting_groups()) {
      const Group& g = *txn.state().FindGroup(id);
      // The timeout bounds the wait for creation; a group placed once and rescheduling now waits as long as it takes.
      if (g.timeout_s <= 0 || g.placed_once) continue;
      const int64_t at = g.created_wall_ms + static_cast<int64_t>(g.timeout_s * 1000);
      if (at <= wall) {
        due.push_back(id);
      } else if (next_timeout_ms == 0 || at < next_timeout_ms) {
        next_timeout_ms = at;
      }
    }
    std::vector<HeldBundle> out;
    for (const GroupId& id : due) {
      const Group* g = txn.state().FindGroup(id);
      const std::string message = absl::StrCat("timed out after ", g->timeout_s, " s: ", g->reason);
      for (HeldBundle& b : EndGroup(txn, id, PgState::kFailed, message, wall)) out.push_back(std::move(b));
      spdlog::info("placement group {}: FAILED ({})", id.str(), message);
    }
    return out;
  });
  Release(std::move(release));
  absl::MutexLock lock(&mu_);
  next_timeout_micros_ = next_timeout_ms == 0 ? 0 : clock_->NowMicros() + (next_timeout_ms - wall) * 1000;
}

void PlacementScheduler::Schedule() {
  auto placeable = [this](const sched::NodeSnapshot& node) {
    return liveness_->Confirmed(NodeId(node.node_id)) && !(autoscaling_.draining && autoscaling_.draining(node));
  };
  // What task leases hold, read once per pass that has groups waiting: a lease granted meanwhile may still refuse a
  // prepare, and the group then retries.
  std::map<NodeId, LeaseHoldings> leased;
  struct PassStart {
    std::vector<Group> waiting;
    PassInput input;
  };
  PassStart start = store_->Read([&](const ClusterState& s) {
    PassStart out;
    for (const GroupId& id : s.waiting_groups()) out.waiting.push_back(*s.FindGroup(id));
    std::sort(out.waiting.begin(), out.waiting.end(), [](const Group& a, const Group& b) {
      const bool ar = a.state == PgState::kRescheduling, br = b.state == PgState::kRescheduling;
      return ar != br ? ar : a.seq < b.seq;
    });
    if (!out.waiting.empty()) {
      leased = liveness_->Leased();
      out.input = BuildPassInput(s, placeable, leased, last_input_ ? &*last_input_ : nullptr);
      last_input_.reset();
    }
    return out;
  });
  if (start.waiting.empty()) return;

  // Groups that hold nothing yet are decided one after another against one accounting (each decision counted as
  // held for the next), then reserved together. A group that already holds bundles is placed on its own.
  std::vector<Decision> batch;
  std::vector<GroupWaiting> waits;
  auto flush = [&] {
    if (!batch.empty()) Reserve(std::move(batch));
    batch.clear();
  };
  // The request that has waited too long to be passed, once one is met: the rest of the pass waits behind it.
  size_t blocked_after = start.waiting.size();
  for (size_t position = 0; position < start.waiting.size(); ++position) {
    const Group& g = start.waiting[position];
    const int64_t now = clock_->NowMicros();
    const int64_t wall = clock_->WallMillis();
    const bool old = wall - g.created_wall_ms > options_.fifo_after_ms;
    int64_t retry_at = 0;
    {
      absl::MutexLock lock(&mu_);
      if (auto it = backoffs_.find(g.id); it != backoffs_.end()) retry_at = it->second.retry_at_micros;
    }
    if (retry_at > now) {
      if (old) {
        blocked_after = position;
        break;
      }
      continue;
    }
    bool placed = false;
    bool infeasible = false;
    std::optional<std::string> reason;
    if (!g.bundles.empty() || !g.slices.empty()) {
      flush();
      // Decided against the accounting as it is after the batch: on its own.
      auto fresh = store_->Read([&](const ClusterState& s) -> std::optional<std::pair<Group, PassInput>> {
        const Group* now_g = s.FindGroup(g.id);
        if (now_g == nullptr || !now_g->Waiting()) return std::nullopt;
        return std::make_pair(*now_g, BuildPassInput(s, placeable, leased, &start.input));
      });
      if (!fresh) continue;
      DecideOutcome outcome = Decide(fresh->first, fresh->second);
      if (auto* d = std::get_if<Decision>(&outcome)) {
        Reserve({std::move(*d)});
        placed = true;  // or refused: either way it was tried
        // What it holds now counts for the groups decided after it in this pass.
        start.input =
            store_->Read([&](const ClusterState& s) { return BuildPassInput(s, placeable, leased, &fresh->second); });
      } else {
        reason = std::get<NotPlaced>(outcome).reason;
        infeasible = std::get<NotPlaced>(outcome).infeasible;
        start.input = std::move(fresh->second);
      }
    } else {
      DecideOutcome outcome = Decide(g, start.input);
      if (auto* d = std::get_if<Decision>(&outcome)) {
        batch.push_back(std::move(*d));
        placed = true;
      } else {
        reason = std::get<NotPlaced>(outcome).reason;
        infeasible = std::get<NotPlaced>(outcome).infeasible;
      }
    }
    if (reason && autoscaling_.note) {
      if (std::string note = autoscaling_.note(g.id); !note.empty()) absl::StrAppend(&*reason, "; ", note);
    }
    if (reason && (*reason != g.reason || g.state != PgState::kPending)) {
      waits.push_back(GroupWaiting{g.id, *reason, wall});
    }
    // Strict FIFO behind a request that has waited long and would fit an idle cluster; one that no node could hold
    // (until nodes join) does not hold up the others.
    if (!placed && old && !infeasible) {
      blocked_after = position;
      break;
    }
  }
  flush();
  last_input_ = std::move(start.input);
  if (blocked_after < start.waiting.size()) {
    // Those behind it say so, rather than "waiting to be scheduled".
    const Group& blocker = start.waiting[blocked_after];
    const std::string behind =
        absl::StrCat("queued behind placement group ", blocker.name.empty() ? blocker.id.str() : blocker.name,
                     ", which has waited more than ", options_.fifo_after_ms / 1000, " s and goes first");
    const int64_t wall = clock_->WallMillis();
    for (size_t i = blocked_after + 1; i < start.waiting.size(); ++i) {
      const Group& g = start.waiting[i];
      if (g.reason != behind) waits.push_back(GroupWaiting{g.id, behind, wall});
    }
  }
  if (waits.empty()) return;
  store_->Update([&](Txn& txn) {
    for (GroupWaiting& w : waits) {
      const Group* g = txn.state().FindGroup(w.group);
      if (g == nullptr || !g->Waiting()) continue;
      if (g->state == PgState::kPending && g->reason == w.reason) continue;
      txn.Apply(std::move(w)).IgnoreError();
    }
  });
}

void PlacementScheduler::Reserve(std::vector<Decision> decisions) {
  const uint64_t epoch = store_->Read([](const ClusterState& s) { return s.epoch(); });
  std::vector<Reservation> batch;
  for (Decision& d : decisions) {
    const uint64_t attempt = (epoch << 32) | (++attempts_ & 0xffffffffu);
    for (HeldBundle& b : d.fresh) b.attempt = attempt;
    for (HeldBundle& b : d.bundles) {
      if (b.attempt == 0) b.attempt = attempt;
    }
    batch.push_back({std::move(d), ""});
  }
  std::map<NodeId, uint64_t> incarnations;  // of the agents asked: one that registers again meanwhile drops them
  const std::map<NodeId, std::string> targets = Targets(/*placeable_only=*/true, &incarnations);
  std::vector<AgentBundles> calls;
  std::vector<size_t> owner;  // calls[i] belongs to batch[owner[i]]
  for (size_t i = 0; i < batch.size(); ++i) {
    for (const HeldBundle& b : batch[i].decision.fresh) {
      if (!targets.contains(b.node) && batch[i].refusal.empty()) {
        batch[i].refusal = absl::StrCat("node ", b.node.str(), " left while placing");
      }
    }
    for (AgentBundles& call : GroupByAgent(batch[i].decision.fresh, targets)) {
      calls.push_back(std::move(call));
      owner.push_back(i);
    }
  }
  // A group with one participant is held in one phase: its prepare commits at once.
  std::vector<int> participants(batch.size(), 0);
  for (size_t owner_index : owner) ++participants[owner_index];
  for (size_t i = 0; i < calls.size(); ++i) calls[i].commit_at_once = participants[owner[i]] == 1;
  // One round of prepares for every group of the batch, then one round of commits for those fully prepared.
  std::vector<absl::Status> prepared = agents_->Prepare(calls, options_.prepare_ttl_ms);
  for (size_t i = 0; i < calls.size(); ++i) {
    if (!prepared[i].ok() && batch[owner[i]].refusal.empty()) {
      batch[owner[i]].refusal =
          absl::StrCat("prepare refused by node ", calls[i].node.str(), ": ", prepared[i].message());
    }
  }
  std::vector<AgentBundles> to_commit, to_cancel, undo;
  std::vector<size_t> commit_owner;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].commit_at_once) {
      // Held already, or refused — or its answer was lost after it was held: undone by a release then.
      if (!batch[owner[i]].refusal.empty()) undo.push_back(calls[i]);
    } else if (batch[owner[i]].refusal.empty()) {
      to_commit.push_back(calls[i]);
      commit_owner.push_back(owner[i]);
    } else {
      to_cancel.push_back(calls[i]);
    }
  }
  agents_->Cancel(to_cancel);
  std::vector<absl::Status> committed = agents_->Commit(to_commit);
  for (size_t i = 0; i < to_commit.size(); ++i) {
    if (!committed[i].ok() && batch[commit_owner[i]].refusal.empty()) {
      batch[commit_owner[i]].refusal =
          absl::StrCat("commit failed on node ", to_commit[i].node.str(), ": ", committed[i].message());
    }
  }
  for (size_t i = 0; i < to_commit.size(); ++i) {
    if (!batch[commit_owner[i]].refusal.empty()) undo.push_back(to_commit[i]);
  }
  agents_->Release(undo);

  // Record the outcomes. A decision whose group changed meanwhile (removed, lost more bundles), or whose node died or
  // registered again (its agent was told to drop what no group held yet), is given back and the group decided again.
  std::vector<HeldBundle> release;
  const int64_t wall = clock_->WallMillis();
  store_->Update([&](Txn& txn) {
    for (Reservation& r : batch) {
      Decision& d = r.decision;
      const Group* g = txn.state().FindGroup(d.group);
      bool current = g != nullptr && g->Waiting() && g->changes == d.changes;
      for (const HeldBundle& b : d.fresh) {
        const Node* n = txn.state().FindNode(b.node);
        auto asked = incarnations.find(b.node);
        current = current && n != nullptr && n->alive() && asked != incarnations.end() &&
                  asked->second == n->incarnation;
      }
      if (!current) {
        if (r.refusal.empty()) release.insert(release.end(), d.fresh.begin(), d.fresh.end());
        absl::MutexLock lock(&mu_);
        dirty_ = true;
        continue;
      }
      if (!r.refusal.empty()) {
        int64_t backoff_ms = 0;
        {
          absl::MutexLock lock(&mu_);
          Backoff& b = backoffs_[d.group];
          b.backoff_ms = std::clamp<int64_t>(b.backoff_ms * 2, 50, options_.max_backoff_ms);
          b.retry_at_micros = clock_->NowMicros() + b.backoff_ms * 1000;
          backoff_ms = b.backoff_ms;
        }
        txn.Apply(GroupWaiting{d.group, absl::StrCat(r.refusal, "; retrying in ", backoff_ms, " ms"), wall})
            .IgnoreError();
        continue;
      }
      {
        absl::MutexLock lock(&mu_);
        backoffs_.erase(d.group);
      }
      release.insert(release.end(), d.moved.begin(), d.moved.end());
      txn.Apply(GroupPlaced{d.group, d.alternative, d.bundles, d.slices, d.message, wall}).IgnoreError();
      spdlog::info("placement group {}: CREATED ({})", d.group.str(), d.message);
    }
  });
  Release(std::move(release));
}

}  // namespace torus::head
