#include "torus/package/pack.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torus/package/unpack.h"
#include "torus/package/zip.h"

namespace torus::package {
namespace pack_test {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& data) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << data;
}

void SetMtime(const std::string& path, time_t t) {
  const struct timespec times[2] = {{t, 0}, {t, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << path;
}

class PackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "torus_pack_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/mymod";
    fs::create_directory(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }

  void Write(const std::map<std::string, std::string>& files) {
    for (const auto& [path, data] : files) WriteFile(dir_ + "/" + path, data);
  }

  absl::StatusOr<Packed> Pack(const PackOptions& options = PackOptions{}, const std::string& out = "out.zip") {
    return PackDirectory(dir_, root_ + "/" + out, options);
  }

  // The paths in a packed archive, in archive order.
  std::vector<std::string> Paths(const Packed& packed) {
    const std::string zip = ReadFile(packed.zip_path);
    auto entries = ReadZipDirectory(zip, ZipLimits{});
    EXPECT_TRUE(entries.ok()) << entries.status();
    std::vector<std::string> paths;
    for (const ZipEntryInfo& e : *entries) paths.push_back(e.path);
    return paths;
  }

  std::string root_;
  std::string dir_;
};

TEST_F(PackTest, SameTreeGivesTheSameNameWhateverTheTimes) {
  Write({{"a.py", "print(1)\n"}, {"pkg/__init__.py", ""}, {"pkg/data.bin", std::string(5000, 'd')}});
  fs::create_symlink("a.py", dir_ + "/link");
  auto first = Pack(PackOptions{}, "1.zip");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(first->name, MatchesRegex("_torus_pkg_[0-9a-f]{32}\\.zip"));
  EXPECT_EQ(first->zip_path, root_ + "/1.zip");
  EXPECT_EQ(first->size, fs::file_size(first->zip_path));
  EXPECT_EQ(first->files, 3u);

  for (const char* p : {"a.py", "pkg/__init__.py", "pkg/data.bin", "pkg", "link", ""}) {
    SetMtime(dir_ + "/" + p, 1000000000);
  }
  auto second = Pack(PackOptions{}, "2.zip");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->name, first->name);
  EXPECT_THAT(Paths(*second), ElementsAreArray({"a.py", "link", "pkg/", "pkg/__init__.py", "pkg/data.bin"}));
}

TEST_F(PackTest, TheNameWithoutAnArchiveIsTheArchivesName) {
  Write({{"a.py", "print(1)\n"}, {"pkg/data.bin", std::string(5000, 'd')}, {"skip.log", "x"}});
  const PackOptions options{.excludes = {"*.log"}, .include_parent_dir = true};
  auto packed = Pack(options, "1.zip");
  ASSERT_TRUE(packed.ok()) << packed.status();
  auto name = PackageNameOfDirectory(dir_, options);
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(*name, packed->name);
  Write({{"a.py", "print(2)\n"}});
  EXPECT_NE(*PackageNameOfDirectory(dir_, options), packed->name);
  EXPECT_EQ(PackageNameOfDirectory(dir_ + "/a.py", options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PackTest, TheStampChangesWithAnyChangeOfATreeAndNotOtherwise) {
  Write({{"a.py", "print(1)\n"}, {"pkg/b.py", "b"}, {"skip.log", "x"}});
  const PackOptions options{.excludes = {"*.log"}};
  auto first = StampDirectory(dir_, options);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT(first->fingerprint, MatchesRegex("[0-9a-f]{64}"));
  EXPECT_GT(first->newest_change_ns, 0);
  EXPECT_EQ(StampDirectory(dir_, options)->fingerprint, first->fingerprint);
  Write({{"skip.log", "excluded, so not part of the tree"}});
  EXPECT_EQ(StampDirectory(dir_, options)->fingerprint, first->fingerprint);
  // Same size: the times tell (the kernel stamps files with a clock of a few ms' ticks, so the rewrite waits one out;
  // UploadDirectory trusts only trees settled for 2 s for the same reason).
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  Write({{"a.py", "print(2)\n"}});
  const std::string changed = StampDirectory(dir_, options)->fingerprint;
  EXPECT_NE(changed, first->fingerprint);
  Write({{"pkg/c.py", ""}});
  EXPECT_NE(StampDirectory(dir_, options)->fingerprint, changed);
  EXPECT_EQ(StampDirectory(dir_ + "/nope", options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PackTest, IncompressibleFilesAreStored) {
  std::string noise(100'000, '\0');
  uint32_t x = 12345;
  for (char& c : noise) {
    x = x * 1664525 + 1013904223;
    c = static_cast<char>(x >> 24);
  }
  Write({{"noise.bin", noise}, {"text.txt", std::string(100'000, 'a')}});
  auto packed = Pack(PackOptions{}, "1.zip");
  ASSERT_TRUE(packed.ok()) << packed.status();
  std::ifstream in(packed->zip_path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto entries = ReadZipDirectory(bytes, ZipLimits{});
  ASSERT_TRUE(entries.ok());
  for (const ZipEntryInfo& e : *entries) {
    EXPECT_EQ(e.method, e.path == "noise.bin" ? 0 : 8) << e.path;
    EXPECT_EQ(*ReadZipEntry(bytes, e), e.path == "noise.bin" ? noise : std::string(100'000, 'a'));
  }
}

TEST_F(PackTest, ContentKindAndExecuteBitChangeTheName) {
  Write({{"a.py", "print(1)\n"}, {"b/c.txt", "c"}});
  const std::string base = Pack()->name;
  std::vector<std::string> names = {base};
  Write({{"a.py", "print(2)\n"}});
  names.push_back(Pack()->name);
  fs::permissions(dir_ + "/a.py", fs::perms::owner_exec, fs::perm_options::add);
  names.push_back(Pack()->name);
  fs::create_directory(dir_ + "/empty");
  names.push_back(Pack()->name);
  fs::rename(dir_ + "/b/c.txt", dir_ + "/b/d.txt");
  names.push_back(Pack()->name);
  fs::remove(dir_ + "/b/d.txt");
  fs::create_symlink("c", dir_ + "/b/d.txt");  // the same path as a symlink
  names.push_back(Pack()->name);
  for (size_t i = 0; i < names.size(); ++i) {
    for (size_t j = i + 1; j < names.size(); ++j) EXPECT_NE(names[i], names[j]) << i << " " << j;
  }
}

TEST_F(PackTest, UnpacksToTheSameTree) {
  Write({{"run.sh", "#!/bin/sh\n"}, {"lib/m.py", "x = 1\n"}});
  fs::permissions(dir_ + "/run.sh", fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
  fs::create_directory(dir_ + "/empty");
  fs::create_symlink("../run.sh", dir_ + "/lib/run");
  auto packed = Pack();
  ASSERT_TRUE(packed.ok()) << packed.status();
  const std::string dest = root_ + "/dest";
  ASSERT_TRUE(UnpackZip(ReadFile(packed->zip_path), dest, ZipLimits{}).ok());
  EXPECT_EQ(ReadFile(dest + "/run.sh"), "#!/bin/sh\n");
  EXPECT_EQ(fs::status(dest + "/run.sh").permissions() & fs::perms::owner_exec, fs::perms::owner_exec);
  EXPECT_EQ(fs::status(dest + "/lib/m.py").permissions() & fs::perms::owner_exec, fs::perms::none);
  EXPECT_EQ(fs::read_symlink(dest + "/lib/run"), "../run.sh");
  EXPECT_TRUE(fs::is_directory(dest + "/empty"));
}

TEST_F(PackTest, WritesTheFilesMtimes) {
  Write({{"a", "a"}});
  SetMtime(dir_ + "/a", 1000000000);
  auto packed = Pack();
  ASSERT_TRUE(packed.ok());
  const std::string zip = ReadFile(packed->zip_path);
  const time_t t = 1000000000;
  struct tm tm {};
  localtime_r(&t, &tm);
  const auto get16 = [&](size_t at) { return static_cast<uint8_t>(zip[at]) | static_cast<uint8_t>(zip[at + 1]) << 8; };
  EXPECT_EQ(get16(10), tm.tm_hour << 11 | tm.tm_min << 5 | tm.tm_sec / 2);
  EXPECT_EQ(get16(12), (tm.tm_year - 80) << 9 | (tm.tm_mon + 1) << 5 | tm.tm_mday);
}

TEST_F(PackTest, HonoursExcludesAndNestedGitignores) {
  Write({{"a.py", ""},
         {"a.pyc", ""},
         {"build/x", ""},
         {"src/build/y", ""},
         {"data/d", ""},
         {"src/data/e", ""},
         {"logs/1.txt", ""},
         {"logs/deep/2.txt", ""},
         {"src/logs/3.txt", ""},
         {"tmp/t", ""},
         {"src/tmp/t", ""},
         {".git/config", ""},
         {".gitignore", "# top\n*.pyc\n/build\n"},
         {"sub/.gitignore", "*.log\n!important.log\n!keep.pyc\n"},
         {"sub/x.log", ""},
         {"sub/important.log", ""},
         {"sub/deeper/y.log", ""},
         {"sub/keep.pyc", ""},
         {"sub/other.pyc", ""},
         {"x.log", ""}});
  PackOptions options;
  options.excludes = {"data/", "logs/*.txt", "**/tmp"};
  auto packed = Pack(options);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_THAT(Paths(*packed),
              ElementsAreArray({".gitignore", "a.py", "logs/", "logs/deep/", "logs/deep/2.txt", "src/", "src/build/",
                                "src/build/y", "src/logs/", "src/logs/3.txt", "sub/", "sub/.gitignore", "sub/deeper/",
                                "sub/important.log", "sub/keep.pyc", "x.log"}));
  EXPECT_EQ(packed->files, 9u);

  options.use_gitignore = false;
  options.excludes = {};
  packed = Pack(options);
  ASSERT_TRUE(packed.ok()) << packed.status();
  const std::vector<std::string> paths = Paths(*packed);
  EXPECT_THAT(paths, ::testing::Contains("a.pyc"));
  EXPECT_THAT(paths, ::testing::Contains("sub/x.log"));
  EXPECT_THAT(paths, ::testing::Not(::testing::Contains(".git/config")));
  EXPECT_THAT(paths, ::testing::Not(::testing::Contains(".git/")));
}

TEST_F(PackTest, IncludeParentDirPrefixesTheEntries) {
  Write({{"__init__.py", ""}, {"sub/m.py", "m"}});
  PackOptions options;
  options.include_parent_dir = true;
  options.excludes = {"/sub/m.py"};  // still relative to the packed directory
  auto packed = PackDirectory(dir_ + "/", root_ + "/out.zip", options);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_THAT(Paths(*packed), ElementsAreArray({"mymod/__init__.py", "mymod/sub/"}));
  EXPECT_NE(packed->name, Pack()->name);
}

TEST_F(PackTest, RefusesArchivesOverMaxBytes) {
  std::mt19937 gen(1);
  std::string noise(10000, '\0');
  for (char& c : noise) c = static_cast<char>(gen());
  Write({{"a.txt", "small"}, {"noise.bin", noise}});
  PackOptions options;
  options.max_bytes = 1000;
  absl::Status status = Pack(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("the package of " + dir_ + " is larger than the limit of 1000 bytes"));
  EXPECT_FALSE(fs::exists(root_ + "/out.zip"));

  // Over the limit only once the central directory is written.
  options.max_bytes = 1ull << 30;
  fs::remove(dir_ + "/noise.bin");
  const uint64_t size = Pack(options)->size;
  options.max_bytes = size - 1;
  status = Pack(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("(", size, " bytes)")));
  EXPECT_FALSE(fs::exists(root_ + "/out.zip"));
}

TEST_F(PackTest, SkipsSpecialFilesAndTheArchiveItself) {
  Write({{"a", "a"}});
  ASSERT_EQ(::mkfifo((dir_ + "/fifo").c_str(), 0644), 0);
  auto packed = PackDirectory(dir_, dir_ + "/self.zip", PackOptions{});
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_THAT(Paths(*packed), ElementsAreArray({"a"}));
}

TEST_F(PackTest, RefusesWhatIsNotADirectory) {
  Write({{"f", "x"}});
  const absl::Status status = PackDirectory(dir_ + "/f", root_ + "/out.zip", PackOptions{}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("not a directory: " + dir_ + "/f"));
  EXPECT_FALSE(PackDirectory(root_ + "/missing", root_ + "/out.zip", PackOptions{}).ok());
}

TEST(MatchesExcludeTest, FollowsGitignoreSyntax) {
  struct Case {
    std::vector<std::string> patterns;
    std::string path;
    bool is_dir;
    bool want;
  };
  const std::vector<Case> cases = {
      {{"*.pyc"}, "a.pyc", false, true},
      {{"*.pyc"}, "x/y/a.pyc", false, true},
      {{"*.pyc"}, "a.py", false, false},
      {{"*.pyc"}, "cache.pyc/b", false, true},  // a parent matches
      {{"/build"}, "build", true, true},
      {{"/build"}, "build/x/y", false, true},
      {{"/build"}, "src/build", true, false},
      {{"data/"}, "data", true, true},
      {{"data/"}, "data", false, false},
      {{"data/"}, "data/x/y.txt", false, true},
      {{"data/"}, "x/data/y.txt", false, true},
      {{"logs/*.txt"}, "logs/a.txt", false, true},
      {{"logs/*.txt"}, "logs/sub/a.txt", false, false},
      {{"logs/*.txt"}, "x/logs/a.txt", false, false},
      {{"**/tmp"}, "tmp", true, true},
      {{"**/tmp"}, "a/b/tmp", false, true},
      {{"**/tmp"}, "a/tmp/x", false, true},
      {{"**/tmp"}, "tmpx", false, false},
      {{"a/**/b"}, "a/b", false, true},
      {{"a/**/b"}, "a/x/y/b", false, true},
      {{"a/**/b"}, "b", false, false},
      {{"foo/**"}, "foo", true, false},
      {{"foo/**"}, "foo/x", false, true},
      {{"*.txt", "!keep.txt"}, "keep.txt", false, false},
      {{"*.txt", "!keep.txt"}, "d/keep.txt", false, false},
      {{"*.txt", "!keep.txt"}, "a.txt", false, true},
      {{"!keep.txt", "*.txt"}, "keep.txt", false, true},            // later patterns win
      {{"data/", "!data/keep.txt"}, "data/keep.txt", false, true},  // no re-including below an excluded directory
      {{"# comment", ""}, "# comment", false, false},
      {{"\\#file"}, "#file", false, true},
      {{"?.c"}, "a.c", false, true},
      {{"?.c"}, "ab.c", false, false},
      {{"[ab].c"}, "b.c", false, true},
      {{"[ab].c"}, "c.c", false, false},
      {{"*"}, "anything/at/all", false, true},
      {{"trailing   "}, "trailing", false, true},
      {{}, "a", false, false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(MatchesExclude(c.patterns, c.path, c.is_dir), c.want)
        << "patterns {" << ::testing::PrintToString(c.patterns) << "} path " << c.path << (c.is_dir ? "/" : "");
  }
}

TEST(Sha256Test, KnownVectorsAndFiles) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  std::string tmpl = (fs::temp_directory_path() / "torus_sha_test_XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  const std::string big(200000, 'q');
  WriteFile(tmpl + "/f", big);
  EXPECT_EQ(*Sha256File(tmpl + "/f"), Sha256Hex(big));
  const absl::Status status = Sha256File(tmpl + "/missing").status();
  EXPECT_THAT(status.message(), HasSubstr(tmpl + "/missing"));
  fs::remove_all(tmpl);
}

}  // namespace pack_test
}  // namespace torus::package
