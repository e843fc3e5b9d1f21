#include "torus/core/groups.h"

#include "gtest/gtest.h"

namespace torus::core {
namespace groups_test {

rpc::PlacementGroupView View(const std::string& state) {
  rpc::PlacementGroupView view;
  view.set_id("pg-1");
  view.set_state(state);
  return view;
}

TEST(GroupStateTest, EveryStateTheHeadSendsIsRead) {
  EXPECT_EQ(*GroupStateOf(View("PENDING")), GroupState::kPending);
  EXPECT_EQ(*GroupStateOf(View("CREATED")), GroupState::kCreated);
  EXPECT_EQ(*GroupStateOf(View("RESCHEDULING")), GroupState::kRescheduling);
  EXPECT_EQ(*GroupStateOf(View("REMOVED")), GroupState::kRemoved);
  EXPECT_EQ(*GroupStateOf(View("FAILED")), GroupState::kFailed);
}

TEST(GroupStateTest, AnUnknownStateIsAnErrorNamingIt) {
  absl::StatusOr<GroupState> state = GroupStateOf(View("created"));
  ASSERT_FALSE(state.ok());
  EXPECT_EQ(state.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(state.status().message(),
            "placement group pg-1: unknown state \"created\" (known: PENDING, CREATED, RESCHEDULING, REMOVED, FAILED)");
}

}  // namespace groups_test
}  // namespace torus::core
