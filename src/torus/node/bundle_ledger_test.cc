#include "torus/node/bundle_ledger.h"

#include <gtest/gtest.h>

namespace torus::node {
namespace {

ResourceSet Res(double cpu, double tpu) {
  ResourceSet r;
  r.Set("CPU", cpu);
  r.Set("TPU", tpu);
  return r;
}

class BundleLedgerTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  BundleLedger ledger_{&clock_, Res(8, 4), 4};
};

TEST_F(BundleLedgerTest, PrepareCommitRelease) {
  ASSERT_TRUE(ledger_.Prepare("g", 1, {{0, Res(1, 4), {0, 1, 2, 3}}}, 10'000'000).ok());
  EXPECT_EQ(ledger_.Available(), Res(7, 0));
  EXPECT_EQ(ledger_.BusyChips(), (std::vector<int>{0, 1, 2, 3}));
  ASSERT_TRUE(ledger_.Commit("g", 1).ok());
  clock_.AdvanceMillis(20'000);
  EXPECT_EQ(ledger_.Expire(), 0);  // committed bundles never expire
  EXPECT_EQ(ledger_.Release("g", {}), 1);
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
  EXPECT_EQ(s.message(), "bundle 0: chip 1 is already held");
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
  EXPECT_EQ(ledger_.Release("g", {1}), 1);
  EXPECT_EQ(ledger_.BusyChips(), (std::vector<int>{0, 2}));
  EXPECT_EQ(ledger_.Release("other", {}), 0);
}

}  // namespace
}  // namespace torus::node
