#include "torus/node/log_files.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torus::node {
namespace log_files_test {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class LogFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "torus_logs_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    fs::create_directories(root_ + "/tpu");
    fs::create_directories(root_ + "/workers");
    Write("agent.log", "agent line 1\nagent line 2\n");
    Write("tpu/tpu_driver.INFO", "0123456789");
    Write("tpu/libtpu.log", "libtpu");
    fs::create_directories(root_ + "/tpu/subdir");
    Write("tpu/subdir/nested.log", "nested");
    Write("outside.txt", "secret");
    fs::create_symlink(root_ + "/outside.txt", root_ + "/tpu/link.log");
    fs::create_symlink(root_ + "/outside.txt", root_ + "/workers/linked.log");
    Write("workers/job-1.log", "job output");
    Write("workers/run_a.r0.log", "rank 0");
    Write("workers/notes.txt", "not a worker log");
    Write("workers/bad id.log", "bad worker id");
  }
  void TearDown() override { fs::remove_all(root_); }
  void Write(const std::string& relative, const std::string& contents) {
    std::ofstream(fs::path(root_) / relative) << contents;
  }
  LogFiles Files() const {
    return LogFiles({.agent_log = root_ + "/agent.log", .tpu_log_dir = root_ + "/tpu",
                     .worker_log_dir = root_ + "/workers"});
  }
  static std::vector<std::string> Names(const std::vector<LogFileEntry>& entries) {
    std::vector<std::string> names;
    for (const LogFileEntry& e : entries) names.push_back(e.name);
    return names;
  }

  std::string root_;
};

TEST_F(LogFilesTest, ListsRegularFilesOnly) {
  std::vector<LogFileEntry> entries = Files().List();
  EXPECT_THAT(Names(entries), ElementsAre("agent", "tpu/libtpu.log", "tpu/tpu_driver.INFO", "workers/job-1",
                                          "workers/run_a.r0"));
  EXPECT_EQ(entries[2].size, 10);
  EXPECT_GT(entries[2].modified_ms, 1'600'000'000'000);
}

TEST_F(LogFilesTest, MissingPlacesAreLeftOut) {
  LogFiles files({.agent_log = "", .tpu_log_dir = root_ + "/absent", .worker_log_dir = root_ + "/workers"});
  EXPECT_THAT(Names(files.List()), ElementsAre("workers/job-1", "workers/run_a.r0"));
  EXPECT_EQ(files.Read("agent", 0, 0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(files.Read("tpu/libtpu.log", 0, 0).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(LogFilesTest, AnUntrustedTpuLogDirectoryIsNotServed) {
  // A link planted where the directory should be (e.g. /tmp/tpu_logs -> /etc) is not followed.
  fs::create_symlink(root_ + "/tpu", root_ + "/tpu_link");
  LogFiles linked({.agent_log = "", .tpu_log_dir = root_ + "/tpu_link", .worker_log_dir = ""});
  EXPECT_TRUE(linked.List().empty());
  EXPECT_EQ(linked.Read("tpu/libtpu.log", 0, 0).status().code(), absl::StatusCode::kNotFound);
  // Neither is a directory that others may write to.
  fs::permissions(root_ + "/tpu", fs::perms::group_write | fs::perms::others_write, fs::perm_options::add);
  LogFiles writable = Files();
  EXPECT_THAT(Names(writable.List()), ElementsAre("agent", "workers/job-1", "workers/run_a.r0"));
  auto refused = writable.Read("tpu/libtpu.log", 0, 0);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("writable by others"));
}

TEST_F(LogFilesTest, NamesThatAreNotUtf8AreLeftOut) {
  Write("tpu/bad\xff.log", "x");
  EXPECT_THAT(Names(Files().List()), ElementsAre("agent", "tpu/libtpu.log", "tpu/tpu_driver.INFO", "workers/job-1",
                                                 "workers/run_a.r0"));
}

TEST_F(LogFilesTest, ReadsFromOffsetsAndFromTheEnd) {
  LogFiles files = Files();
  auto all = files.Read("tpu/tpu_driver.INFO", 0, 0);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->data, "0123456789");
  EXPECT_EQ(all->offset, 0);
  EXPECT_EQ(all->size, 10);
  auto middle = files.Read("tpu/tpu_driver.INFO", 3, 4);
  EXPECT_EQ(middle->data, "3456");
  EXPECT_EQ(middle->offset, 3);
  auto tail = files.Read("tpu/tpu_driver.INFO", -3, 0);
  EXPECT_EQ(tail->data, "789");
  EXPECT_EQ(tail->offset, 7);
  auto before_start = files.Read("tpu/tpu_driver.INFO", -100, 2);
  EXPECT_EQ(before_start->data, "01");
  EXPECT_EQ(before_start->offset, 0);
  auto past_end = files.Read("tpu/tpu_driver.INFO", 50, 0);
  EXPECT_EQ(past_end->data, "");
  EXPECT_EQ(past_end->offset, 10);
  EXPECT_EQ(files.Read("agent", 0, 0)->data, "agent line 1\nagent line 2\n");
  EXPECT_EQ(files.Read("workers/job-1", 4, 0)->data, "output");
}

TEST_F(LogFilesTest, CapsTheReadAtOneMebibyte) {
  Write("tpu/big.log", std::string(3 * 1024 * 1024, 'x'));
  LogFiles files = Files();
  EXPECT_EQ(files.Read("tpu/big.log", 0, 0)->data.size(), 64u * 1024);
  EXPECT_EQ(files.Read("tpu/big.log", 0, 10 * 1024 * 1024)->data.size(), 1024u * 1024);
}

TEST_F(LogFilesTest, MalformedNamesAreInvalidArguments) {
  LogFiles files = Files();
  for (const std::string name : {"", "/etc/passwd", "tpu/../outside.txt", "../outside.txt", "workers/..",
                                 "tpu/", "tpu/subdir/nested.log", "tpu/.", "other/file", "agent.log",
                                 "workers/bad id", "workers/"}) {
    auto read = files.Read(name, 0, 0);
    ASSERT_FALSE(read.ok()) << name;
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument) << name << ": " << read.status();
    EXPECT_THAT(read.status().message(), HasSubstr("name '" + name + "'"));
  }
  auto negative = files.Read("agent", 0, -1);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.status().message(), HasSubstr("max_bytes"));
}

TEST_F(LogFilesTest, UnlistedFilesAndSymbolicLinksAreNotFound) {
  LogFiles files = Files();
  for (const std::string name : {"tpu/absent.log", "tpu/link.log", "tpu/subdir", "workers/linked",
                                 "workers/absent", "workers/notes"}) {
    auto read = files.Read(name, 0, 0);
    ASSERT_FALSE(read.ok()) << name;
    EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound) << name << ": " << read.status();
    EXPECT_THAT(read.status().message(), HasSubstr("name '" + name + "'"));
  }
}

TEST(DetectStdoutLogFileTest, RegularFileOnly) {
  // Point this process's stdout at a temporary file, then at /dev/null.
  std::string path = (fs::temp_directory_path() / "torus_stdout_XXXXXX").string();
  const int file = mkstemp(path.data());
  ASSERT_GE(file, 0);
  fflush(stdout);
  const int saved = dup(1);
  ASSERT_GE(saved, 0);
  dup2(file, 1);
  const std::string detected = DetectStdoutLogFile();
  const int null_fd = open("/dev/null", O_WRONLY);
  dup2(null_fd, 1);
  const std::string detected_null = DetectStdoutLogFile();
  dup2(saved, 1);
  close(saved);
  close(null_fd);
  close(file);
  fs::remove(path);
  EXPECT_EQ(fs::canonical(fs::path(detected).parent_path()) / fs::path(detected).filename(),
            fs::canonical(fs::path(path).parent_path()) / fs::path(path).filename());
  EXPECT_EQ(detected_null, "");
}

}  // namespace log_files_test
}  // namespace torus::node
