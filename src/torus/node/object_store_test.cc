#include "torus/node/object_store.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"

namespace torus::node {
namespace object_store_test {

using std::chrono::milliseconds;

std::chrono::steady_clock::time_point Soon(int ms = 0) { return std::chrono::steady_clock::now() + milliseconds(ms); }

class ObjectStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / absl::StrCat("object_store_test_", getpid(), "_", n_++)).string();
  }
  std::unique_ptr<ObjectStore> Open(uint64_t capacity) {
    auto store = ObjectStore::Open(dir_, capacity);
    EXPECT_TRUE(store.ok()) << store.status();
    return std::move(*store);
  }
  // Creates, fills with `fill` and seals.
  void Write(ObjectStore& store, const std::string& id, uint64_t size, bool primary, char fill = 'x',
             const std::string& owner = "10.0.0.1:5000") {
    auto path = store.Create(id, size, StoreOwner{.address = owner}, primary);
    ASSERT_TRUE(path.ok()) << path.status();
    std::ofstream(*path, std::ios::binary) << std::string(size, fill);
    ASSERT_TRUE(store.Seal(id).ok());
  }
  std::string dir_;
  static inline int n_ = 0;
};

TEST_F(ObjectStoreTest, AnObjectIsAFileOfItsSizeReadableOnceSealed) {
  auto store = Open(1 << 20);
  auto path = store->Create("obj-1", 1000, StoreOwner{.address = "a:1"}, true);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir_ + "/" + ObjectFileName("obj-1"));
  EXPECT_EQ(std::filesystem::file_size(*path), 1000u);
  // Not sealed yet: a reader waits, then is told it is still being written.
  EXPECT_EQ(store->Get("obj-1", Soon(10)).status().code(), absl::StatusCode::kDeadlineExceeded);
  std::thread sealer([&] {
    std::this_thread::sleep_for(milliseconds(20));
    ASSERT_TRUE(store->Seal("obj-1").ok());
  });
  auto got = store->Get("obj-1", Soon(5000));
  sealer.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->path, *path);
  EXPECT_EQ(got->size, 1000u);
  EXPECT_TRUE(got->primary);
  EXPECT_EQ(store->stats().used, 1000u);
  EXPECT_EQ(store->stats().primary_bytes, 1000u);
}

TEST_F(ObjectStoreTest, RefusesBadIdsDuplicatesAndUnknownSeals) {
  auto store = Open(1 << 20);
  EXPECT_EQ(store->Create("", 10, {}, true).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Create(std::string(65, 'x'), 10, {}, true).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(store->Create("a", 10, {}, true).ok());
  EXPECT_EQ(store->Create("a", 10, {}, true).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store->Seal("b").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Get("b", Soon()).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ObjectStoreTest, AFullStoreRefusesWithWhatItHolds) {
  auto store = Open(3 << 20);
  Write(*store, "a", 2 << 20, true);
  auto refused = store->Create("b", 2 << 20, {}, true);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().message(),
            "object store full: an object of 2.0 MiB does not fit; this node's store holds 2.0 MiB of 3.0 MiB in 1 "
            "objects (free objects by dropping their refs, or start the node with a larger --object-store-memory)");
  EXPECT_FALSE(store->Contains("b"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/" + ObjectFileName("b")));
  // Larger than the whole store.
  EXPECT_EQ(store->Create("c", 4 << 20, {}, true).status().code(), absl::StatusCode::kResourceExhausted);
  // Freed room is usable again.
  store->Delete({"a"});
  EXPECT_TRUE(store->Create("b", 2 << 20, {}, true).ok());
}

TEST_F(ObjectStoreTest, ACreationWaitsUntilItsDeadlineForADeletionToMakeRoom) {
  auto store = Open(1000);
  Write(*store, "a", 800, true);
  std::thread deleter([&] {
    std::this_thread::sleep_for(milliseconds(30));
    store->Delete({"a"});
  });
  auto created = store->Create("b", 500, {}, true, Soon(10'000));
  deleter.join();
  EXPECT_TRUE(created.ok()) << created.status();
  // Nothing frees room: refused at the deadline.
  EXPECT_EQ(store->Create("c", 800, {}, true, Soon(20)).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(ObjectStoreTest, CopiesAreEvictedLeastRecentlyReadFirstButPrimariesStay) {
  auto store = Open(4000);
  Write(*store, "primary", 1000, true);
  Write(*store, "copy-old", 1000, false);
  Write(*store, "copy-new", 1000, false);
  ASSERT_TRUE(store->Get("copy-old", Soon()).ok());  // now the more recently read of the two
  Write(*store, "next", 2000, true);
  EXPECT_TRUE(store->Contains("primary"));
  EXPECT_TRUE(store->Contains("copy-old"));
  EXPECT_FALSE(store->Contains("copy-new"));
  EXPECT_EQ(store->stats().evicted, 1u);
  // Only primaries left to make room with: refused.
  store->Delete({"copy-old"});
  EXPECT_EQ(store->Create("big", 2000, {}, true).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(ObjectStoreTest, AnUnsealedCopyIsNeverEvicted) {
  auto store = Open(2000);
  ASSERT_TRUE(store->Create("pulling", 1500, {}, false).ok());
  EXPECT_EQ(store->Create("x", 1000, {}, true).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(store->Contains("pulling"));
}

TEST_F(ObjectStoreTest, DeleteReturnsTheCopyHoldersAndAMappedReaderKeepsItsBytes) {
  auto store = Open(1 << 20);
  Write(*store, "a", 6, true, 'q');
  store->AddCopyHolder("a", "10.0.0.2:7000");
  store->AddCopyHolder("a", "10.0.0.3:7000");
  std::ifstream reader(dir_ + "/" + ObjectFileName("a"), std::ios::binary);  // an open reader, as a mapping is
  EXPECT_EQ(store->Delete({"a", "unknown"}), (std::set<std::string>{"10.0.0.2:7000", "10.0.0.3:7000"}));
  EXPECT_FALSE(store->Contains("a"));
  EXPECT_EQ(store->stats().used, 0u);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(reader), {}), "qqqqqq");
}

TEST_F(ObjectStoreTest, AnOwnersObjectsGoTogether) {
  auto store = Open(1 << 20);
  Write(*store, "a1", 10, true, 'x', "owner-a:1");
  Write(*store, "a2", 10, false, 'x', "owner-a:1");
  Write(*store, "b1", 10, true, 'x', "owner-b:1");
  ASSERT_EQ(store->Owners().size(), 2u);
  EXPECT_EQ(store->DeleteOwnedBy("owner-a:1"), 2u);
  EXPECT_FALSE(store->Contains("a1"));
  EXPECT_FALSE(store->Contains("a2"));
  EXPECT_TRUE(store->Contains("b1"));
  ASSERT_EQ(store->Owners().size(), 1u);
  EXPECT_EQ(store->Owners()[0].address, "owner-b:1");
}

TEST_F(ObjectStoreTest, SamplesCountPrimariesAndCopiesApart) {
  auto store = Open(10'000);
  Write(*store, "p", 1000, true);
  Write(*store, "c", 300, false);
  std::map<std::string, double> got;
  for (const AgentSample& s : StoreSamples(store->stats())) {
    got[s.labels.empty() ? s.name : absl::StrCat(s.name, "/", s.labels.at("kind"))] = s.value;
  }
  EXPECT_EQ(got, (std::map<std::string, double>{{"torus_node_object_store_bytes/copies", 300},
                                                 {"torus_node_object_store_bytes/primary", 1000},
                                                 {"torus_node_object_store_capacity_bytes", 10'000},
                                                 {"torus_node_object_store_evictions_total", 0},
                                                 {"torus_node_object_store_objects", 2}}));
}

TEST_F(ObjectStoreTest, AbortFreesTheRoomAndTheStoreRemovesItsDirectory) {
  {
    auto store = Open(1000);
    ASSERT_TRUE(store->Create("a", 1000, {}, true).ok());
    store->Abort("a");
    EXPECT_FALSE(store->Contains("a"));
    EXPECT_TRUE(store->Create("b", 1000, {}, true).ok());
    EXPECT_TRUE(std::filesystem::exists(dir_));
  }
  EXPECT_FALSE(std::filesystem::exists(dir_));
}

TEST(RemoveLeftoverStores, RemovesOnlyTheDirectoriesOfDeadAgents) {
  const auto parent = std::filesystem::temp_directory_path() / absl::StrCat("leftover_stores_", getpid());
  std::filesystem::create_directories(parent);
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);  // a pid that no longer exists
  const auto dead = parent / absl::StrCat("torus-objects-n1-", child);
  const auto live = parent / absl::StrCat("torus-objects-n2-", getpid());
  const auto other = parent / absl::StrCat("something-else-", child);
  for (const auto& d : {dead, live, other}) std::filesystem::create_directories(d / "sub");
  EXPECT_EQ(RemoveLeftoverStores(parent.string(), "torus-objects-"), 1);
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_TRUE(std::filesystem::exists(other));
  std::filesystem::remove_all(parent);
}

}  // namespace object_store_test
}  // namespace torus::node
