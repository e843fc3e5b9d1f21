#include "torus/head/actors/actor_directory.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include "torus/head/owners/owner_monitor.h"
#include "torus/head/state/journal_test_util.h"

namespace torus::head {
namespace actor_directory_test {

using testutil::SharedJournal;

constexpr int64_t kStartMs = 1'700'000'000'000;

Actor NewActor(const std::string& id, const std::string& name = "", const std::string& owner = "127.0.0.1:5000") {
  return {.id = ActorId(id), .name = name, .ns = "rl", .class_name = "Learner", .methods = {"step", "weights"},
          .job_id = "driver-1", .owner_address = owner, .resources = {{"CPU", 10000}}, .max_restarts = 1};
}

class ActorDirectoryTest : public ::testing::Test {
 protected:
  ActorDirectoryTest() : journal_(NewMemoryJournal()) { Reopen(); }

  // A new store (a head restart) over the same journal.
  void Reopen() {
    actors_.reset();
    store_ = std::make_unique<StateStore>(std::make_unique<SharedJournal>(journal_.get()), kStartMs,
                                          StateStore::Options{});
    ASSERT_TRUE(store_->Open().ok());
    actors_ = std::make_unique<ActorDirectory>(store_.get(), &clock_);
  }

  FakeClock clock_;
  std::unique_ptr<Journal> journal_;
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<ActorDirectory> actors_;
};

TEST_F(ActorDirectoryTest, RegisteredActorsGoThroughTheirStatesAndSurviveARestart) {
  auto a = actors_->Register(NewActor("a1", "learner"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->state, ActorState::kPendingCreation);
  EXPECT_EQ(a->create_time_ms, clock_.WallMillis());
  clock_.AdvanceMillis(50);
  auto alive = actors_->Update({.actor = ActorId("a1"), .state = ActorState::kAlive, .node = NodeId("n1"),
                                .pid = 4321, .worker_address = "127.0.0.1:6000"});
  ASSERT_TRUE(alive.ok()) << alive.status();
  EXPECT_EQ(alive->state, ActorState::kAlive);
  EXPECT_EQ(alive->start_time_ms, clock_.WallMillis());
  EXPECT_EQ(alive->node, NodeId("n1"));
  EXPECT_EQ(alive->pid, 4321);

  Reopen();
  auto found = actors_->GetNamed("rl", "learner");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->id, ActorId("a1"));
  EXPECT_EQ(found->worker_address, "127.0.0.1:6000");
  EXPECT_EQ(found->methods, (std::vector<std::string>{"step", "weights"}));

  auto restarting = actors_->Update({.actor = ActorId("a1"), .state = ActorState::kRestarting, .restarts = 1});
  ASSERT_TRUE(restarting.ok());
  EXPECT_EQ(restarting->worker_address, "");
  EXPECT_EQ(restarting->restarts, 1);
}

TEST_F(ActorDirectoryTest, ANameIsUniqueInItsNamespaceUntilItsActorIsDead) {
  ASSERT_TRUE(actors_->Register(NewActor("a1", "learner")).ok());
  auto taken = actors_->Register(NewActor("a2", "learner"));
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(taken.status().message(),
            "the name \"learner\" is taken in namespace \"rl\" by actor a1 (PENDING_CREATION)");
  Actor other_ns = NewActor("a3", "learner");
  other_ns.ns = "serve";
  EXPECT_TRUE(actors_->Register(other_ns).ok());

  ASSERT_TRUE(actors_->Update({.actor = ActorId("a1"), .state = ActorState::kDead, .death_cause = "killed"}).ok());
  EXPECT_EQ(actors_->GetNamed("rl", "learner").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(actors_->GetNamed("rl", "learner").status().message(), "no actor named \"learner\" in namespace \"rl\"");
  EXPECT_TRUE(actors_->Register(NewActor("a4", "learner")).ok());
  Reopen();
  EXPECT_EQ(actors_->GetNamed("rl", "learner")->id, ActorId("a4"));
  EXPECT_EQ(actors_->Get(ActorId("a1"))->death_cause, "killed");
}

TEST_F(ActorDirectoryTest, BadRegistrationsAndUpdatesNameTheField) {
  struct Case {
    Actor actor;
    std::string message;
  };
  Actor no_class = NewActor("b1");
  no_class.class_name.clear();
  Actor bad_restarts = NewActor("b2");
  bad_restarts.max_restarts = -2;
  Actor long_name = NewActor("b3", std::string(257, 'x'));
  Actor bad_retries = NewActor("b4");
  bad_retries.max_task_retries = -3;
  for (const Case& c : std::vector<Case>{
           {NewActor("XYZ"), "actor_id: 1 to 64 lowercase hex digits are required, got \"XYZ\""},
           {no_class, "class_name: required"},
           {bad_restarts, "max_restarts: -1 (without limit) or more is required, got -2"},
           {long_name, "name and namespace: at most 256 bytes each"},
           {bad_retries, "max_task_retries: -1 (without limit) or more is required, got -3"}}) {
    auto r = actors_->Register(c.actor);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), c.message);
  }
  EXPECT_EQ(actors_->Update({.actor = ActorId("cafe"), .state = ActorState::kAlive, .worker_address = "x"})
                .status()
                .message(),
            "unknown actor cafe");
  ASSERT_TRUE(actors_->Register(NewActor("c1")).ok());
  EXPECT_EQ(actors_->Update({.actor = ActorId("c1"), .state = ActorState::kAlive}).status().message(),
            "worker_address: required when ALIVE");
  ASSERT_TRUE(actors_->Update({.actor = ActorId("c1"), .state = ActorState::kDead}).ok());
  auto again = actors_->Update({.actor = ActorId("c1"), .state = ActorState::kRestarting});
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(again.status().message(), "actor c1 is DEAD already");
  EXPECT_EQ(ParseActorState("state", "GONE").status().message(),
            "state: \"GONE\" is not a state; use PENDING_CREATION, ALIVE, RESTARTING or DEAD");
}

TEST_F(ActorDirectoryTest, ListsNewestFirstWithFilters) {
  ASSERT_TRUE(actors_->Register(NewActor("d1")).ok());
  clock_.AdvanceMillis(10);
  Actor other_job = NewActor("d2");
  other_job.job_id = "driver-2";
  ASSERT_TRUE(actors_->Register(other_job).ok());
  clock_.AdvanceMillis(10);
  ASSERT_TRUE(actors_->Register(NewActor("d3")).ok());
  ASSERT_TRUE(actors_->Update({.actor = ActorId("d3"), .state = ActorState::kDead}).ok());
  auto ids = [](const std::vector<Actor>& v) {
    std::vector<std::string> out;
    for (const Actor& a : v) out.push_back(a.id.str());
    return out;
  };
  EXPECT_EQ(ids(actors_->List({})), (std::vector<std::string>{"d3", "d2", "d1"}));
  EXPECT_EQ(ids(actors_->List({.state = ActorState::kPendingCreation})), (std::vector<std::string>{"d2", "d1"}));
  EXPECT_EQ(ids(actors_->List({.job_id = "driver-2"})), (std::vector<std::string>{"d2"}));
}

TEST_F(ActorDirectoryTest, DeadActorsBeyondTheBoundAreForgottenOldestFirst) {
  for (size_t i = 0; i < ClusterState::kMaxDeadActors + 5; ++i) {
    const std::string id = absl::StrCat("e", i);
    ASSERT_TRUE(actors_->Register(NewActor(id)).ok());
    clock_.AdvanceMillis(1);
    ASSERT_TRUE(actors_->Update({.actor = ActorId(id), .state = ActorState::kDead}).ok());
  }
  EXPECT_EQ(actors_->List({}).size(), ClusterState::kMaxDeadActors);
  EXPECT_FALSE(actors_->Get(ActorId("e4")).ok());
  EXPECT_TRUE(actors_->Get(ActorId("e5")).ok());
  Reopen();
  EXPECT_EQ(actors_->List({}).size(), ClusterState::kMaxDeadActors);
}

TEST_F(ActorDirectoryTest, TheOwnerMonitorEndsTheActorsOfAnOwnerThatFailsThreeProbesInARow) {
  ASSERT_TRUE(actors_->Register(NewActor("f1", "a", "10.0.0.1:1")).ok());
  ASSERT_TRUE(actors_->Register(NewActor("f2", "b", "10.0.0.1:1")).ok());
  ASSERT_TRUE(actors_->Register(NewActor("f3", "c", "10.0.0.2:2")).ok());
  std::map<std::string, int> probes;
  bool first_owner_up = false;
  OwnerMonitor monitor(
      [&] {
        std::set<std::string> owners;
        for (const auto& [owner, ids] : actors_->LiveByOwner()) owners.insert(owner);
        return owners;
      },
      [&](const std::string& owner, const std::string& cause) { return actors_->OwnerGone(owner, cause); },
      [&](const std::string& owner) {
        ++probes[owner];
        if (owner == "10.0.0.1:1" && !first_owner_up) return absl::UnavailableError("connection refused");
        return absl::OkStatus();
      },
      std::chrono::milliseconds(10));
  EXPECT_EQ(monitor.CheckOnce(), 0);
  EXPECT_EQ(monitor.CheckOnce(), 0);
  first_owner_up = true;  // it answers again: the count starts over
  EXPECT_EQ(monitor.CheckOnce(), 0);
  first_owner_up = false;
  EXPECT_EQ(monitor.CheckOnce(), 0);
  EXPECT_EQ(monitor.CheckOnce(), 0);
  EXPECT_EQ(monitor.CheckOnce(), 2);
  EXPECT_EQ(actors_->Get(ActorId("f1"))->state, ActorState::kDead);
  EXPECT_EQ(actors_->Get(ActorId("f1"))->death_cause, "its owner 10.0.0.1:1 is gone (connection refused)");
  EXPECT_EQ(actors_->Get(ActorId("f3"))->state, ActorState::kPendingCreation);
  EXPECT_TRUE(actors_->Register(NewActor("f4", "a")).ok());  // the name is free again
  EXPECT_EQ(probes["10.0.0.1:1"], 6);
  EXPECT_EQ(monitor.CheckOnce(), 0);
  EXPECT_EQ(probes["10.0.0.1:1"], 6);  // no live actors left there: not asked again
}

// A detached actor belongs to the head: its creator's departure does not end it, and what the head needs to take it
// up again (its creation, its lease) comes back after a restart; the creation is dropped once it is DEAD.
TEST_F(ActorDirectoryTest, DetachedActorsOutliveTheirCreatorAndKeepTheirLeaseAcrossARestart) {
  Actor detached = NewActor("d1", "keeper", "127.0.0.1:6380");
  detached.detached = true;
  detached.creation = "Y3JlYXRpb24=";
  ASSERT_TRUE(actors_->Register(detached).ok());
  ASSERT_TRUE(actors_->Register(NewActor("0f1", "", "127.0.0.1:6380")).ok());
  EXPECT_EQ(actors_->LiveByOwner(), (std::map<std::string, std::vector<ActorId>>{{"127.0.0.1:6380", {ActorId("0f1")}}}));
  ASSERT_TRUE(actors_->Update({.actor = ActorId("d1"), .state = ActorState::kAlive, .node = NodeId("n1"), .pid = 77,
                               .worker_address = "127.0.0.1:6001", .lease_agent = "127.0.0.1:7001",
                               .lease_id = "lease-9"})
                  .ok());
  EXPECT_EQ(actors_->OwnerGone("127.0.0.1:6380", "gone"), 1);

  Reopen();
  auto d = actors_->Get(ActorId("d1"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->state, ActorState::kAlive);
  EXPECT_TRUE(d->detached);
  EXPECT_EQ(d->creation, "Y3JlYXRpb24=");
  EXPECT_EQ(d->lease_agent, "127.0.0.1:7001");
  EXPECT_EQ(d->lease_id, "lease-9");
  EXPECT_EQ(ActorJson(*d)["is_detached"], true);
  rpc::ActorView view;
  ActorToProto(*d, &view);
  EXPECT_TRUE(view.detached());
  // A registration from an owner cannot claim to be detached.
  view.set_actor_id("e1");
  EXPECT_FALSE(ActorFromProto(view).detached);

  ASSERT_TRUE(actors_->Update({.actor = ActorId("d1"), .state = ActorState::kDead, .death_cause = "killed"}).ok());
  Reopen();
  d = actors_->Get(ActorId("d1"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->creation.empty());
  EXPECT_TRUE(d->lease_id.empty());
}

}  // namespace actor_directory_test
}  // namespace torus::head
