#include "torus/sim/load_sampler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace torus::sim {
namespace load_sampler_test {

constexpr char kMark[] = "/tmp/session/hosts/v6e-0-w0/work";

// A fake /proc tree in a temp dir.
class FakeProc {
 public:
  FakeProc() {
    root_ = std::filesystem::temp_directory_path() /
            absl::StrCat("torus_load_sampler_test_", getpid(), "_", counter_++);
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  ~FakeProc() { std::filesystem::remove_all(root_); }

  // Writes <root>/<pid>/stat and environ. `ticks` is utime (stime is 0); rss in pages.
  void Set(int pid, int ppid, uint64_t ticks, int64_t rss_pages, const std::vector<std::string>& env,
           char state = 'S', uint64_t start_time = 1000, const std::string& comm = "python3") {
    auto dir = root_ / std::to_string(pid);
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "stat") << pid << " (" << comm << ") " << state << " " << ppid
                                << " 1 1 0 -1 4194304 100 0 0 0 " << ticks << " 0 0 0 20 0 1 0 " << start_time
                                << " 123456789 " << rss_pages << " 18446744073709551615\n";
    std::string environ;
    for (const auto& e : env) environ += e + '\0';
    std::ofstream(dir / "environ", std::ios::binary) << environ;
  }
  void Remove(int pid) { std::filesystem::remove_all(root_ / std::to_string(pid)); }
  std::string root() const { return root_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path root_;
};

std::vector<std::string> Worker(const std::string& chips, const std::string& mark = kMark) {
  return {"PATH=/usr/bin", absl::StrCat("TORUS_WORKER_OF=", mark), absl::StrCat("TPU_VISIBLE_CHIPS=", chips)};
}

LoadSampler MakeSampler(const FakeProc& proc, int chips = 4) {
  return LoadSampler({.proc_root = proc.root(), .worker_mark = kMark, .chips = chips, .ticks_per_second = 100,
                      .page_size = 4096});
}

TEST(ParseVisibleChipsTest, Forms) {
  EXPECT_EQ(ParseVisibleChips("0,1,3", 4), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(ParseVisibleChips(" 2 , 0 ", 4), (std::vector<int>{0, 2}));
  EXPECT_EQ(ParseVisibleChips("1,1,x,9,-1,", 4), (std::vector<int>{1}));
  EXPECT_TRUE(ParseVisibleChips("", 4).empty());
}

TEST(LoadSamplerTest, NothingHeldWithoutMarkedWorkers) {
  FakeProc proc;
  proc.Set(10, 1, 500, 1000, {"PATH=/usr/bin", "TPU_VISIBLE_CHIPS=0"});   // not a worker of this agent
  proc.Set(11, 1, 500, 1000, Worker("1", "/tmp/session/hosts/other/work"));  // another host's worker
  LoadSampler sampler = MakeSampler(proc);
  auto loads = sampler.Sample(0);
  ASSERT_EQ(loads.size(), 4u);
  for (const auto& l : loads) EXPECT_FALSE(l.held());
}

TEST(LoadSamplerTest, AWholeHostTpuWorkerHoldsEveryChip) {
  FakeProc proc;
  const std::vector<std::string> whole_host = {"PATH=/usr/bin", absl::StrCat("TORUS_WORKER_OF=", kMark),
                                               "TPU_WORKER_ID=2"};
  proc.Set(300, 1, 0, 400, whole_host);
  proc.Set(301, 1, 0, 400, {"PATH=/usr/bin", absl::StrCat("TORUS_WORKER_OF=", kMark)});  // a CPU-only worker
  LoadSampler sampler = MakeSampler(proc);
  sampler.Sample(0);
  proc.Set(300, 1, 200, 400, whole_host);  // 2 CPU-seconds over 1 s, split over 4 chips
  proc.Set(301, 1, 500, 400, {"PATH=/usr/bin", absl::StrCat("TORUS_WORKER_OF=", kMark)});
  auto loads = sampler.Sample(1.0);
  for (const auto& l : loads) {
    EXPECT_EQ(l.holders, std::vector<pid_t>{300});
    EXPECT_NEAR(l.cpu_percent, 50, 1e-9);
  }
}

TEST(LoadSamplerTest, CpuFromTickDeltasSplitOverChips) {
  FakeProc proc;
  proc.Set(100, 1, 1000, 100'000, Worker("0,1"));  // 100000 pages = 409.6 MB
  LoadSampler sampler = MakeSampler(proc);
  auto first = sampler.Sample(10.0);
  EXPECT_EQ(first[0].holders, std::vector<pid_t>{100});
  EXPECT_EQ(first[0].cpu_percent, 0) << "no delta on the first sample";
  EXPECT_EQ(first[0].rss_bytes, 100'000 * 4096 / 2);

  proc.Set(100, 1, 1120, 100'000, Worker("0,1"));  // 120 ticks = 1.2 CPU-seconds over 1 s
  auto second = sampler.Sample(11.0);
  EXPECT_NEAR(second[0].cpu_percent, 60, 1e-9);
  EXPECT_NEAR(second[1].cpu_percent, 60, 1e-9);
  EXPECT_FALSE(second[2].held());
  EXPECT_EQ(second[2].cpu_percent, 0);
  EXPECT_FALSE(second[3].held());
}

TEST(LoadSamplerTest, DescendantsCountForTheirHolder) {
  FakeProc proc;
  proc.Set(200, 1, 0, 10, Worker("2"));
  proc.Set(201, 200, 0, 20, {"PATH=/usr/bin"});  // a child with a scrubbed environment
  proc.Set(202, 201, 0, 30, {"PATH=/usr/bin"});  // and its child
  LoadSampler sampler = MakeSampler(proc);
  sampler.Sample(0);
  proc.Set(200, 1, 10, 10, Worker("2"));
  proc.Set(201, 200, 50, 20, {"PATH=/usr/bin"});
  proc.Set(202, 201, 40, 30, {"PATH=/usr/bin"});
  auto loads = sampler.Sample(2.0);
  EXPECT_EQ(loads[2].holders, std::vector<pid_t>{200}) << "descendants count, but do not hold";
  EXPECT_NEAR(loads[2].cpu_percent, 50, 1e-9);  // 100 ticks over 2 s
  EXPECT_EQ(loads[2].rss_bytes, 60 * 4096);
}

TEST(LoadSamplerTest, ZombiesAndVanishedProcessesAreDead) {
  FakeProc proc;
  proc.Set(300, 1, 100, 10, Worker("0"));
  proc.Set(301, 1, 100, 10, Worker("1"));
  LoadSampler sampler = MakeSampler(proc);
  auto loads = sampler.Sample(0);
  EXPECT_TRUE(loads[0].held());
  EXPECT_TRUE(loads[1].held());
  proc.Set(300, 1, 100, 0, Worker("0"), 'Z');
  proc.Remove(301);
  loads = sampler.Sample(1);
  EXPECT_FALSE(loads[0].held());
  EXPECT_FALSE(loads[1].held());
}

TEST(LoadSamplerTest, ReusedPidStartsFromZero) {
  FakeProc proc;
  proc.Set(400, 1, 5000, 10, Worker("3"), 'S', /*start_time=*/1000);
  LoadSampler sampler = MakeSampler(proc);
  sampler.Sample(0);
  proc.Set(400, 1, 5, 10, Worker("3"), 'R', /*start_time=*/9000);
  auto loads = sampler.Sample(1);
  EXPECT_TRUE(loads[3].held());
  EXPECT_EQ(loads[3].cpu_percent, 0);
}

TEST(LoadSamplerTest, ChipsOutsideTheHostAreIgnoredAndOddNamesParse) {
  FakeProc proc;
  proc.Set(500, 1, 0, 10, Worker("0,7"), 'S', 1000, "weird) name (x");
  LoadSampler sampler = MakeSampler(proc, /*chips=*/4);
  sampler.Sample(0);
  proc.Set(500, 1, 100, 10, Worker("0,7"), 'S', 1000, "weird) name (x");
  auto loads = sampler.Sample(1);
  EXPECT_EQ(loads[0].holders, std::vector<pid_t>{500});
  EXPECT_NEAR(loads[0].cpu_percent, 100, 1e-9) << "chip 7 is not this host's: all of it goes to chip 0";
}

TEST(LoadSamplerTest, ReadsTheRealProcTree) {
  // This test process is no worker: nothing held, and the walk over /proc does not fail.
  LoadSampler sampler({.proc_root = "/proc", .worker_mark = "/nonexistent/torus/work", .chips = 2});
  auto loads = sampler.Sample(0);
  ASSERT_EQ(loads.size(), 2u);
  EXPECT_FALSE(loads[0].held());
}

}  // namespace load_sampler_test
}  // namespace torus::sim
