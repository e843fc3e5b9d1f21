#include "torus/package/unpack.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torus/package/zip.h"

namespace torus::package {
namespace unpack_test {

using ::testing::HasSubstr;

constexpr char kPython[] = "/usr/bin/python3";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

uint32_t Mode(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

std::string ReadLink(const std::string& path) {
  std::error_code ec;
  return std::filesystem::read_symlink(path, ec).string();
}

std::set<std::string> List(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

struct Spec {
  std::string path;
  EntryKind kind;
  uint32_t mode;
  std::string data;
};

class UnpackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "torus_unpack_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    std::filesystem::create_directory(root_ + "/work");
    std::filesystem::create_directory(root_ + "/parent");
    dest_ = root_ + "/parent/dest";
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }

  std::string Zip(const std::vector<Spec>& specs) {
    const std::string path = root_ + "/work/a.zip";
    auto writer = ZipWriter::Create(path);
    EXPECT_TRUE(writer.ok()) << writer.status();
    for (const Spec& s : specs) EXPECT_TRUE((*writer)->Add(s.path, s.kind, s.mode, 1700000000, s.data).ok());
    EXPECT_TRUE((*writer)->Finish().ok());
    return ReadFile(path);
  }

  // Unpacks an archive that must be refused: checks the code and message, and that nothing was left beside dest.
  void ExpectRefused(const std::string& zip, absl::StatusCode code, const std::string& want,
                     const ZipLimits& limits = ZipLimits{}) {
    const std::set<std::string> before = List(root_ + "/parent");
    const absl::Status status = UnpackZip(zip, dest_, limits);
    EXPECT_EQ(status.code(), code) << status;
    EXPECT_THAT(status.message(), HasSubstr(want));
    EXPECT_EQ(List(root_ + "/parent"), before);
    if (code == absl::StatusCode::kInvalidArgument) {
      EXPECT_THAT(CheckZip(zip, limits).message(), HasSubstr(want));
    }
  }

  std::string root_;
  std::string dest_;
};

TEST_F(UnpackTest, WritesTheTreeWithNormalizedModes) {
  const std::string zip = Zip({{"pkg/", EntryKind::kDirectory, 0700, ""},
                               {"pkg/run.sh", EntryKind::kFile, 04755, "#!/bin/sh\n"},
                               {"pkg/data.txt", EntryKind::kFile, 0600, "data"},
                               {"pkg/link", EntryKind::kSymlink, 0777, "data.txt"},
                               {"pkg/sub/up", EntryKind::kSymlink, 0777, "../run.sh"},
                               {"a/b/c.py", EntryKind::kFile, 0, "print(1)\n"},  // implicit parents
                               {"empty/", EntryKind::kDirectory, 0755, ""}});
  ASSERT_TRUE(CheckZip(zip, ZipLimits{}).ok());
  const absl::Status status = UnpackZip(zip, dest_, ZipLimits{});
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(List(root_ + "/parent"), std::set<std::string>{"dest"});
  EXPECT_EQ(ReadFile(dest_ + "/pkg/run.sh"), "#!/bin/sh\n");
  EXPECT_EQ(Mode(dest_ + "/pkg/run.sh"), 0755u);  // no setuid
  EXPECT_EQ(Mode(dest_ + "/pkg/data.txt"), 0644u);
  EXPECT_EQ(Mode(dest_ + "/pkg"), 0755u);
  EXPECT_EQ(Mode(dest_), 0755u);
  EXPECT_EQ(ReadLink(dest_ + "/pkg/link"), "data.txt");
  EXPECT_EQ(ReadFile(dest_ + "/pkg/link"), "data");
  EXPECT_EQ(ReadFile(dest_ + "/pkg/sub/up"), "#!/bin/sh\n");
  EXPECT_EQ(ReadFile(dest_ + "/a/b/c.py"), "print(1)\n");
  EXPECT_EQ(Mode(dest_ + "/a/b"), 0755u);
  EXPECT_EQ(Mode(dest_ + "/a/b/c.py"), 0644u);
  EXPECT_TRUE(std::filesystem::is_directory(dest_ + "/empty"));
}

TEST_F(UnpackTest, UnpacksPythonWrittenArchives) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is missing";
  const std::string path = root_ + "/work/py.zip";
  const std::string script = R"(
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED) as z:
    d = zipfile.ZipInfo('mod/sub/')
    d.external_attr = (0o40755 << 16) | 0x10
    z.writestr(d, '')
    f = zipfile.ZipInfo('mod/tool.py')
    f.external_attr = 0o100755 << 16
    z.writestr(f, 'import os\n' * 50, zipfile.ZIP_DEFLATED)
    z.writestr('mod/sub/data.txt', 'x' * 1000)
    z.writestr('mod/pkg/__init__.py', '')
    l = zipfile.ZipInfo('mod/sub/link')
    l.external_attr = 0o120777 << 16
    z.writestr(l, '../tool.py')
)";
  std::ofstream(root_ + "/work/gen.py") << script;
  ASSERT_EQ(std::system((std::string(kPython) + " " + root_ + "/work/gen.py " + path).c_str()), 0);
  const absl::Status status = UnpackZip(ReadFile(path), dest_, ZipLimits{});
  ASSERT_TRUE(status.ok()) << status;
  std::string tool;
  for (int i = 0; i < 50; ++i) tool += "import os\n";
  EXPECT_EQ(ReadFile(dest_ + "/mod/tool.py"), tool);
  EXPECT_EQ(Mode(dest_ + "/mod/tool.py"), 0755u);
  EXPECT_EQ(ReadFile(dest_ + "/mod/sub/data.txt"), std::string(1000, 'x'));
  EXPECT_EQ(Mode(dest_ + "/mod/sub/data.txt"), 0644u);
  EXPECT_EQ(Mode(dest_ + "/mod/sub"), 0755u);
  EXPECT_EQ(ReadFile(dest_ + "/mod/pkg/__init__.py"), "");
  EXPECT_EQ(ReadLink(dest_ + "/mod/sub/link"), "../tool.py");
}

TEST_F(UnpackTest, RefusesUnsafePaths) {
  const EntryKind kFile = EntryKind::kFile, kLink = EntryKind::kSymlink, kDir = EntryKind::kDirectory;
  struct Case {
    std::vector<Spec> specs;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{{"/etc/x", kFile, 0644, "x"}}, "entry \"/etc/x\": absolute path"},
      {{{"../x", kFile, 0644, "x"}}, "entry \"../x\": \"..\" segment in the path"},
      {{{"a/../../x", kFile, 0644, "x"}}, "entry \"a/../../x\": \"..\" segment"},
      {{{"ok", kFile, 0644, "x"}, {"a/..", kDir, 0755, ""}}, "entry \"a/..\": \"..\" segment"},
      {{{"a\\b", kFile, 0644, "x"}}, "entry \"a\\\\b\": backslash in the name"},
      {{{std::string("a\0z", 3), kFile, 0644, "x"}}, "entry \"a\\x00z\": NUL in the name"},
      {{{"a.txt", kFile, 0644, "1"}, {"a.txt", kFile, 0644, "2"}}, "entry \"a.txt\": duplicate entry"},
      {{{"a/", kDir, 0755, ""}, {"./a", kFile, 0644, "2"}}, "entry \"./a\": duplicate entry"},
      {{{"a", kFile, 0644, "1"}, {"a/b", kFile, 0644, "2"}}, "entry \"a/b\": \"a\" is a file"},
      {{{"x/b/c", kFile, 0644, "1"}, {"x/b", kFile, 0644, "2"}}, "entry \"x/b/c\": \"x/b\" is a file"},
      {{{"l", kLink, 0777, "d"}, {"d/", kDir, 0755, ""}, {"l/x", kFile, 0644, "x"}},
       "entry \"l/x\": \"l\" is a symlink"},
      {{{"a/l", kLink, 0777, "../../x"}}, "symlink \"a/l\" -> \"../../x\": target points outside the destination"},
      {{{"l", kLink, 0777, "/etc/passwd"}}, "symlink \"l\" -> \"/etc/passwd\": absolute targets are not allowed"},
      {{{"l", kLink, 0777, ""}}, "entry \"l\": symlink target is empty"},
      // Lexically "l1/../.." from a/ is the root, but l1 is a/ itself, so the kernel would climb out.
      {{{"a/l1", kLink, 0777, "."}, {"a/l2", kLink, 0777, "l1/../.."}},
       "symlink \"a/l2\" -> \"l1/../..\": target points outside the destination"},
      {{{"s", kLink, 0777, "d"}, {"d/c", kLink, 0777, ".."}, {"x", kLink, 0777, "s/c/.."}},
       "symlink \"x\" -> \"s/c/..\": target points outside"},
      {{{"a", kLink, 0777, "b"}, {"b", kLink, 0777, "a"}}, "too many levels of symlinks"},
      {{{std::string(256, 'n'), kFile, 0644, "x"}}, "a name in the path is longer than 255 bytes"},
      {{{[] {
           std::string deep;
           for (int i = 0; i < 257; ++i) deep += "d/";
           return deep + "f";
         }(),
         kFile, 0644, "x"}},
       "more than 256 directories deep"},
      {{{std::string(2100, 'a') + "/" + std::string(2100, 'b'), kDir, 0755, ""}}, "path longer than 4095 bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.want);
    ExpectRefused(Zip(c.specs), absl::StatusCode::kInvalidArgument, c.want);
  }
}

std::string RandomBytes(size_t n) {
  std::mt19937 gen(7);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(gen());
  return s;
}

size_t FirstCentralHeader(const std::string& zip) {
  const size_t end = zip.size() - 22;
  size_t at = 0;
  for (int i = 3; i >= 0; --i) at = at << 8 | static_cast<uint8_t>(zip[end + 16 + i]);
  return at;
}

void Set32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>(v >> (8 * i));
}

TEST_F(UnpackTest, RefusesCorruptArchives) {
  const std::string good =
      Zip({{"ok.txt", EntryKind::kFile, 0644, "fine"}, {"b.bin", EntryKind::kFile, 0644, RandomBytes(2000)}});
  ExpectRefused(good.substr(0, good.size() - 30), absl::StatusCode::kInvalidArgument,
                "not a zip archive: no end of central directory record");

  // Random bytes deflate to stored blocks, so a flipped byte inflates with the wrong CRC. The first file has been
  // written by then: the partial directory must still go.
  std::string flipped = good;
  const ZipEntryInfo b = ReadZipDirectory(good, ZipLimits{})->at(1);
  flipped[b.local_header_offset + 30 + 5 + 1000] ^= 1;
  ExpectRefused(flipped, absl::StatusCode::kInvalidArgument, "entry \"b.bin\": CRC-32 mismatch");

  std::string method = good;
  method[8] = 12;  // local header
  method[FirstCentralHeader(method) + 10] = 12;
  ExpectRefused(method, absl::StatusCode::kInvalidArgument,
                "entry 0 (\"ok.txt\"): compression method 12 is not supported; only stored (0) and deflated (8)");
}

TEST_F(UnpackTest, RefusesArchivesBeyondTheLimits) {
  const std::string three =
      Zip({{"a", EntryKind::kFile, 0644, "a"}, {"b", EntryKind::kFile, 0644, "b"}, {"c", EntryKind::kFile, 0644, "c"}});
  ExpectRefused(three, absl::StatusCode::kInvalidArgument, "more than 2 entries", ZipLimits{.max_entries = 2});

  const std::string big = Zip({{"zeros", EntryKind::kFile, 0644, std::string(4096, '\0')}});
  ExpectRefused(big, absl::StatusCode::kInvalidArgument, "entries inflate to more than 1000 bytes in all",
                ZipLimits{.max_total_bytes = 1000});

  // A zip bomb: 1 MiB of zeros deflates to about 1 KiB; its entry declares almost 4 GiB.
  std::string bomb = Zip({{"bomb", EntryKind::kFile, 0644, std::string(1 << 20, '\0')}});
  Set32(bomb, FirstCentralHeader(bomb) + 24, 0xFFFFFFF0);
  ExpectRefused(bomb, absl::StatusCode::kInvalidArgument, "declares 4294967280 bytes",
                ZipLimits{.max_total_bytes = 1ull << 30});
  // Within the limits, the stream ends short of the declared size.
  ExpectRefused(bomb, absl::StatusCode::kInvalidArgument, "inflates to 1048576 bytes, not the declared 4294967280");
  // Declaring less than the stream holds stops inflation at the declared size.
  Set32(bomb, FirstCentralHeader(bomb) + 24, 1000);
  ExpectRefused(bomb, absl::StatusCode::kInvalidArgument, "inflates to more than its declared size of 1000 bytes");
}

TEST_F(UnpackTest, RefusesAnExistingDestination) {
  const std::string zip = Zip({{"a", EntryKind::kFile, 0644, "a"}});
  std::filesystem::create_directory(dest_);
  ExpectRefused(zip, absl::StatusCode::kAlreadyExists, "already exists");
  EXPECT_TRUE(std::filesystem::is_empty(dest_));
  std::filesystem::remove(dest_);
  std::ofstream(dest_) << "file";
  ExpectRefused(zip, absl::StatusCode::kAlreadyExists, "already exists");

  // A missing parent is an error too, and creates nothing.
  const absl::Status status = UnpackZip(zip, root_ + "/missing/dest", ZipLimits{});
  EXPECT_FALSE(status.ok());
  EXPECT_FALSE(std::filesystem::exists(root_ + "/missing"));
}

TEST_F(UnpackTest, SecondUnpackLosesAndLeavesTheFirstWhole) {
  const std::string first = Zip({{"v", EntryKind::kFile, 0644, "1"}});
  ASSERT_TRUE(UnpackZip(first, dest_, ZipLimits{}).ok());
  const std::string second = Zip({{"v", EntryKind::kFile, 0644, "2"}});
  ExpectRefused(second, absl::StatusCode::kAlreadyExists, "already exists");
  EXPECT_EQ(ReadFile(dest_ + "/v"), "1");
}

}  // namespace unpack_test
}  // namespace torus::package
