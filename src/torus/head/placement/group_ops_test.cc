#include "torus/head/placement/group_ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "torus/head/placement/placement_test_util.h"
#include "torus/head/state/journal.h"

namespace torus::head {
namespace group_ops_test {

using sched::Strategy;
using test_util::Bundle;
using test_util::History;
using test_util::Layout;
using test_util::Res;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr int64_t kWall = 1'700'000'000'000;

class GroupOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(store_.Open().ok());
    std::vector<NodeRegistration> hosts = {test_util::CpuHost("n1"), test_util::CpuHost("n2")};
    test_util::Append(hosts, test_util::V6eSlice("v6e-0"));
    test_util::Append(hosts, test_util::V6eSlice("v6e-1"));
    Apply(test_util::Registrations(hosts));
  }
  void Apply(const std::vector<Record>& records) {
    store_.Update([&](Txn& txn) {
      for (const Record& r : records) ASSERT_TRUE(txn.Apply(r).ok()) << RecordName(r);
    });
  }
  absl::StatusOr<GroupId> SubmitBundles(sched::BundleRequest request, const std::string& name = "",
                                        IdGenerator* ids = nullptr) {
    return store_.Update([&](Txn& txn) {
      return SubmitBundleGroup(txn, ids == nullptr ? ids_ : *ids, std::move(request),
                               {.name = name, .owner = Owner::Job(JobId("j1")), .timeout_s = 2.5, .wall_ms = kWall});
    });
  }
  // A CREATED bundle group holding `bundles` (built for the id it gets).
  GroupId PlacedBundles(const std::function<std::vector<HeldBundle>(const std::string&)>& bundles,
                        const std::string& name = "") {
    absl::StatusOr<GroupId> id = SubmitBundles(test_util::BundleReq(Strategy::kSpread, {Res({{"CPU", 1}})}), name);
    EXPECT_TRUE(id.ok()) << id.status();
    Apply({GroupPlaced{.group = *id, .bundles = bundles(id->str()), .message = "placed", .wall_ms = kWall}});
    return *id;
  }
  // A CREATED slice group holding v6e-0 (bundles 0-3) and v6e-1 (4-7).
  GroupId PlacedSlices() {
    absl::StatusOr<GroupId> id = store_.Update(
        [&](Txn& txn) { return SubmitSliceGroup(txn, ids_, test_util::SliceReq("4x4", 2), {.wall_ms = kWall}); });
    EXPECT_TRUE(id.ok()) << id.status();
    std::vector<HeldBundle> held = test_util::SliceBundles(id->str(), "v6e-0", 0);
    for (HeldBundle& b : test_util::SliceBundles(id->str(), "v6e-1", 4)) held.push_back(b);
    Apply({GroupPlaced{.group = *id, .bundles = held, .slices = {"v6e-0", "v6e-1"}, .message = "placed"}});
    return *id;
  }
  Group Get(const GroupId& id) const {
    return store_.Read([&](const ClusterState& s) { return *s.FindGroup(id); });
  }
  std::vector<HeldBundle> Lose(const std::string& node, bool node_died,
                               std::function<bool(const HeldBundle&)> which = nullptr) {
    if (!which) which = [](const HeldBundle&) { return true; };
    return store_.Update([&](Txn& txn) { return LoseBundles(txn, NodeId(node), which, node_died, kWall + 5); });
  }

  StateStore store_{NewMemoryJournal(), kWall, {}};
  SequentialIdGenerator ids_;
};

// ---- Submitting ----

TEST_F(GroupOpsTest, SubmitBundleGroupAppliesAPendingGroupWithTheNextIdAndSeq) {
  std::vector<std::string> applied;
  absl::StatusOr<GroupId> id = store_.Update([&](Txn& txn) {
    auto out = SubmitBundleGroup(
        txn, ids_, test_util::BundleReq(Strategy::kStrictSpread, {Res({{"CPU", 1}}), Res({{"CPU", 2}, {"GPU", 1}})}),
        {.name = "train", .owner = Owner::Job(JobId("j1")), .timeout_s = 2.5, .wall_ms = kWall});
    for (const Record& r : txn.records()) applied.emplace_back(RecordName(r));
    return out;
  });
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->str(), "pg-0000000001");
  EXPECT_THAT(applied, ElementsAre("GroupSubmitted"));
  const Group g = Get(*id);
  EXPECT_EQ(g.kind, PgKind::kBundles);
  EXPECT_EQ(g.name, "train");
  EXPECT_EQ(g.owner, Owner::Job(JobId("j1")));
  EXPECT_EQ(g.timeout_s, 2.5);
  EXPECT_EQ(g.seq, 1u);
  EXPECT_EQ(g.state, PgState::kPending);
  EXPECT_EQ(g.reason, "waiting to be scheduled");
  EXPECT_EQ(g.created_wall_ms, kWall);
  EXPECT_EQ(g.request_text, "STRICT_SPREAD, 2 bundles {\"CPU\": 1}, {\"CPU\": 2, \"GPU\": 1}");
  EXPECT_THAT(History(g),
              ElementsAre(absl::StrCat(
                  kWall, " PENDING submitted: STRICT_SPREAD, 2 bundles {\"CPU\": 1}, {\"CPU\": 2, \"GPU\": 1}")));
  EXPECT_EQ(g.bundle_request.primary.bundles.size(), 2u);
  EXPECT_THAT(g.bundles, IsEmpty());

  absl::StatusOr<GroupId> second = SubmitBundles(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}})}));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->str(), "pg-0000000002");
  EXPECT_EQ(Get(*second).seq, 2u);
}

TEST_F(GroupOpsTest, SubmitSliceGroupDescribesItsShape) {
  absl::StatusOr<GroupId> id = store_.Update([&](Txn& txn) {
    return SubmitSliceGroup(txn, ids_, test_util::SliceReq("4x4", 2), {.name = "tpus", .wall_ms = kWall});
  });
  ASSERT_TRUE(id.ok()) << id.status();
  const Group g = Get(*id);
  EXPECT_EQ(g.id.str(), "pg-0000000001");
  EXPECT_EQ(g.kind, PgKind::kSlices);
  EXPECT_EQ(g.slice_request.primary.num_slices, 2);
  EXPECT_THAT(History(g), ElementsAre(absl::StrCat(kWall, " PENDING submitted: TPU-V6E 4x4 x2, per host")));
}

TEST_F(GroupOpsTest, AnIdThatIsTakenIsDrawnAgain) {
  SequentialIdGenerator other;  // starts at 1 too
  ASSERT_TRUE(SubmitBundles(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}})})).ok());
  absl::StatusOr<GroupId> id = SubmitBundles(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}})}), "", &other);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->str(), "pg-0000000002");
}

TEST_F(GroupOpsTest, InvalidRequestIsRefusedAndNothingApplied) {
  size_t applied = 0;
  absl::StatusOr<GroupId> id = store_.Update([&](Txn& txn) {
    auto out = SubmitBundleGroup(txn, ids_, test_util::BundleReq(Strategy::kPack, {}), {.wall_ms = kWall});
    applied = txn.records().size();
    return out;
  });
  EXPECT_EQ(id.status(), absl::InvalidArgumentError("bundles is empty; a placement group needs at least one bundle"));
  EXPECT_EQ(applied, 0u);
}

TEST_F(GroupOpsTest, NameRule) {
  const GroupId x = PlacedBundles(
      [](const std::string& g) {
        return std::vector{Bundle(g, 0, "n1", Res({{"CPU", 1}}))};
      },
      "x");
  const auto submit = [&](const std::string& name) {
    return SubmitBundles(test_util::BundleReq(Strategy::kPack, {Res({{"CPU", 1}})}), name).status();
  };
  EXPECT_EQ(submit("x"), absl::AlreadyExistsError(
                             absl::StrCat("a placement group named \"x\" exists (", x.str(), "); remove it first")));
  EXPECT_EQ(submit(std::string(129, 'n')), absl::InvalidArgumentError("name must be at most 128 characters"));
  EXPECT_TRUE(submit(std::string(128, 'n')).ok());
  EXPECT_TRUE(submit("").ok());
  EXPECT_TRUE(submit("").ok());  // unnamed groups never clash
  // Only live groups hold their names.
  store_.Update([&](Txn& txn) { EndGroup(txn, x, PgState::kRemoved, "removed", kWall); });
  EXPECT_TRUE(submit("x").ok());
  EXPECT_EQ(submit("x").code(), absl::StatusCode::kAlreadyExists);
}

// ---- Ending ----

TEST_F(GroupOpsTest, EndGroupReturnsTheHeldBundlesAndFreesTheName) {
  const GroupId id = PlacedBundles(
      [](const std::string& g) {
        return std::vector{Bundle(g, 0, "n1", Res({{"CPU", 1}})), Bundle(g, 1, "n2", Res({{"CPU", 1}})),
                           Bundle(g, 2, "n1", Res({{"CPU", 1}}))};
      },
      "train");
  Apply({GroupBundlesLost{.group = id, .lost_indices = {1}, .message = "lost"}});
  std::vector<HeldBundle> held =
      store_.Update([&](Txn& txn) { return EndGroup(txn, id, PgState::kRemoved, "removed by user", kWall + 9); });
  EXPECT_THAT(Layout(held),
              ElementsAre("0 n1 pg-0000000001:0 chips[] gpus[] a1", "2 n1 pg-0000000001:2 chips[] gpus[] a1"));
  const Group g = Get(id);
  EXPECT_EQ(g.state, PgState::kRemoved);
  EXPECT_THAT(g.bundles, IsEmpty());
  EXPECT_EQ(History(g).back(), absl::StrCat(kWall + 9, " REMOVED removed by user"));
  EXPECT_EQ(store_.Read([](const ClusterState& s) { return s.FindGroup(std::string_view("train")); }), nullptr);

  // Ended or unknown: nothing, and nothing applied.
  size_t applied = 1;
  store_.Update([&](Txn& txn) {
    EXPECT_THAT(EndGroup(txn, id, PgState::kFailed, "again", kWall), IsEmpty());
    EXPECT_THAT(EndGroup(txn, GroupId("pg-nope"), PgState::kRemoved, "x", kWall), IsEmpty());
    applied = txn.records().size();
  });
  EXPECT_EQ(applied, 0u);
  EXPECT_EQ(Get(id).state, PgState::kRemoved);
}

TEST_F(GroupOpsTest, EndGroupFailedKeepsTheMessageAsItsReason) {
  const GroupId id = PlacedBundles([](const std::string& g) {
    return std::vector{Bundle(g, 0, "n1", Res({{"CPU", 1}}))};
  });
  store_.Update([&](Txn& txn) { EndGroup(txn, id, PgState::kFailed, "timed out after 1 s: x", kWall); });
  EXPECT_EQ(Get(id).state, PgState::kFailed);
  EXPECT_EQ(Get(id).reason, "timed out after 1 s: x");
}

// ---- Losing bundles ----

TEST_F(GroupOpsTest, NodeDeathMarksTheBundlesOfBundleGroupsLost) {
  const GroupId a = PlacedBundles([](const std::string& g) {
    return std::vector{Bundle(g, 0, "n2", Res({{"CPU", 1}})), Bundle(g, 1, "n1", Res({{"CPU", 1}}))};
  });
  const GroupId b = PlacedBundles([](const std::string& g) {
    return std::vector{Bundle(g, 0, "n1", Res({{"CPU", 1}})), Bundle(g, 1, "n2", Res({{"CPU", 1}})),
                       Bundle(g, 2, "n1", Res({{"CPU", 1}}))};
  });
  const GroupId untouched = PlacedBundles([](const std::string& g) {
    return std::vector{Bundle(g, 0, "n2", Res({{"CPU", 1}}))};
  });
  const uint64_t changes = Get(untouched).changes;

  EXPECT_THAT(Lose("n1", /*node_died=*/true), IsEmpty());  // bundle groups give nothing else back

  const Group ga = Get(a), gb = Get(b);
  EXPECT_EQ(ga.state, PgState::kRescheduling);
  EXPECT_EQ(ga.reason, "node n1 died: bundle 1 lost; placing again");
  EXPECT_EQ(History(ga).back(), absl::StrCat(kWall + 5, " RESCHEDULING node n1 died: bundle 1 lost; placing again"));
  EXPECT_THAT(Layout(ga.bundles),
              ElementsAre("0 n2 pg-0000000001:0 chips[] gpus[] a1", "1 n1 pg-0000000001:1 chips[] gpus[] a1 lost"));
  EXPECT_EQ(gb.reason, "node n1 died: bundles 0, 2 lost; placing again");
  EXPECT_THAT(Layout(gb.bundles),
              ElementsAre("0 n1 pg-0000000002:0 chips[] gpus[] a1 lost", "1 n2 pg-0000000002:1 chips[] gpus[] a1",
                          "2 n1 pg-0000000002:2 chips[] gpus[] a1 lost"));
  EXPECT_EQ(Get(untouched).state, PgState::kCreated);
  EXPECT_EQ(Get(untouched).changes, changes);

  // Lost already: nothing more happens.
  const uint64_t a_changes = Get(a).changes;
  EXPECT_THAT(Lose("n1", true), IsEmpty());
  EXPECT_EQ(Get(a).changes, a_changes);
}

TEST_F(GroupOpsTest, BundlesAnAgentNoLongerHoldsAreLostByIndex) {
  const GroupId a = PlacedBundles([](const std::string& g) {
    return std::vector{Bundle(g, 0, "n1", Res({{"CPU", 1}})), Bundle(g, 1, "n1", Res({{"CPU", 1}}))};
  });
  EXPECT_THAT(Lose("n1", /*node_died=*/false, [](const HeldBundle& b) { return b.index == 1; }), IsEmpty());
  const Group g = Get(a);
  EXPECT_EQ(g.reason, "node n1 no longer holds them: bundle 1 lost; placing again");
  EXPECT_THAT(Layout(g.bundles),
              ElementsAre("0 n1 pg-0000000001:0 chips[] gpus[] a1", "1 n1 pg-0000000001:1 chips[] gpus[] a1 lost"));

  // The node dies later: only the bundle still held is lost then.
  EXPECT_THAT(Lose("n1", /*node_died=*/true), IsEmpty());
  EXPECT_EQ(Get(a).reason, "node n1 died: bundle 0 lost; placing again");
  EXPECT_THAT(Layout(Get(a).bundles), ElementsAre("0 n1 pg-0000000001:0 chips[] gpus[] a1 lost",
                                                  "1 n1 pg-0000000001:1 chips[] gpus[] a1 lost"));
}

TEST_F(GroupOpsTest, SliceGroupDropsTheWholeSliceAndReturnsItsOtherHostsForRelease) {
  const GroupId s = PlacedSlices();
  std::vector<HeldBundle> release = Lose("v6e-0-w1", /*node_died=*/true);
  EXPECT_THAT(Layout(release), ElementsAre("0 v6e-0-w0 pg-0000000001/v6e-0:0 chips[0,1,2,3] gpus[] w0 a1",
                                           "2 v6e-0-w2 pg-0000000001/v6e-0:2 chips[0,1,2,3] gpus[] w2 a1",
                                           "3 v6e-0-w3 pg-0000000001/v6e-0:3 chips[0,1,2,3] gpus[] w3 a1"));
  const Group g = Get(s);
  EXPECT_EQ(g.state, PgState::kRescheduling);
  EXPECT_EQ(g.reason, "slice v6e-0 degraded (a host died): released whole; reserving a replacement");
  EXPECT_THAT(g.slices, ElementsAre("v6e-1"));
  ASSERT_EQ(g.bundles.size(), 4u);
  for (const HeldBundle& b : g.bundles) EXPECT_EQ(b.slice_name, "v6e-1");
  // The released slice is no longer held by the group.
  EXPECT_THAT(store_.Read([](const ClusterState& st) { return st.SliceHolders(); }),
              ElementsAre(std::pair<const std::string, std::string>("v6e-1", s.str())));
}

TEST_F(GroupOpsTest, SliceGroupWhoseHostLostItsBundlesSaysSo) {
  const GroupId s = PlacedSlices();
  std::vector<HeldBundle> release = Lose("v6e-1-w3", /*node_died=*/false);
  EXPECT_EQ(release.size(), 3u);
  EXPECT_EQ(Get(s).reason, "slice v6e-1 degraded (a host lost its bundles): released whole; reserving a replacement");
  EXPECT_THAT(Get(s).slices, ElementsAre("v6e-0"));
}

TEST_F(GroupOpsTest, NothingPickedNothingLost) {
  const GroupId s = PlacedSlices();
  const GroupId a = PlacedBundles([](const std::string& g) {
    return std::vector{Bundle(g, 0, "v6e-0-w0", Res({{"CPU", 1}}))};
  });
  size_t applied = 1;
  store_.Update([&](Txn& txn) {
    EXPECT_THAT(LoseBundles(
                    txn, NodeId("v6e-0-w0"), [](const HeldBundle&) { return false; }, true, kWall),
                IsEmpty());
    applied = txn.records().size();
  });
  EXPECT_EQ(applied, 0u);
  EXPECT_EQ(Get(s).state, PgState::kCreated);
  EXPECT_EQ(Get(a).state, PgState::kCreated);
}

}  // namespace group_ops_test
}  // namespace torus::head
