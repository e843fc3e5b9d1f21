#include "torus/head/packages/package_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "torus/common/clock.h"
#include "torus/head/state/journal_test_util.h"
#include "torus/package/pack.h"
#include "torus/package/zip.h"

namespace torus::head {
namespace package_store_test {

using testutil::SharedJournal;
using testutil::TempDir;

using PutOutcome = PackageStore::PutOutcome;

// A small valid archive holding `files` (path -> bytes).
std::string Archive(const TempDir& tmp, const std::map<std::string, std::string>& files) {
  const std::string path = tmp.path() + "/archive.zip";
  auto writer = package::ZipWriter::Create(path);
  EXPECT_TRUE(writer.ok()) << writer.status();
  for (const auto& [name, data] : files) {
    EXPECT_TRUE((*writer)->Add(name, package::EntryKind::kFile, 0644, 1'700'000'000, data).ok());
  }
  EXPECT_TRUE((*writer)->Finish().ok());
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  std::filesystem::remove(path);
  return bytes.str();
}

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class PackageStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Restart(); }

  // A new StateStore and PackageStore over the same journal and directory: a head restart.
  void Restart() {
    packages_.reset();
    store_.reset();
    store_ = std::make_unique<StateStore>(std::make_unique<SharedJournal>(journal_.get()), clock_.WallMillis(),
                                          StateStore::Options{});
    ASSERT_TRUE(store_->Open().ok());
    packages_ = std::make_unique<PackageStore>(store_.get(), &clock_, dir_.path() + "/packages",
                                               PackageStore::Options{.max_bytes = 1 << 20, .unused_grace_ms = 60'000});
    ASSERT_TRUE(packages_->Open().ok());
  }

  // A job naming `uri` as its working_dir, RUNNING until Finish.
  void SubmitJob(const std::string& id, const std::string& uri) {
    Job job;
    job.id = JobId(id);
    job.request.entrypoint = "true";
    job.request.submission_id = id;
    job.request.working_dir = uri;
    job.submit_time_ms = clock_.WallMillis();
    store_->Update([&](Txn& txn) { ASSERT_TRUE(txn.Apply(JobSubmitted{job}).ok()); });
  }
  void Finish(const std::string& id) {
    store_->Update([&](Txn& txn) {
      ASSERT_TRUE(txn.Apply(JobUpdated{JobId(id), JobStatus::kSucceeded, "done", "", 0, clock_.WallMillis()}).ok());
    });
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<Journal> journal_ = NewMemoryJournal();
  std::unique_ptr<StateStore> store_;
  std::unique_ptr<PackageStore> packages_;
};

TEST_F(PackageStoreTest, StoresAnArchiveAndReadsItBackInPieces) {
  const std::string bytes = Archive(dir_, {{"main.py", "print('hi')\n"}});
  auto put = packages_->Put("_ray_pkg_abc.zip", bytes);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(*put, PutOutcome::kStored);
  auto found = packages_->Find("_ray_pkg_abc.zip");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->sha256, package::Sha256Hex(bytes));
  EXPECT_EQ(found->size, bytes.size());
  Package info;
  auto head = packages_->Read("_ray_pkg_abc.zip", 0, 10, &info);
  auto tail = packages_->Read("_ray_pkg_abc.zip", 10, 1 << 20, nullptr);
  ASSERT_TRUE(head.ok() && tail.ok());
  EXPECT_EQ(*head + *tail, bytes);
  EXPECT_EQ(info.sha256, found->sha256);
  EXPECT_EQ(FilesIn(dir_.path() + "/packages"), std::vector<std::string>{"_ray_pkg_abc.zip"});
  EXPECT_EQ(packages_->Read("_ray_pkg_abc.zip", bytes.size() + 1, 10, nullptr).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(packages_->Read("_ray_pkg_nope.zip", 0, 10, nullptr).status().message(),
            "package _ray_pkg_nope.zip is not stored on the head");
}

TEST_F(PackageStoreTest, TheSameBytesAgainAreAlreadyStoredAndOtherBytesConflict) {
  const std::string bytes = Archive(dir_, {{"a.py", "a = 1\n"}});
  ASSERT_EQ(*packages_->Put("_ray_pkg_1.zip", bytes), PutOutcome::kStored);
  EXPECT_EQ(*packages_->Put("_ray_pkg_1.zip", bytes), PutOutcome::kAlreadyStored);
  auto other = packages_->Put("_ray_pkg_1.zip", Archive(dir_, {{"a.py", "a = 2\n"}}));
  EXPECT_EQ(other.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(other.status().message(), "package _ray_pkg_1.zip is already stored with other contents (sha256 " +
                                          package::Sha256Hex(bytes) + "); a package's name is its contents' hash");
}

TEST_F(PackageStoreTest, RefusesBadNamesOversizeBodiesAndBadArchivesLeavingNoFile) {
  const std::string bytes = Archive(dir_, {{"a.py", "a = 1\n"}});
  for (const char* name : {"", "../x.zip", "a/b.zip", ".hidden.zip", "pkg.tar", "sp ace.zip"}) {
    auto put = packages_->Put(name, bytes);
    EXPECT_EQ(put.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(put.status().message().find("use 1-128 of [A-Za-z0-9_.-] ending in \".zip\""), std::string::npos);
  }
  auto big = packages_->Put("_ray_pkg_big.zip", std::string((1 << 20) + 1, 'x'));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(big.status().message(),
            "package _ray_pkg_big.zip is 1048577 bytes; the head takes packages of at most 1048576 bytes");
  auto corrupt = packages_->Put("_ray_pkg_bad.zip", "PK\x03\x04 not really a zip");
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(corrupt.status().message().rfind("package _ray_pkg_bad.zip: ", 0), 0u) << corrupt.status();
  EXPECT_TRUE(FilesIn(dir_.path() + "/packages").empty());
  EXPECT_TRUE(store_->Read([](const ClusterState& s) { return s.packages().empty(); }));
}

TEST_F(PackageStoreTest, PackagesSurviveARestart) {
  const std::string bytes = Archive(dir_, {{"a.py", "a = 1\n"}});
  ASSERT_TRUE(packages_->Put("_ray_pkg_keep.zip", bytes).ok());
  Restart();
  auto found = packages_->Find("_ray_pkg_keep.zip");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->sha256, package::Sha256Hex(bytes));
  EXPECT_EQ(*packages_->Read("_ray_pkg_keep.zip", 0, 1 << 20, nullptr), bytes);
}

TEST_F(PackageStoreTest, OpenRemovesUnrecordedFilesAndForgetsRecordsWithoutFiles) {
  ASSERT_TRUE(packages_->Put("_ray_pkg_gone.zip", Archive(dir_, {{"a.py", "1"}})).ok());
  std::filesystem::remove(dir_.path() + "/packages/_ray_pkg_gone.zip");
  std::ofstream(dir_.path() + "/packages/.upload-123-_ray_pkg_half.zip") << "half";
  Restart();
  EXPECT_FALSE(packages_->Find("_ray_pkg_gone.zip").has_value());
  EXPECT_TRUE(FilesIn(dir_.path() + "/packages").empty());
}

TEST_F(PackageStoreTest, AnUnusedPackageIsRemovedAfterTheGraceAndAUsedOneIsKept) {
  ASSERT_TRUE(packages_->Put("_ray_pkg_idle.zip", Archive(dir_, {{"a.py", "1"}})).ok());
  ASSERT_TRUE(packages_->Put("_ray_pkg_used.zip", Archive(dir_, {{"b.py", "2"}})).ok());
  SubmitJob("job-1", "gcs://_ray_pkg_used.zip");
  clock_.AdvanceMillis(59'999);
  EXPECT_TRUE(packages_->CollectGarbage().empty());
  clock_.AdvanceMillis(1);
  EXPECT_EQ(packages_->CollectGarbage(), std::vector<std::string>{"_ray_pkg_idle.zip"});
  EXPECT_EQ(FilesIn(dir_.path() + "/packages"), std::vector<std::string>{"_ray_pkg_used.zip"});

  // Its user ends: the grace counts from then.
  clock_.AdvanceMillis(600'000);
  EXPECT_TRUE(packages_->CollectGarbage().empty());
  Finish("job-1");
  clock_.AdvanceMillis(59'999);
  EXPECT_TRUE(packages_->CollectGarbage().empty());
  clock_.AdvanceMillis(1);
  EXPECT_EQ(packages_->CollectGarbage(), std::vector<std::string>{"_ray_pkg_used.zip"});
  EXPECT_TRUE(FilesIn(dir_.path() + "/packages").empty());
  Restart();
  EXPECT_FALSE(packages_->Find("_ray_pkg_used.zip").has_value());
}

TEST_F(PackageStoreTest, AskingForAPackageStartsItsGraceAgain) {
  const std::string bytes = Archive(dir_, {{"a.py", "1"}});
  ASSERT_TRUE(packages_->Put("_ray_pkg_asked.zip", bytes).ok());
  clock_.AdvanceMillis(50'000);
  packages_->Touch("_ray_pkg_asked.zip");  // a client's GET found it
  clock_.AdvanceMillis(50'000);
  EXPECT_TRUE(packages_->CollectGarbage().empty());
  EXPECT_EQ(*packages_->Put("_ray_pkg_asked.zip", bytes), PutOutcome::kAlreadyStored);  // so does a PUT of it
  clock_.AdvanceMillis(59'999);
  EXPECT_TRUE(packages_->CollectGarbage().empty());
  clock_.AdvanceMillis(1);
  EXPECT_EQ(packages_->CollectGarbage(), std::vector<std::string>{"_ray_pkg_asked.zip"});
}

TEST(PackageUsesTest, CountsLiveUsersOfJobsAndRunsAndIgnoresPaths) {
  ClusterState state;
  Job job;
  job.id = JobId("j");
  job.request.working_dir = "gcs://w.zip";
  job.request.py_modules = {"gcs://m.zip", "/opt/mods"};
  ASSERT_TRUE(state.Apply(JobSubmitted{job}).ok());
  ASSERT_TRUE(state.Apply(JobUpdated{JobId("j"), JobStatus::kSucceeded, "", "", 0, 5000}).ok());
  train::RunSpec spec;
  spec.scaling.num_workers = 2;
  spec.entrypoint = {"python3", "x.py"};
  spec.run.name = "r";
  spec.run.storage_path = "/tmp/x";
  spec.working_dir = "gcs://w.zip";
  spec.py_modules = {"gcs://r.zip"};
  ASSERT_TRUE(state.Apply(RunSubmitted{RunId("r"), train::RunSpecToJson(spec), "t", GroupId("g"), {}, 100}).ok());
  const auto uses = PackageUses(state);
  ASSERT_EQ(uses.size(), 3u);
  EXPECT_EQ(uses.at("w.zip").live_users, 1);  // the run
  EXPECT_EQ(uses.at("w.zip").last_end_wall_ms, 5000);  // the job
  EXPECT_EQ(uses.at("m.zip").live_users, 0);
  EXPECT_EQ(uses.at("r.zip").live_users, 1);
}

}  // namespace package_store_test
}  // namespace torus::head
