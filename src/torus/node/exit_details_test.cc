#include "torus/node/exit_details.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace torus::node {
namespace exit_details_test {

namespace fs = std::filesystem;

class ExitDetailsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "torus_exit_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = root_ + "/" + name;
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  // Sets a file's modification time to `ms` (Unix ms).
  void Touch(const std::string& path, int64_t ms) {
    struct timespec times[2];
    times[0].tv_sec = times[1].tv_sec = ms / 1000;
    times[0].tv_nsec = times[1].tv_nsec = (ms % 1000) * 1'000'000;
    ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  }
  std::string root_;
};

TEST_F(ExitDetailsTest, LastLinesKeepsTheEndWithoutTheTrailingNewline) {
  const std::string path = Write("log", "one\ntwo\nthree\nfour\n\n");
  EXPECT_EQ(LastLines(path, 2, 4096), "three\nfour");
  EXPECT_EQ(LastLines(path, 10, 4096), "one\ntwo\nthree\nfour");
  EXPECT_EQ(LastLines(path, 0, 4096), "");
}

TEST_F(ExitDetailsTest, LastLinesDropsALineCutByTheByteLimit) {
  const std::string path = Write("log", "a very long first line\nsecond\nthird");
  EXPECT_EQ(LastLines(path, 10, 15), "second\nthird");
}

TEST_F(ExitDetailsTest, LastLinesOfAMissingFileIsEmpty) {
  EXPECT_EQ(LastLines(root_ + "/absent", 5, 4096), "");
}

TEST_F(ExitDetailsTest, LastGlogErrorTakesTheNewestErrorOfFilesModifiedSinceTheStart) {
  const std::string old = Write("tpu/tpu_driver.old.log", "E1130 10:00:00.000000 1 a.cc:1] stale error\n");
  Touch(old, 1'000'000);
  const std::string a = Write("tpu/tpu_driver.a.log",
                              "I1201 10:00:00.000000 7 a.cc:1] starting\n"
                              "E1201 10:00:01.000000 7 a.cc:2] first error\n"
                              "F1201 10:00:02.000000 7 a.cc:3] TPU chip 2 halted: HBM uncorrectable ECC error\n"
                              "I1201 10:00:03.000000 7 a.cc:4] shutting down\n");
  Touch(a, 3'000'000);
  const std::string b = Write("tpu/tpu_driver.b.log", "W1201 10:00:00.000000 8 b.cc:1] only a warning\n");
  Touch(b, 4'000'000);
  EXPECT_EQ(LastGlogError(root_ + "/tpu", 2'000'000),
            "F1201 10:00:02.000000 7 a.cc:3] TPU chip 2 halted: HBM uncorrectable ECC error");
  // Files older than the worker are not its business.
  EXPECT_EQ(LastGlogError(root_ + "/tpu", 3'500'000), "");
  EXPECT_EQ(LastGlogError(root_ + "/absent", 0), "");
}

TEST_F(ExitDetailsTest, LastGlogErrorIgnoresLinesThatOnlyLookLikeErrors) {
  const std::string a = Write("tpu/x.log", "Error: not glog\nE12 short\nEabcd 10:00 no\n");
  Touch(a, 5'000);
  EXPECT_EQ(LastGlogError(root_ + "/tpu", 0), "");
}

TEST(OomKillCount, ParsesV1AndV2Files) {
  EXPECT_EQ(ParseOomKillCount("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 3u);
  EXPECT_EQ(ParseOomKillCount("low 0\nhigh 0\nmax 4\noom 2\noom_kill 1\noom_group_kill 0\n"), 1u);
  EXPECT_EQ(ParseOomKillCount("oom_kill_disable 0\n"), std::nullopt);
  EXPECT_EQ(ParseOomKillCount(""), std::nullopt);
}

TEST_F(ExitDetailsTest, OomCounterFindsTheMemoryCgroupOfAProcess) {
  Write("proc/42/cgroup", "9:name=systemd:/\n4:memory:/pod/abc\n1:cpu:/\n0::/\n");
  Write("cg/memory/pod/abc/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n");
  auto counter = OomCounter::ForProcess(42, root_ + "/proc", root_ + "/cg");
  ASSERT_TRUE(counter.has_value());
  EXPECT_EQ(counter->path(), root_ + "/cg/memory/pod/abc/memory.oom_control");
  EXPECT_EQ(counter->Read(), 7u);
  Write("cg/memory/pod/abc/memory.oom_control", "oom_kill 8\n");
  EXPECT_EQ(counter->Read(), 8u);

  Write("proc/43/cgroup", "0::/user.slice/w\n");
  Write("cg/user.slice/w/memory.events", "oom 1\noom_kill 1\n");
  auto v2 = OomCounter::ForProcess(43, root_ + "/proc", root_ + "/cg");
  ASSERT_TRUE(v2.has_value());
  EXPECT_EQ(v2->Read(), 1u);

  Write("proc/44/cgroup", "0::/nothing/here\n");
  EXPECT_FALSE(OomCounter::ForProcess(44, root_ + "/proc", root_ + "/cg").has_value());
  EXPECT_FALSE(OomCounter::ForProcess(45, root_ + "/proc", root_ + "/cg").has_value());
}

}  // namespace exit_details_test
}  // namespace torus::node
