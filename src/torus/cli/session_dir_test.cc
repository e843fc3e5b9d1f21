#include "torus/cli/session_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <regex>

#include "absl/strings/str_cat.h"
#include "torus/cli/test_util.h"

namespace torus::cli {
namespace session_dir_test {

namespace fs = std::filesystem;
using test_util::TempDir;
using test_util::WriteFile;

TEST(SessionDirTest, CreateSessionMakesLogsAndPointsLatestAtIt) {
  TempDir root;
  auto session = CreateSession(root.path());
  ASSERT_TRUE(session.ok()) << session.status();
  const std::string name = fs::path(*session).filename().string();
  EXPECT_EQ(fs::path(*session).parent_path().string(), root.path());
  EXPECT_TRUE(std::regex_match(
      name, std::regex(absl::StrCat(R"(session_\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}_\d{6}_)", getpid()))))
      << name;
  EXPECT_TRUE(fs::is_directory(*session + "/logs"));
  const fs::path latest = fs::path(root.path()) / "session_latest";
  ASSERT_TRUE(fs::is_symlink(latest));
  EXPECT_EQ(fs::read_symlink(latest).string(), name);  // relative, so the root can move
  // No temporary link is left behind.
  EXPECT_FALSE(fs::exists(fs::symlink_status(fs::path(root.path()) / absl::StrCat(".session_latest.", getpid()))));
}

TEST(SessionDirTest, CreateSessionMovesLatestToTheNewOne) {
  TempDir root;
  auto first = CreateSession(root.path());
  ASSERT_TRUE(first.ok()) << first.status();
  usleep(2000);  // the names carry microseconds
  auto second = CreateSession(root.path());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(*first, *second);
  EXPECT_EQ(fs::read_symlink(fs::path(root.path()) / "session_latest").string(),
            fs::path(*second).filename().string());
}

TEST(SessionDirTest, CreateSessionUnderAFileFails) {
  TempDir dir;
  const std::string file = dir.path() + "/not_a_dir";
  WriteFile(file, "x");
  auto session = CreateSession(file);
  ASSERT_FALSE(session.ok());
  EXPECT_EQ(session.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(session.status().message().rfind("cannot create " + file + "/session_", 0), 0u) << session.status();
}

TEST(SessionDirTest, RecordedProcessesReadBackInOrder) {
  TempDir session;
  ASSERT_TRUE(RecordProcess(session.path(), {"head", "head", 100}).ok());
  ASSERT_TRUE(RecordProcess(session.path(), {"node", "v6e-0-w0", 101}).ok());
  ASSERT_TRUE(RecordProcess(session.path(), {"head", "head", 102}).ok());
  EXPECT_EQ(test_util::ReadFile(session.path() + "/processes"), "head head 100\nnode v6e-0-w0 101\nhead head 102\n");
  const std::vector<ProcessRecord> records = ReadProcesses(session.path());
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].role, "head");
  EXPECT_EQ(records[0].name, "head");
  EXPECT_EQ(records[0].pid, 100);
  EXPECT_EQ(records[1].role, "node");
  EXPECT_EQ(records[1].name, "v6e-0-w0");
  EXPECT_EQ(records[1].pid, 101);
  // A later record for the same name is kept too, after the earlier one.
  EXPECT_EQ(records[2].pid, 102);
}

TEST(SessionDirTest, AMalformedProcessLineHidesNoRecordAfterIt) {
  TempDir session;
  test_util::WriteFile(session.path() + "/processes", "head head 100\nnode v6e-0-w0\nnode v6e-0-w1 102\n");
  const std::vector<ProcessRecord> records = ReadProcesses(session.path());
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].pid, 100);
  EXPECT_EQ(records[1].name, "v6e-0-w1");
  EXPECT_EQ(records[1].pid, 102);
}

TEST(SessionDirTest, ReadProcessesOfASessionWithoutRecordsIsEmpty) {
  TempDir session;
  EXPECT_TRUE(ReadProcesses(session.path()).empty());
  EXPECT_TRUE(ReadProcesses(session.path() + "/missing").empty());
}

TEST(SessionDirTest, RecordProcessIntoAMissingDirectoryFails) {
  TempDir dir;
  const std::string missing = dir.path() + "/missing";
  absl::Status s = RecordProcess(missing, {"node", "a", 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "cannot write " + missing + "/processes");
}

TEST(SessionDirTest, AllSessionsListsSessionDirectoriesOldestFirst) {
  TempDir root;
  for (const char* name : {"session_2026-01-02_00-00-00_000000_5", "session_2025-12-31_23-59-59_999999_7",
                           "session_2026-01-01_12-00-00_000000_6"}) {
    fs::create_directories(fs::path(root.path()) / name);
  }
  fs::create_directory_symlink("session_2026-01-02_00-00-00_000000_5", fs::path(root.path()) / "session_latest");
  WriteFile(root.path() + "/session_file", "not a directory");
  fs::create_directories(fs::path(root.path()) / "other_dir");
  EXPECT_EQ(AllSessions(root.path()),
            (std::vector<std::string>{root.path() + "/session_2025-12-31_23-59-59_999999_7",
                                      root.path() + "/session_2026-01-01_12-00-00_000000_6",
                                      root.path() + "/session_2026-01-02_00-00-00_000000_5"}));
}

TEST(SessionDirTest, AllSessionsOfAMissingRootIsEmpty) {
  TempDir dir;
  EXPECT_TRUE(AllSessions(dir.path() + "/missing").empty());
}

}  // namespace session_dir_test
}  // namespace torus::cli
