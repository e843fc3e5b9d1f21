#include "torus/train/checkpoints.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace torus::train {
namespace checkpoints_test {
namespace fs = std::filesystem;

class CheckpointsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/torus_ckpt_test_XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string Stage(int attempt, int step, int rank, const std::string& file, const std::string& text) {
    fs::path dir = fs::path(root_) / ".staging" / ("attempt_" + std::to_string(attempt)) /
                   ("step_" + std::to_string(step)) / ("rank_" + std::to_string(rank));
    fs::create_directories(dir);
    std::ofstream(dir / file) << text;
    return dir.string();
  }
  std::string Read(const fs::path& p) {
    std::ifstream in(p);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  std::string root_;
};

TEST_F(CheckpointsTest, CommitMergesRanksLowestWinsAndWritesMarker) {
  std::map<int, std::string> staged = {{0, Stage(1, 10, 0, "model.pt", "rank0")},
                                       {1, Stage(1, 10, 1, "model.pt", "rank1")}};
  std::ofstream(fs::path(staged[1]) / "extra.txt") << "only1";
  auto dir = CommitCheckpoint(root_, 10, 1, staged);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, (fs::path(root_) / "checkpoint_10").string());
  EXPECT_EQ(Read(fs::path(*dir) / "model.pt"), "rank0");
  EXPECT_EQ(Read(fs::path(*dir) / "extra.txt"), "only1");
  EXPECT_NE(Read(fs::path(*dir) / kCommitMarker).find("\"step\": 10"), std::string::npos);
  EXPECT_FALSE(fs::exists(fs::path(root_) / ".staging" / "attempt_1" / "step_10"));
  ASSERT_EQ(ListCommitted(root_).size(), 1u);
}

TEST_F(CheckpointsTest, UnmarkedDirsAreNotCommitted) {
  fs::create_directories(fs::path(root_) / "checkpoint_5");
  EXPECT_TRUE(ListCommitted(root_).empty());
}

TEST_F(CheckpointsTest, PruneKeepsNewest) {
  for (int step : {10, 20, 30}) ASSERT_TRUE(CommitCheckpoint(root_, step, 1, {{0, Stage(1, step, 0, "m", "x")}}).ok());
  auto deleted = PruneCheckpoints(root_, 2);
  ASSERT_EQ(deleted.size(), 1u);
  auto left = ListCommitted(root_);
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].first, 20);
  EXPECT_EQ(left[1].first, 30);
}

TEST_F(CheckpointsTest, StagedDirMustBeUnderStaging) {
  std::string good = Stage(1, 1, 0, "m", "x");
  EXPECT_TRUE(ValidateStagedDir(root_, good).ok());
  EXPECT_FALSE(ValidateStagedDir(root_, root_ + "/.staging/../checkpoint_1").ok());
  EXPECT_FALSE(ValidateStagedDir(root_, "/etc").ok());
  EXPECT_FALSE(ValidateStagedDir(root_, root_ + "/.staging/attempt_1/nope").ok());
}

}  // namespace checkpoints_test
}  // namespace torus::train
