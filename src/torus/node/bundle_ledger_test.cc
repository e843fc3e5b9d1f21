#include "torus/node/bundle_ledger.h"

#include <gtest/gtest.h>

namespace torus::node {
namespace bundle_ledger_test {

ResourceSet Res(double cpu, double tpu) {
  ResourceSet r;
  r.Set("CPU", cpu);
  r.Set("TPU", tpu);
  return r;
}

class BundleLedgerTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  BundleLedger ledger_{&clock_, Res(8, 4), 4, 2};  // GPU indices exist; GPU amounts are not asked of it below
};

TEST_F(BundleLedgerTest, PrepareCommitRelease) {
  ASSERT_TRUE(ledger_.Prepare("g", 1, {{0, Res(1, 4), {0, 1, 2, 3}}}, 10'000'000).ok());
  EXPECT_EQ(ledger_.Available(), Res(7, 0));
  EXPECT_EQ(ledger_.BusyChips(), (std::vector<int>{0, 1, 2, 3}));
  ASSERT_TRUE(ledger_.Commit("g", 1).ok());
  clock_.AdvanceMillis(20'000);
  EXPECT_EQ(ledger_.Expire(), 0);  // committed bundles never expire
  EXPECT_EQ(ledger_.Release("g", {}).bundles, 1);
  EXPECT_EQ(ledger_.Available(), Res(8, 4));
  EXPECT_TRUE(ledger_.BusyChips().empty());
}

TEST_F(BundleLedgerTest, PrepareIsAllOrNothing) {
  auto s = ledger_.Prepare("g", 1, {{0, Res(4, 2), {0, 1}}, {1, Res(5, 0), {}}}, 10'000'000);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "not enough CPU: asked 9, free 8 of 8");
  EXPECT_EQ(ledger_.Available(), Res(8, 4));
  EXPECT_TRUE(ledger_.Entries().empty());
}

TEST_F(BundleLedgerTest, ChipsAreNeverShared) {
  ASSERT_TRUE(ledger_.Prepare("a", 1, {{0, Res(1, 2), {0, 1}}}, 10'000'000).ok());
  auto s = ledger_.Prepare("b", 1, {{0, Res(1, 2), {1, 2}}}, 10'000'000);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "bundle 0: chip 1 is held by bundle 0 of group a");
  EXPECT_EQ(ledger_.Prepare("b", 1, {{0, Res(1, 1), {9}}}, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ledger_.Prepare("b", 1, {{0, Res(1, 2), {2, 3}}}, 10'000'000).ok());
}

TEST_F(BundleLedgerTest, UncommittedPreparesExpire) {
  ASSERT_TRUE(ledger_.Prepare("g", 1, {{0, Res(8, 4), {}}}, 1'000'000).ok());
  clock_.AdvanceMillis(999);
  EXPECT_EQ(ledger_.Expire(), 0);
  clock_.AdvanceMillis(1);
  EXPECT_EQ(ledger_.Expire(), 1);
  EXPECT_EQ(ledger_.Commit("g", 1).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ledger_.Available(), Res(8, 4));
}

TEST_F(BundleLedgerTest, CancelDropsOnlyThatAttemptsPrepares) {
  ASSERT_TRUE(ledger_.Prepare("g", 1, {{0, Res(1, 0), {}}}, 10'000'000).ok());
  ASSERT_TRUE(ledger_.Commit("g", 1).ok());
  ASSERT_TRUE(ledger_.Prepare("g", 2, {{1, Res(1, 0), {}}}, 10'000'000).ok());
  uint64_t version = ledger_.Version();
  ledger_.Cancel("g", 2);
  EXPECT_GT(ledger_.Version(), version);
  ASSERT_EQ(ledger_.Entries().size(), 1u);
  EXPECT_EQ(ledger_.Entries()[0].bundle.index, 0);
  ledger_.Cancel("g", 1);  // committed bundles are not cancelled
  EXPECT_EQ(ledger_.Entries().size(), 1u);
}

TEST_F(BundleLedgerTest, SameAttemptIsIdempotentOtherAttemptConflicts) {
  ASSERT_TRUE(ledger_.Prepare("g", 1, {{0, Res(4, 0), {}}}, 10'000'000).ok());
  EXPECT_TRUE(ledger_.Prepare("g", 1, {{0, Res(4, 0), {}}}, 10'000'000).ok());
  EXPECT_EQ(ledger_.Available(), Res(4, 4));
  EXPECT_EQ(ledger_.Prepare("g", 2, {{0, Res(1, 0), {}}}, 1).code(), absl::StatusCode::kAlreadyExists);
}

TEST_F(BundleLedgerTest, ReleaseSomeIndices) {
  ASSERT_TRUE(ledger_.Prepare("g", 1, {{0, Res(1, 1), {0}}, {1, Res(1, 1), {1}}, {2, Res(1, 1), {2}}}, 1'000'000).ok());
  ASSERT_TRUE(ledger_.Commit("g", 1).ok());
  EXPECT_EQ(ledger_.Release("g", {1}).bundles, 1);
  EXPECT_EQ(ledger_.BusyChips(), (std::vector<int>{0, 2}));
  EXPECT_EQ(ledger_.Release("other", {}).bundles, 0);
}

TEST_F(BundleLedgerTest, GpusAreNeverShared) {
  ResourceSet one_gpu = Res(1, 0);  // the GPU amount is the head's to check; the ledger keeps indices apart
  ASSERT_TRUE(ledger_.Prepare("a", 1, {{0, one_gpu, {}, {1}}}, 10'000'000).ok());
  auto s = ledger_.Prepare("b", 1, {{0, one_gpu, {}, {1}}}, 10'000'000);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "bundle 0: GPU 1 is held by bundle 0 of group a");
  s = ledger_.Prepare("b", 1, {{0, one_gpu, {}, {2}}}, 10'000'000);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "bundle 0: GPU 2 does not exist; this host has 2 GPUs");
  EXPECT_TRUE(ledger_.Prepare("b", 1, {{0, one_gpu, {}, {0}}}, 10'000'000).ok());
  EXPECT_EQ(ledger_.BusyGpus(), (std::vector<int>{0, 1}));
}

TEST_F(BundleLedgerTest, WorkersBindOnlyToCommittedBundles) {
  ASSERT_TRUE(ledger_.Prepare("g", 7, {{0, Res(1, 2), {2, 3}}}, 10'000'000).ok());
  auto bound = ledger_.Bind("g", 0, "w1");
  EXPECT_EQ(bound.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(bound.status().message(), "bundle 0 of group g is prepared but not committed");
  EXPECT_EQ(ledger_.Bind("g", 1, "w1").status().message(), "bundle 1 of group g is not held on this host");
  EXPECT_EQ(ledger_.Bind("other", 0, "w1").status().message(), "bundle 0 of group other is not held on this host");
  ASSERT_TRUE(ledger_.Commit("g", 7).ok());
  bound = ledger_.Bind("g", 0, "w1");
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ(bound->chips, (std::vector<int>{2, 3}));
  ASSERT_EQ(ledger_.Entries().size(), 1u);
  EXPECT_EQ(ledger_.Entries()[0].workers, (std::set<std::string>{"w1"}));
}

TEST_F(BundleLedgerTest, AReleasedBundleHoldsItsDevicesUntilItsWorkersAreGone) {
  ASSERT_TRUE(ledger_.Prepare("old", 1, {{0, Res(1, 2), {0, 1}}}, 10'000'000).ok());
  ASSERT_TRUE(ledger_.Commit("old", 1).ok());
  ASSERT_TRUE(ledger_.Bind("old", 0, "w1").ok());
  ASSERT_TRUE(ledger_.Bind("old", 0, "w2").ok());

  BundleLedger::Released released = ledger_.Release("old", {});
  EXPECT_EQ(released.bundles, 1);
  EXPECT_EQ(released.workers, (std::vector<std::string>{"w1", "w2"}));
  // Its chips stay held: a new group cannot take them while the old workers may still use them.
  auto s = ledger_.Prepare("new", 1, {{0, Res(1, 2), {0, 1}}}, 10'000'000);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "bundle 0: chip 0 is held by bundle 0 of group old (released; its workers are stopping)");
  EXPECT_EQ(ledger_.Available(), Res(7, 2));
  EXPECT_EQ(ledger_.Bind("old", 0, "w3").status().message(), "bundle 0 of group old was released");

  EXPECT_FALSE(ledger_.Unbind("w1"));  // w2 still runs on it
  EXPECT_EQ(ledger_.BusyChips(), (std::vector<int>{0, 1}));
  const uint64_t version = ledger_.Version();
  EXPECT_TRUE(ledger_.Unbind("w2"));  // the last one: the bundle is gone
  EXPECT_GT(ledger_.Version(), version);
  EXPECT_TRUE(ledger_.Entries().empty());
  EXPECT_EQ(ledger_.Available(), Res(8, 4));
  EXPECT_TRUE(ledger_.Prepare("new", 1, {{0, Res(1, 2), {0, 1}}}, 10'000'000).ok());
  EXPECT_FALSE(ledger_.Unbind("w2"));  // unknown now
}

TEST_F(BundleLedgerTest, ReleaseAllReleasesEveryBundleAndNamesTheWorkers) {
  ASSERT_TRUE(ledger_.Prepare("a", 1, {{0, Res(1, 1), {0}}}, 10'000'000).ok());
  ASSERT_TRUE(ledger_.Commit("a", 1).ok());
  ASSERT_TRUE(ledger_.Prepare("b", 1, {{0, Res(1, 1), {1}}}, 10'000'000).ok());
  ASSERT_TRUE(ledger_.Bind("a", 0, "w").ok());
  BundleLedger::Released released = ledger_.ReleaseAll();
  EXPECT_EQ(released.bundles, 2);
  EXPECT_EQ(released.workers, (std::vector<std::string>{"w"}));
  ASSERT_EQ(ledger_.Entries().size(), 1u);  // "a" until its worker is gone
  EXPECT_TRUE(ledger_.Entries()[0].released);
  EXPECT_TRUE(ledger_.Unbind("w"));
  EXPECT_TRUE(ledger_.Entries().empty());
}

TEST_F(BundleLedgerTest, ALentPartCountsAsFreeUntilReclaimedEvenPastTheTotal) {
  ASSERT_TRUE(ledger_.Prepare("lease:a", 1, {{0, Res(6, 2), {0, 1}}}, 10'000'000).ok());
  // Only a committed bundle lends, and only what it holds.
  ResourceSet cpus;
  cpus.Set("CPU", 6);
  EXPECT_TRUE(absl::IsNotFound(ledger_.Lend("lease:a", 0, cpus)));
  ASSERT_TRUE(ledger_.Commit("lease:a", 1).ok());
  ResourceSet too_much;
  too_much.Set("CPU", 7);
  EXPECT_EQ(ledger_.Lend("lease:a", 0, too_much).code(), absl::StatusCode::kInvalidArgument);
  const uint64_t version = ledger_.Version();
  ASSERT_TRUE(ledger_.Lend("lease:a", 0, cpus).ok());
  EXPECT_GT(ledger_.Version(), version);
  EXPECT_EQ(ledger_.Available(), Res(8, 2));
  EXPECT_EQ(ledger_.BusyChips(), (std::vector<int>{0, 1}));  // devices are never lent
  ASSERT_TRUE(ledger_.Prepare("lease:b", 1, {{0, Res(5, 0), {}}}, 10'000'000).ok());
  ASSERT_TRUE(ledger_.Commit("lease:b", 1).ok());
  // Reclaimed past what is free: 6 + 5 of 8 held, nothing left, and nothing new fits.
  EXPECT_TRUE(ledger_.Reclaim("lease:a", 0));
  EXPECT_FALSE(ledger_.Reclaim("lease:a", 0));
  EXPECT_EQ(ledger_.Available(), Res(0, 2));
  EXPECT_EQ(ledger_.Prepare("c", 1, {{0, Res(1, 0), {}}}, 10'000'000).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger_.Release("lease:b", {}).bundles, 1);
  EXPECT_EQ(ledger_.Available(), Res(2, 2));
}

}  // namespace bundle_ledger_test
}  // namespace torus::node
