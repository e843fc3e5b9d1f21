#include "torus/metrics/proc_stats.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torus::metrics {
namespace proc_stats_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(ParseProcStatTest, SumsBusyAndIdle) {
  auto t = ParseProcStat("cpu  100 5 50 800 20 3 2 1 7 0\ncpu0 1 2 3 4\nintr 1 2\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->busy, 100u + 5 + 50 + 3 + 2 + 1);
  EXPECT_EQ(t->total, t->busy + 800 + 20);
  // Old kernels list only four counters.
  auto old = ParseProcStat("cpu 1 2 3 4\n");
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->total, 10u);
}

TEST(ParseProcStatTest, Errors) {
  EXPECT_THAT(ParseProcStat("cpu0 1 2 3 4\n").status().message(), HasSubstr("no 'cpu ' line"));
  EXPECT_THAT(ParseProcStat("cpu 1 2\n").status().message(), HasSubstr("fewer than 4"));
  EXPECT_THAT(ParseProcStat("cpu 1 x 3 4\n").status().message(), HasSubstr("counter 2"));
}

TEST(HostCpuPercentTest, Deltas) {
  EXPECT_EQ(HostCpuPercent({100, 1000}, {150, 1100}), 50.0);
  EXPECT_FALSE(HostCpuPercent({100, 1000}, {100, 1000}).has_value());
  EXPECT_FALSE(HostCpuPercent({100, 1000}, {90, 1100}).has_value());
}

TEST(ParseMeminfoTest, TotalMinusAvailable) {
  auto m = ParseMeminfo("MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    600 kB\n");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->total_bytes, 1000 * 1024);
  EXPECT_EQ(m->used_bytes(), 400 * 1024);
  auto old = ParseMeminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 50 kB\nCached: 150 kB\n");
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->used_bytes(), 700 * 1024);
  EXPECT_FALSE(ParseMeminfo("MemFree: 1 kB\n").ok());
  EXPECT_FALSE(ParseMeminfo("garbage").ok());
}

// Found by proc_stats_fuzz: kB counts past int64 in bytes overflowed when converted (UndefinedBehaviorSanitizer).
TEST(ParseMeminfoTest, CountsBeyondInt64BytesAreUnusable) {
  EXPECT_FALSE(ParseMeminfo("MemTotal: 33333333333333352 kB\nMemAvailable: 1 kB\n").ok());
  auto m = ParseMeminfo("MemTotal: 9007199254740991 kB\nMemAvailable: 33333333333333352 kB\nMemFree: 100 kB\n");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->total_bytes, int64_t{9007199254740991} * 1024);
  EXPECT_EQ(m->available_bytes, 100 * 1024);
}

TEST(ParsePidStatTest, CommandNamesWithSpacesAndParentheses) {
  auto s = ParsePidStat(
      "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 500 0 0 0 120 30 0 0 20 0 4 0 98765 1000000 2500 "
      "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->pid, 4242);
  EXPECT_EQ(s->state, 'S');
  EXPECT_EQ(s->ppid, 1);
  EXPECT_EQ(s->pgrp, 4242);
  EXPECT_EQ(s->cpu_ticks, 150u);
  EXPECT_EQ(s->start_ticks, 98765u);
  EXPECT_EQ(s->rss_pages, 2500);
}

TEST(ParsePidStatTest, Errors) {
  EXPECT_FALSE(ParsePidStat("").ok());
  EXPECT_FALSE(ParsePidStat("12 (x) S 1 2 3").ok());
  EXPECT_FALSE(ParsePidStat("x (y) S 1 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 5 1 2").ok());
  EXPECT_FALSE(ParsePidStat("12 (y) S 1 1 1 0 -1 0 0 0 0 0 x 1 0 0 20 0 1 0 5 1 2").ok());
}

class ProcReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "torus_proc_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
  }
  void TearDown() override { fs::remove_all(root_); }
  void Write(const std::string& relative, const std::string& contents) {
    const fs::path path = fs::path(root_) / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << contents;
  }
  void WriteProcess(pid_t pid, char state, uint64_t ticks, int64_t rss, const std::string& children = "") {
    Write(absl::StrCat(pid, "/stat"),
          absl::StrCat(pid, " (w) ", std::string(1, state), " 1 ", pid, " 1 0 -1 0 0 0 0 0 ", ticks,
                       " 0 0 0 20 0 1 0 ", 1000 + pid, " 0 ", rss, " 0 0"));
    Write(absl::StrCat(pid, "/task/", pid, "/children"), children);
  }

  std::string root_;
};

TEST_F(ProcReaderTest, HostFiles) {
  Write("stat", "cpu  1 2 3 4 5 6 7 8 0 0\n");
  Write("meminfo", "MemTotal: 2048 kB\nMemAvailable: 1024 kB\n");
  ProcReader reader(root_);
  EXPECT_EQ(reader.ReadHostCpu()->total, 36u);
  EXPECT_EQ(reader.ReadHostMemory()->used_bytes(), 1024 * 1024);
  EXPECT_FALSE(ProcReader(root_ + "/missing").ReadHostCpu().ok());
}

TEST_F(ProcReaderTest, TreeFollowsChildrenAndSkipsZombies) {
  WriteProcess(10, 'S', 100, 10, "11 12 ");
  WriteProcess(11, 'R', 50, 5, "13");
  WriteProcess(12, 'Z', 7, 0);
  WriteProcess(13, 'S', 1, 1);
  ProcReader reader(root_);
  std::vector<ProcessStat> tree = reader.ReadTree(10);
  ASSERT_EQ(tree.size(), 3u);
  EXPECT_EQ(tree[0].pid, 10);
  EXPECT_EQ(tree[1].pid, 11);
  EXPECT_EQ(tree[2].pid, 13);
  EXPECT_EQ(reader.ReadProcess(12).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reader.ReadProcess(99).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(reader.ReadTree(99).empty());
  EXPECT_EQ(reader.ReadTree(10, 2).size(), 2u);
}

TEST_F(ProcReaderTest, ReadsThisProcessFromTheRealProc) {
  ProcReader reader;
  auto self = reader.ReadProcess(getpid());
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_EQ(self->pid, getpid());
  EXPECT_GT(self->rss_pages, 0);
  EXPECT_GE(reader.ReadTree(getpid()).size(), 1u);
}

ProcessStat Proc(pid_t pid, uint64_t start, uint64_t ticks) {
  ProcessStat p;
  p.pid = pid;
  p.start_ticks = start;
  p.cpu_ticks = ticks;
  return p;
}

TEST(CpuRateTrackerTest, PercentOfOneCpuBetweenCalls) {
  CpuRateTracker tracker(100);
  EXPECT_FALSE(tracker.Update("w", {Proc(1, 5, 1000)}, 0).has_value());
  // 100 ticks = 1 CPU-second over 2 s: 50 %; a new child counts from zero.
  EXPECT_EQ(tracker.Update("w", {Proc(1, 5, 1080), Proc(2, 9, 20)}, 2'000'000), 50.0);
  // The child exited; the parent used 2 s of CPU over 1 s (two CPUs).
  EXPECT_EQ(tracker.Update("w", {Proc(1, 5, 1280)}, 3'000'000), 200.0);
  // The pid was reused by another process (another start time): counted from zero, not as a negative delta.
  EXPECT_EQ(tracker.Update("w", {Proc(1, 77, 10)}, 4'000'000), 10.0);
  tracker.Retain({});
  EXPECT_FALSE(tracker.Update("w", {Proc(1, 77, 20)}, 5'000'000).has_value());
}

}  // namespace proc_stats_test
}  // namespace torus::metrics
