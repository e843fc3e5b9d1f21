#include "torus/head/state/journal.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "torus/head/state/etcd_journal.h"
#include "torus/head/state/etcd_test_util.h"
#include "torus/head/state/journal_test_util.h"

namespace torus::head {
namespace journal_test {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testutil::TempDir;


int Mode(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 07777) : -1;
}

// The same contract for both journals; `reopen` closes the journal and opens the one that holds the same data (a
// SqliteJournal from its directory; the memory journal is only handed back, it has nothing to reopen).
struct Kind {
  std::string name;
  std::function<std::unique_ptr<Journal>(const std::string& dir)> open;
  bool persistent;
};

void PrintTo(const Kind& kind, std::ostream* os) { *os << kind.name; }

class JournalContractTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    ASSERT_FALSE(tmp_.path().empty());
    dir_ = tmp_.path() + "/state";
    journal_ = GetParam().open(dir_);
    ASSERT_NE(journal_, nullptr);
  }
  void Reopen() {
    if (!GetParam().persistent) return;
    journal_.reset();  // releases the lock
    journal_ = GetParam().open(dir_);
    ASSERT_NE(journal_, nullptr);
  }

  TempDir tmp_;
  std::string dir_;
  std::unique_ptr<Journal> journal_;
};

TEST_P(JournalContractTest, AppendedBatchesLoadBackInOrder) {
  auto empty = journal_->Load();
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_FALSE(empty->snapshot.has_value());
  EXPECT_THAT(empty->records, IsEmpty());
  EXPECT_EQ(journal_->records_since_snapshot(), 0u);

  ASSERT_TRUE(journal_->Append({"r1", "r2"}).ok());
  ASSERT_TRUE(journal_->Append({}).ok());
  ASSERT_TRUE(journal_->Append({R"({"message":"it's \"quoted\" ✓"})"}).ok());
  ASSERT_TRUE(journal_->Append({"r4", "r5", "r6"}).ok());
  EXPECT_EQ(journal_->records_since_snapshot(), 6u);

  Reopen();
  auto loaded = journal_->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(loaded->snapshot.has_value());
  EXPECT_THAT(loaded->records, ElementsAre("r1", "r2", R"({"message":"it's \"quoted\" ✓"})", "r4", "r5", "r6"));
  EXPECT_EQ(journal_->records_since_snapshot(), 6u);  // those Load returned count

  ASSERT_TRUE(journal_->Append({"r7"}).ok());
  EXPECT_EQ(journal_->records_since_snapshot(), 7u);
}

TEST_P(JournalContractTest, CompactReplacesTheRecordsBySnapshot) {
  ASSERT_TRUE(journal_->Load().ok());
  ASSERT_TRUE(journal_->Append({"r1", "r2", "r3"}).ok());
  ASSERT_TRUE(journal_->Compact("snapshot-1", journal_->position()).ok());
  EXPECT_EQ(journal_->records_since_snapshot(), 0u);
  ASSERT_TRUE(journal_->Append({"r4"}).ok());
  EXPECT_EQ(journal_->records_since_snapshot(), 1u);

  Reopen();
  auto loaded = journal_->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->snapshot, "snapshot-1");
  EXPECT_THAT(loaded->records, ElementsAre("r4"));
  EXPECT_EQ(journal_->records_since_snapshot(), 1u);

  // A second compaction replaces the first snapshot.
  ASSERT_TRUE(journal_->Compact("snapshot-2", journal_->position()).ok());
  EXPECT_EQ(journal_->records_since_snapshot(), 0u);
  Reopen();
  loaded = journal_->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->snapshot, "snapshot-2");
  EXPECT_THAT(loaded->records, IsEmpty());
  EXPECT_EQ(journal_->records_since_snapshot(), 0u);
}

TEST_P(JournalContractTest, CompactKeepsTheRecordsAppendedAfterItsPosition) {
  ASSERT_TRUE(journal_->Load().ok());
  ASSERT_TRUE(journal_->Append({"r1", "r2"}).ok());
  uint64_t at = journal_->position();
  ASSERT_TRUE(journal_->Append({"r3"}).ok());
  ASSERT_TRUE(journal_->Append({"r4"}).ok());
  ASSERT_TRUE(journal_->Compact("s-1", at).ok());
  EXPECT_EQ(journal_->records_since_snapshot(), 2u);
  Reopen();
  auto loaded = journal_->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->snapshot, "s-1");
  EXPECT_THAT(loaded->records, ElementsAre("r3", "r4"));

  // Everything covered, then more records, a restart, and another partial compaction.
  ASSERT_TRUE(journal_->Compact("s-2", journal_->position()).ok());
  ASSERT_TRUE(journal_->Append({"r5"}).ok());
  Reopen();
  loaded = journal_->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->snapshot, "s-2");
  EXPECT_THAT(loaded->records, ElementsAre("r5"));
  at = journal_->position();
  ASSERT_TRUE(journal_->Append({"r6", "r7"}).ok());
  ASSERT_TRUE(journal_->Compact("s-3", at).ok());
  EXPECT_EQ(journal_->records_since_snapshot(), 2u);
  Reopen();
  loaded = journal_->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->snapshot, "s-3");
  EXPECT_THAT(loaded->records, ElementsAre("r6", "r7"));
  EXPECT_EQ(journal_->records_since_snapshot(), 2u);
}

TEST_P(JournalContractTest, LargeRecordsAndSnapshotsComeBackWhole) {
  ASSERT_TRUE(journal_->Load().ok());
  const std::string big(3 << 20, 'x');  // over what one etcd request carries (1.5 MiB)
  ASSERT_TRUE(journal_->Append({big, "small"}).ok());
  ASSERT_TRUE(journal_->Compact(big + "!", journal_->position()).ok());
  ASSERT_TRUE(journal_->Append({big + "?"}).ok());
  Reopen();
  auto loaded = journal_->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->snapshot, big + "!");
  ASSERT_EQ(loaded->records.size(), 1u);
  EXPECT_EQ(loaded->records[0], big + "?");
}

std::unique_ptr<Journal> OpenSqlite(const std::string& dir, JournalSync sync) {
  auto journal = OpenSqliteJournal(dir, sync);
  EXPECT_TRUE(journal.ok()) << journal.status();
  return journal.ok() ? *std::move(journal) : nullptr;
}

// One etcd for the contract's cases, each under a prefix of its own (the test's directory).
testutil::EtcdServer& SharedEtcd() {
  static auto* etcd = new testutil::EtcdServer();  // killed with this process (PR_SET_PDEATHSIG)
  return *etcd;
}

std::unique_ptr<Journal> OpenEtcd(const std::string& dir) {
  EXPECT_EQ(SharedEtcd().error(), "");
  auto target = ParseEtcdTarget(SharedEtcd().Url(dir));
  EXPECT_TRUE(target.ok()) << target.status();
  if (!target.ok()) return nullptr;
  auto journal = OpenEtcdJournal(*target);
  EXPECT_TRUE(journal.ok()) << journal.status();
  return journal.ok() ? *std::move(journal) : nullptr;
}

INSTANTIATE_TEST_SUITE_P(
    Journals, JournalContractTest,
    ::testing::Values(
        Kind{"Sqlite", [](const std::string& dir) { return OpenSqlite(dir, JournalSync::kNormal); }, true},
        Kind{"SqliteFullSync", [](const std::string& dir) { return OpenSqlite(dir, JournalSync::kFull); }, true},
        Kind{"Memory", [](const std::string&) { return NewMemoryJournal(); }, false},
        Kind{"Etcd", OpenEtcd, true}),
    [](const ::testing::TestParamInfo<Kind>& info) { return info.param.name; });

TEST(SqliteJournalTest, CreatesItsDirectoryPrivateAndNamesItsFile) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string dir = tmp.path() + "/a/b/state";
  auto journal = OpenSqliteJournal(dir, JournalSync::kNormal);
  ASSERT_TRUE(journal.ok()) << journal.status();
  EXPECT_EQ(Mode(dir), 0700);
  EXPECT_TRUE(fs::exists(dir + "/journal.db"));
  EXPECT_TRUE(fs::exists(dir + "/head.lock"));
  EXPECT_EQ((*journal)->location(), dir + "/journal.db");
  EXPECT_EQ(NewMemoryJournal()->location(), "in memory");

  // An existing directory is made private too: the journal holds run tokens.
  const std::string open_dir = tmp.path() + "/open";
  ASSERT_TRUE(fs::create_directory(open_dir));
  ASSERT_EQ(chmod(open_dir.c_str(), 0755), 0);
  ASSERT_TRUE(OpenSqliteJournal(open_dir, JournalSync::kNormal).ok());
  EXPECT_EQ(Mode(open_dir), 0700);
}

TEST(SqliteJournalTest, OneHeadAtATimePerDirectory) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string dir = tmp.path() + "/state";
  auto first = OpenSqliteJournal(dir, JournalSync::kNormal);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->Append({"r1"}).ok());

  auto second = OpenSqliteJournal(dir, JournalSync::kNormal);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(),
            "the state directory " + dir + " is in use by another torus-head (pid " + std::to_string(getpid()) + ")");
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("in use by another torus-head"));

  // The refused open did not disturb the holder, and the lock goes with it.
  ASSERT_TRUE((*first)->Append({"r2"}).ok());
  first->reset();
  auto third = OpenSqliteJournal(dir, JournalSync::kNormal);
  ASSERT_TRUE(third.ok()) << third.status();
  auto loaded = (*third)->Load();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_THAT(loaded->records, ElementsAre("r1", "r2"));
}

TEST(SqliteJournalTest, UnusableDirectoryIsAnError) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string file = tmp.path() + "/file";
  ASSERT_TRUE(std::ofstream(file).good());
  auto journal = OpenSqliteJournal(file + "/state", JournalSync::kNormal);
  EXPECT_EQ(journal.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(journal.status().message()),
              HasSubstr("cannot create the state directory " + file + "/state: "));
}

}  // namespace journal_test
}  // namespace torus::head
