#include "torus/node/package_cache.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "torus/package/pack.h"
#include "torus/package/zip.h"

namespace torus::node {
namespace package_cache_test {

class PackageCacheTest : public ::testing::Test {
 protected:
  PackageCacheTest() {
    std::string pattern = (std::filesystem::temp_directory_path() / "torus_pkgcache_XXXXXX").string();
    dir_ = ::mkdtemp(pattern.data());
    archive_ = MakeArchive({{"main.py", "print('hi')\n"}, {"lib/util.py", "X = 1\n"}});
  }
  ~PackageCacheTest() override { std::filesystem::remove_all(dir_); }

  std::string MakeArchive(const std::map<std::string, std::string>& files) {
    const std::string path = dir_ + "/src.zip";
    auto w = package::ZipWriter::Create(path);
    for (const auto& [name, data] : files) {
      EXPECT_TRUE((*w)->Add(name, package::EntryKind::kFile, 0644, 1'700'000'000, data).ok());
    }
    EXPECT_TRUE((*w)->Finish().ok());
    std::ifstream in(path, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    std::filesystem::remove(path);
    return bytes.str();
  }

  // A head that serves `bytes` as package "p.zip" (recorded with `sha`), 7 bytes a piece.
  PackageCache Cache(const std::string& bytes, const std::string& sha, PackageCache::Options options = {}) {
    return PackageCache(dir_ + "/cache", [this, bytes, sha](const std::string& name, uint64_t offset, uint32_t) {
      ++fetches_;
      EXPECT_EQ(name, "p.zip");
      return absl::StatusOr<PackageCache::Piece>(
          PackageCache::Piece{bytes.substr(std::min<uint64_t>(offset, bytes.size()), 7), bytes.size(), sha});
    }, options);
  }

  rpc::PackageRef Ref(const std::string& bytes) const {
    rpc::PackageRef ref;
    ref.set_name("p.zip");
    ref.set_sha256(package::Sha256Hex(bytes));
    ref.set_size(bytes.size());
    return ref;
  }

  std::vector<std::string> CacheEntries() const {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_ + "/cache", ec)) {
      names.push_back(e.path().filename().string());
    }
    return names;
  }

  std::string dir_;
  std::string archive_;
  std::atomic<int> fetches_{0};
};

TEST_F(PackageCacheTest, FetchesInPiecesUnpacksOnceAndServesFromTheCacheAfter) {
  PackageCache cache = Cache(archive_, package::Sha256Hex(archive_));
  const rpc::PackageRef ref = Ref(archive_);
  EXPECT_FALSE(cache.Has(ref));
  auto dir = cache.Acquire(ref);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, dir_ + "/cache/" + ref.sha256());
  std::ifstream util(*dir + "/lib/util.py");
  std::string text((std::istreambuf_iterator<char>(util)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "X = 1\n");
  const int pieces = fetches_.load();
  EXPECT_EQ(pieces, static_cast<int>((archive_.size() + 6) / 7));
  EXPECT_TRUE(cache.Has(ref));
  EXPECT_EQ(*cache.Acquire(ref), *dir);
  EXPECT_EQ(fetches_.load(), pieces);
  EXPECT_EQ(CacheEntries(), std::vector<std::string>{ref.sha256()});  // the fetched archive is gone
}

TEST_F(PackageCacheTest, ConcurrentStartsShareOneFetch) {
  PackageCache cache = Cache(archive_, package::Sha256Hex(archive_));
  const rpc::PackageRef ref = Ref(archive_);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] { ok += cache.Acquire(ref).ok() ? 1 : 0; });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(fetches_.load(), static_cast<int>((archive_.size() + 6) / 7));
}

TEST_F(PackageCacheTest, StartsWaitingOnAFailedFetchShareItsErrorAndALaterStartTriesAgain) {
  absl::Mutex mu;
  bool release = false;
  std::atomic<int> calls{0};
  PackageCache cache(dir_ + "/cache", [&](const std::string&, uint64_t, uint32_t) -> absl::StatusOr<PackageCache::Piece> {
    ++calls;
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&release));
    return absl::UnavailableError("the head went away");
  });
  const rpc::PackageRef ref = Ref(archive_);
  std::vector<std::thread> threads;
  std::atomic<int> unavailable{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      if (absl::IsUnavailable(cache.Acquire(ref).status())) ++unavailable;
    });
  }
  while (calls.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the other starts join the fetch under way
  {
    absl::MutexLock lock(&mu);
    release = true;
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(unavailable.load(), 4);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(absl::IsUnavailable(cache.Acquire(ref).status()));
  EXPECT_EQ(calls.load(), 2);
}

TEST_F(PackageCacheTest, UnusedPackagesAreEvictedLeastRecentlyUsedFirstAndNeverOneInUse) {
  std::map<std::string, std::string> served;
  for (const char* name : {"a", "b", "c"}) {
    served[std::string(name) + ".zip"] = MakeArchive({{std::string(name) + ".txt", std::string(1000, name[0])}});
  }
  std::filesystem::create_directories(dir_ + "/cache/left-by-an-earlier-agent");
  PackageCache cache(
      dir_ + "/cache",
      [&](const std::string& name, uint64_t offset, uint32_t max) -> absl::StatusOr<PackageCache::Piece> {
        const std::string& bytes = served.at(name);
        return PackageCache::Piece{bytes.substr(offset, max), bytes.size(), package::Sha256Hex(bytes)};
      },
      {.max_bytes = 2500});
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/cache/left-by-an-earlier-agent"));
  auto ref = [&](const std::string& name) {
    rpc::PackageRef r;
    r.set_name(name);
    r.set_sha256(package::Sha256Hex(served.at(name)));
    r.set_size(served.at(name).size());
    return r;
  };
  ASSERT_TRUE(cache.Acquire(ref("a.zip")).ok());
  ASSERT_TRUE(cache.Acquire(ref("b.zip")).ok());
  EXPECT_EQ(cache.bytes(), 2000u);
  cache.Release(ref("a.zip").sha256());
  cache.Release(ref("b.zip").sha256());
  EXPECT_TRUE(cache.Has(ref("a.zip")));  // unused, kept for the next worker while there is room

  ASSERT_TRUE(cache.Acquire(ref("c.zip")).ok());  // 3000 > 2500: a, the least recently used, goes
  EXPECT_FALSE(cache.Has(ref("a.zip")));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/cache/" + ref("a.zip").sha256()));
  EXPECT_TRUE(cache.Has(ref("b.zip")));
  EXPECT_EQ(cache.bytes(), 2000u);

  // In use, nothing goes, whatever the size.
  ASSERT_TRUE(cache.Acquire(ref("b.zip")).ok());
  ASSERT_TRUE(cache.Acquire(ref("a.zip")).ok());
  EXPECT_EQ(cache.bytes(), 3000u);
  cache.Release(ref("a.zip").sha256());  // a is the only unused one now
  EXPECT_FALSE(cache.Has(ref("a.zip")));
  EXPECT_TRUE(cache.Has(ref("b.zip")) && cache.Has(ref("c.zip")));
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::directory_iterator(dir_ + "/cache")) left.push_back(e.path().filename());
  std::sort(left.begin(), left.end());
  std::vector<std::string> want = {ref("b.zip").sha256(), ref("c.zip").sha256()};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(left, want);
}

TEST_F(PackageCacheTest, BytesOtherThanTheWorkerWasStartedWithAreRefused) {
  const std::string other = MakeArchive({{"main.py", "print('other')\n"}});
  PackageCache cache = Cache(other, package::Sha256Hex(other));
  auto dir = cache.Acquire(Ref(archive_));
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(dir.status().message().find("package p.zip: the head holds other bytes (sha256 " +
                                        package::Sha256Hex(other)),
            std::string::npos)
      << dir.status();
  EXPECT_TRUE(CacheEntries().empty());
}

TEST_F(PackageCacheTest, BytesThatDoNotMatchTheirHashAreRefused) {
  std::string corrupted = archive_;
  corrupted[corrupted.size() / 2] ^= 0x55;
  // The head claims the right hash but sends other bytes (a disk error, say).
  PackageCache cache = Cache(corrupted, package::Sha256Hex(archive_));
  auto dir = cache.Acquire(Ref(archive_));
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(dir.status().message(), "package p.zip: fetched " + std::to_string(archive_.size()) +
                                        " bytes with sha256 " + package::Sha256Hex(corrupted) + "; expected " +
                                        std::to_string(archive_.size()) + " bytes with sha256 " +
                                        package::Sha256Hex(archive_));
  EXPECT_TRUE(CacheEntries().empty());
}

TEST_F(PackageCacheTest, AnArchiveThatEscapesIsRefusedAndLeavesNothing) {
  // A zip whose entry climbs out: written by hand through the writer's raw name is refused by the writer's
  // contract, so build it with Python's zipfile (/usr/bin/python3 is one of scripts/setup.sh's packages).
  const std::string script = dir_ + "/evil.py";
  std::ofstream(script) << "import zipfile\nwith zipfile.ZipFile('" << dir_
                        << "/evil.zip', 'w') as z:\n    z.writestr('../../escaped.txt', 'x')\n";
  ASSERT_EQ(std::system(("/usr/bin/python3 " + script).c_str()), 0) << "/usr/bin/python3 could not write the zip";
  std::ifstream in(dir_ + "/evil.zip", std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  PackageCache cache = Cache(bytes.str(), package::Sha256Hex(bytes.str()));
  auto dir = cache.Acquire(Ref(bytes.str()));
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(dir.status().message().rfind("package p.zip: ", 0), 0u) << dir.status();
  EXPECT_NE(dir.status().message().find("../../escaped.txt"), std::string::npos) << dir.status();
  EXPECT_TRUE(CacheEntries().empty());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/escaped.txt"));
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir_).parent_path() / "escaped.txt"));
}

TEST_F(PackageCacheTest, AMalformedReferenceIsInvalid) {
  PackageCache cache = Cache(archive_, package::Sha256Hex(archive_));
  rpc::PackageRef ref = Ref(archive_);
  ref.set_sha256("../../etc");
  EXPECT_EQ(cache.Acquire(ref).status().message(),
            "package reference \"p.zip\" needs a name and a sha256 of 64 lowercase hex digits");
  EXPECT_EQ(fetches_.load(), 0);
}

}  // namespace package_cache_test
}  // namespace torus::node
