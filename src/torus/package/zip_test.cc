#include "torus/package/zip.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torus/common/temp_dir.h"

namespace torus::package {
namespace zip_test {

using ::testing::HasSubstr;

constexpr char kPython[] = "/usr/bin/python3";

class TempDir : public torus::TempDir {
 public:
  TempDir() : torus::TempDir("torus_zip_test_") {}
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& data) { std::ofstream(path, std::ios::binary) << data; }

uint32_t Get32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(s[at + i]);
  return v;
}
uint16_t Get16(const std::string& s, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(s[at]) | static_cast<uint8_t>(s[at + 1]) << 8);
}
void Set16(std::string& s, size_t at, uint16_t v) {
  s[at] = static_cast<char>(v);
  s[at + 1] = static_cast<char>(v >> 8);
}
void Set32(std::string& s, size_t at, uint32_t v) {
  Set16(s, at, static_cast<uint16_t>(v));
  Set16(s, at + 2, static_cast<uint16_t>(v >> 16));
}
void Put16(std::string& s, uint16_t v) { s.append({static_cast<char>(v), static_cast<char>(v >> 8)}); }
void Put32(std::string& s, uint32_t v) {
  Put16(s, static_cast<uint16_t>(v));
  Put16(s, static_cast<uint16_t>(v >> 16));
}
void Put64(std::string& s, uint64_t v) {
  Put32(s, static_cast<uint32_t>(v));
  Put32(s, static_cast<uint32_t>(v >> 32));
}

// Offsets of the central directory headers of an archive without a comment or zip64 records.
std::vector<size_t> CentralHeaders(const std::string& zip) {
  const size_t end = zip.size() - 22;
  std::vector<size_t> at;
  for (size_t p = Get32(zip, end + 16); p < end;
       p += 46 + Get16(zip, p + 28) + Get16(zip, p + 30) + Get16(zip, p + 32)) {
    at.push_back(p);
  }
  return at;
}

std::string RandomBytes(size_t n) {
  std::mt19937 gen(42);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(gen());
  return s;
}

// An archive written with ZipWriter from (path, kind, mode, data) tuples.
struct Spec {
  std::string path;
  EntryKind kind;
  uint32_t mode;
  std::string data;
};
std::string Write(const TempDir& dir, const std::vector<Spec>& specs, int64_t mtime = 1700000000) {
  const std::string path = dir.path() + "/w.zip";
  auto writer = ZipWriter::Create(path);
  EXPECT_TRUE(writer.ok()) << writer.status();
  for (const Spec& s : specs) EXPECT_TRUE((*writer)->Add(s.path, s.kind, s.mode, mtime, s.data).ok());
  auto size = (*writer)->Finish();
  EXPECT_TRUE(size.ok()) << size.status();
  std::string zip = ReadFile(path);
  EXPECT_EQ(*size, zip.size());
  return zip;
}

TEST(ZipTest, WriterOutputReadsBack) {
  TempDir dir;
  const std::string big(1 << 20, 'z');
  const std::string zip = Write(dir, {{"bin/", EntryKind::kDirectory, 0755, ""},
                                      {"bin/run.sh", EntryKind::kFile, 0755, "#!/bin/sh\necho hi\n"},
                                      {"a.txt", EntryKind::kFile, 0644, "hello"},
                                      {"empty", EntryKind::kFile, 0600, ""},
                                      {"big", EntryKind::kFile, 0644, big},
                                      {"link", EntryKind::kSymlink, 0777, "a.txt"}});
  auto entries = ReadZipDirectory(zip, ZipLimits{});
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 6u);
  const std::vector<std::tuple<std::string, EntryKind, uint32_t, uint16_t, std::string>> want = {
      // Files that deflate does not shrink are stored.
      {"bin/", EntryKind::kDirectory, 0755, 0, ""},  {"bin/run.sh", EntryKind::kFile, 0755, 0, "#!/bin/sh\necho hi\n"},
      {"a.txt", EntryKind::kFile, 0644, 0, "hello"}, {"empty", EntryKind::kFile, 0600, 0, ""},
      {"big", EntryKind::kFile, 0644, 8, big},       {"link", EntryKind::kSymlink, 0777, 0, "a.txt"}};
  for (size_t i = 0; i < want.size(); ++i) {
    const ZipEntryInfo& e = (*entries)[i];
    const auto& [path, kind, mode, method, data] = want[i];
    EXPECT_EQ(e.path, path);
    EXPECT_EQ(e.kind, kind) << path;
    EXPECT_EQ(e.mode, mode) << path;
    EXPECT_EQ(e.method, method) << path;
    EXPECT_EQ(e.size, data.size()) << path;
    auto read = ReadZipEntry(zip, e);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(*read, data) << path;
  }
  EXPECT_LT((*entries)[4].compressed_size, 10000u);  // deflated
}

TEST(ZipTest, DosTimeIsLocalTimeClampedTo1980) {
  TempDir dir;
  const int64_t mtime = 1700000000;
  std::string zip = Write(dir, {{"a", EntryKind::kFile, 0644, "x"}}, mtime);
  const time_t t = mtime;
  struct tm tm {};
  localtime_r(&t, &tm);
  EXPECT_EQ(Get16(zip, 10), tm.tm_hour << 11 | tm.tm_min << 5 | tm.tm_sec / 2);
  EXPECT_EQ(Get16(zip, 12), (tm.tm_year - 80) << 9 | (tm.tm_mon + 1) << 5 | tm.tm_mday);

  zip = Write(dir, {{"a", EntryKind::kFile, 0644, "x"}}, 0);
  EXPECT_EQ(Get16(zip, 10), 0);
  EXPECT_EQ(Get16(zip, 12), 1 << 5 | 1);  // 1980-01-01
}

TEST(ZipTest, ManyEntriesUseZip64EndRecords) {
  TempDir dir;
  const std::string path = dir.path() + "/many.zip";
  auto writer = ZipWriter::Create(path);
  ASSERT_TRUE(writer.ok());
  const int n = 70000;
  for (int i = 0; i < n; ++i)
    ASSERT_TRUE((*writer)->Add("d" + std::to_string(i) + "/", EntryKind::kDirectory, 0755, 0, "").ok());
  ASSERT_TRUE((*writer)->Finish().ok());
  const std::string zip = ReadFile(path);
  EXPECT_EQ(Get32(zip, zip.size() - 22 - 20), 0x07064b50u);  // zip64 locator
  EXPECT_EQ(Get16(zip, zip.size() - 22 + 10), 0xFFFF);
  auto entries = ReadZipDirectory(zip, ZipLimits{});
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), static_cast<size_t>(n));
  EXPECT_EQ(entries->back().path, "d69999/");
  EXPECT_THAT(ReadZipDirectory(zip, ZipLimits{.max_entries = 65535}).status().message(),
              HasSubstr("more than 65535 entries"));
}

TEST(ZipTest, Zip64ExtraFieldGivesSizesAndOffset) {
  // One stored entry whose central directory sizes and offset are 0xFFFFFFFF, the values in a zip64 extra field.
  const std::string name = "z.txt", data = "zip64!";
  std::string zip;
  Put32(zip, 0x04034b50);
  Put16(zip, 45), Put16(zip, 0), Put16(zip, 0), Put16(zip, 0), Put16(zip, 0x21);
  Put32(zip, 0x12345678);  // CRC patched below
  Put32(zip, data.size()), Put32(zip, data.size());
  Put16(zip, name.size()), Put16(zip, 0);
  zip += name + data;
  const size_t cd = zip.size();
  Put32(zip, 0x02014b50);
  Put16(zip, 3 << 8 | 45), Put16(zip, 45), Put16(zip, 0), Put16(zip, 0), Put16(zip, 0), Put16(zip, 0x21);
  Put32(zip, 0x12345678);
  Put32(zip, 0xFFFFFFFF), Put32(zip, 0xFFFFFFFF);
  Put16(zip, name.size()), Put16(zip, 4 + 24), Put16(zip, 0), Put16(zip, 0), Put16(zip, 0);
  Put32(zip, (0100644u) << 16);
  Put32(zip, 0xFFFFFFFF);
  zip += name;
  Put16(zip, 0x0001), Put16(zip, 24);
  Put64(zip, data.size()), Put64(zip, data.size()), Put64(zip, 0);
  const size_t cd_size = zip.size() - cd;
  Put32(zip, 0x06054b50);
  Put16(zip, 0), Put16(zip, 0), Put16(zip, 1), Put16(zip, 1);
  Put32(zip, cd_size), Put32(zip, cd), Put16(zip, 0);
  // The CRC of "zip64!", from zlib's crc32 as Python computes it.
  uint32_t crc = 0xFFFFFFFF;
  for (unsigned char c : data) {
    crc ^= c;
    for (int k = 0; k < 8; ++k) crc = crc >> 1 ^ (0xEDB88320 & (0 - (crc & 1)));
  }
  crc ^= 0xFFFFFFFF;
  Set32(zip, 14, crc);
  Set32(zip, cd + 16, crc);

  auto entries = ReadZipDirectory(zip, ZipLimits{});
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].size, data.size());
  EXPECT_EQ((*entries)[0].compressed_size, data.size());
  EXPECT_EQ((*entries)[0].local_header_offset, 0u);
  EXPECT_EQ((*entries)[0].mode, 0644u);
  auto read = ReadZipEntry(zip, (*entries)[0]);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, data);

  // Without the extra field's last value (the offset) the entry is malformed.
  std::string short_extra = zip;
  Set16(short_extra, cd + 30, 4 + 16);
  Set16(short_extra, cd + 46 + name.size() + 2, 16);
  EXPECT_THAT(ReadZipDirectory(short_extra, ZipLimits{}).status().message(),
              HasSubstr("zip64 extra field is too short"));
}

// The 20 bytes before the end record are a zip64 locator only in archives that need zip64 records; elsewhere they
// are the central directory's end, which may be any name's bytes.
TEST(ZipTest, ANameEndingLikeAZip64LocatorIsReadAsAName) {
  TempDir dir;
  // The locator's signature, a disk number, the zip64 record's offset and the number of disks: one set that is not a
  // valid locator, and one that is but points to no zip64 record (offset 0 holds the first local header).
  const std::string signature("PK\x06\x07", 4);
  const std::vector<std::string> tails = {
      signature + std::string("\x01\x00\x00\x00", 4) + std::string(8, 'z') + std::string("\x05\x00\x00\x00", 4),
      signature + std::string(4, '\0') + std::string(8, '\0') + std::string("\x01\x00\x00\x00", 4)};
  for (const std::string& tail : tails) {
    ASSERT_EQ(tail.size(), 20u);
    const std::string name = "a" + tail;
    const std::string zip = Write(dir, {{"first.txt", EntryKind::kFile, 0644, "one"},
                                        {name, EntryKind::kFile, 0644, "two"}});
    ASSERT_EQ(Get32(zip, zip.size() - 22 - 20), 0x07064b50u) << "the name's end sits where a locator would";
    auto entries = ReadZipDirectory(zip, ZipLimits{});
    ASSERT_TRUE(entries.ok()) << entries.status();
    ASSERT_EQ(entries->size(), 2u);
    EXPECT_EQ((*entries)[1].path, name);
    auto read = ReadZipEntry(zip, (*entries)[1]);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(*read, "two");
  }
}

// Runs `script` with /usr/bin/python3, `arg` as sys.argv[1]; returns its exit status.
int RunPython(const TempDir& dir, const std::string& script, const std::string& arg) {
  WriteFile(dir.path() + "/script.py", script);
  return std::system((std::string(kPython) + " " + dir.path() + "/script.py " + arg).c_str());
}

TEST(ZipTest, ReadsPythonDataDescriptors) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is missing";
  TempDir dir;
  // Writing to a stream that cannot seek makes zipfile put sizes in data descriptors (flag bit 3).
  const std::string script = R"(
import sys, zipfile
class Stream:
    def __init__(self, f): self.f = f
    def write(self, b): return self.f.write(b)
    def flush(self): self.f.flush()
with open(sys.argv[1], 'wb') as f:
    with zipfile.ZipFile(Stream(f), 'w', zipfile.ZIP_DEFLATED) as z:
        z.writestr('a.txt', 'alpha ' * 100)
        z.writestr('b/c.txt', 'gamma')
)";
  const std::string path = dir.path() + "/dd.zip";
  ASSERT_EQ(RunPython(dir, script, path), 0);
  const std::string zip = ReadFile(path);
  ASSERT_TRUE(Get16(zip, 6) & 0x08) << "fixture has no data descriptor";
  auto entries = ReadZipDirectory(zip, ZipLimits{});
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 2u);
  std::string alpha;
  for (int i = 0; i < 100; ++i) alpha += "alpha ";
  EXPECT_EQ(*ReadZipEntry(zip, (*entries)[0]), alpha);
  EXPECT_EQ(*ReadZipEntry(zip, (*entries)[1]), "gamma");
  EXPECT_EQ((*entries)[1].mode, 0600u);  // zipfile's writestr default
}

TEST(ZipTest, PythonReadsWriterOutput) {
  if (::access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " is missing";
  TempDir dir;
  Write(dir, {{"pkg/", EntryKind::kDirectory, 0755, ""},
              {"pkg/run.sh", EntryKind::kFile, 0755, "#!/bin/sh\n"},
              {"pkg/data.bin", EntryKind::kFile, 0644, RandomBytes(5000)},
              {"pkg/link", EntryKind::kSymlink, 0777, "run.sh"}});
  const std::string script = R"(
import stat, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
assert z.testzip() is None
modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
assert modes == {'pkg/': 0o40755, 'pkg/run.sh': 0o100755, 'pkg/data.bin': 0o100644, 'pkg/link': 0o120777}, modes
assert z.getinfo('pkg/').is_dir()
assert z.read('pkg/link') == b'run.sh'
assert z.read('pkg/run.sh') == b'#!/bin/sh\n'
assert all(i.create_system == 3 for i in z.infolist())
)";
  EXPECT_EQ(RunPython(dir, script, dir.path() + "/w.zip"), 0);
}

TEST(ZipTest, RefusesMalformedArchives) {
  TempDir dir;
  const std::string good = Write(dir, {{"a.bin", EntryKind::kFile, 0644, RandomBytes(1000)}});
  const size_t cd = CentralHeaders(good).at(0);
  ASSERT_TRUE(ReadZipDirectory(good, ZipLimits{}).ok());
  struct Case {
    std::string name;
    std::string zip;
    std::string want;
  };
  std::vector<Case> cases;
  cases.push_back({"empty", "", "not a zip archive: no end of central directory record"});
  cases.push_back({"text", std::string(100, 'x'), "not a zip archive: no end of central directory record"});
  cases.push_back({"truncated", good.substr(0, good.size() / 2), "no end of central directory record"});
  std::string zip = good;
  Set32(zip, zip.size() - 22 + 16, 0x7FFFFFFF);
  cases.push_back({"directory offset past the end", zip, "lies outside the archive"});
  zip = good;
  Set16(zip, zip.size() - 22 + 10, 50);
  cases.push_back({"more entries than fit", zip, "50 entries cannot fit"});
  zip = good;
  Set16(zip, cd + 10, 12);
  cases.push_back({"method 12", zip,
                   "entry 0 (\"a.bin\"): compression method 12 is not supported; only stored (0) and deflated (8)"});
  zip = good;
  Set32(zip, cd + 42, 0xFFFFFF00);
  cases.push_back({"local header past the end", zip, "lies outside the archive"});
  zip = good;
  Set16(zip, cd + 8, 1);
  cases.push_back({"encrypted", zip, "encrypted entries are not supported"});
  zip = good;
  Set16(zip, cd + 28, 0xFFF0);
  cases.push_back({"name past the directory", zip, "runs past the directory's end"});
  for (const Case& c : cases) {
    const absl::Status status = ReadZipDirectory(c.zip, ZipLimits{}).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(status.message(), HasSubstr(c.want)) << c.name;
  }
}

TEST(ZipTest, RefusesCorruptEntries) {
  TempDir dir;
  // Random bytes do not compress, so they are stored: a flipped byte reads back, with the wrong CRC.
  const std::string good = Write(dir, {{"a.bin", EntryKind::kFile, 0644, RandomBytes(1000)}});
  const ZipEntryInfo entry = ReadZipDirectory(good, ZipLimits{})->at(0);
  ASSERT_TRUE(ReadZipEntry(good, entry).ok());
  const auto error = [&](const std::string& zip, ZipEntryInfo e) {
    const absl::Status status = ReadZipEntry(zip, e).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    return std::string(status.message());
  };
  std::string zip = good;
  zip[30 + 5 + 500] ^= 0x40;
  EXPECT_THAT(error(zip, entry), HasSubstr("entry \"a.bin\": CRC-32 mismatch"));
  zip = good;
  zip[0] = 'X';
  EXPECT_THAT(error(zip, entry), HasSubstr("no local header at offset 0"));
  zip = good;
  Set16(zip, 26, 0xFFFF);
  EXPECT_THAT(error(zip, entry), HasSubstr("local header runs past the archive's end"));
  zip = good;
  zip[30] = 'b';
  EXPECT_THAT(error(zip, entry), HasSubstr("local header does not match the central directory"));
  ZipEntryInfo e = entry;
  e.compressed_size = 10;
  EXPECT_THAT(error(good, e), HasSubstr("stored entry's sizes differ"));
  const std::string deflated = Write(dir, {{"z.txt", EntryKind::kFile, 0644, std::string(1000, 'z')}});
  e = ReadZipDirectory(deflated, ZipLimits{})->at(0);
  ASSERT_EQ(e.method, 8);
  e.compressed_size = 3;  // the stream stops short
  EXPECT_THAT(error(deflated, e), HasSubstr("compressed data is truncated"));
}

TEST(ZipTest, InflatesNoMoreThanTheDeclaredSize) {
  TempDir dir;
  const std::string good = Write(dir, {{"zeros", EntryKind::kFile, 0644, std::string(1 << 20, '\0')}});
  ZipEntryInfo entry = ReadZipDirectory(good, ZipLimits{})->at(0);
  EXPECT_LT(entry.compressed_size, 5000u);
  entry.size = 100;
  EXPECT_THAT(ReadZipEntry(good, entry).status().message(),
              HasSubstr("entry \"zeros\": inflates to more than its declared size of 100 bytes"));
  entry.size = 2 << 20;
  EXPECT_THAT(ReadZipEntry(good, entry).status().message(),
              HasSubstr("inflates to 1048576 bytes, not the declared 2097152"));

  // A small entry declaring 4 GB is refused before anything inflates.
  std::string bomb = good;
  Set32(bomb, CentralHeaders(bomb).at(0) + 24, 0xFFFFFFF0);
  EXPECT_THAT(
      ReadZipDirectory(bomb, ZipLimits{.max_total_bytes = 1ull << 30}).status().message(),
      HasSubstr(
          "entries inflate to more than 1073741824 bytes in all (entry 0 (\"zeros\") declares 4294967280 bytes)"));
}

TEST(ZipTest, LimitsTotalSizeAcrossEntries) {
  TempDir dir;
  const std::string zip = Write(dir, {{"a", EntryKind::kFile, 0644, std::string(600, 'a')},
                                      {"b", EntryKind::kFile, 0644, std::string(600, 'b')}});
  EXPECT_TRUE(ReadZipDirectory(zip, ZipLimits{.max_total_bytes = 1200}).ok());
  EXPECT_THAT(ReadZipDirectory(zip, ZipLimits{.max_total_bytes = 1199}).status().message(),
              HasSubstr("more than 1199 bytes in all"));
  EXPECT_THAT(ReadZipDirectory(zip, ZipLimits{.max_entries = 1}).status().message(), HasSubstr("more than 1 entries"));
}

// Hostile input must give errors, never crashes or huge allocations: flip bytes of a valid archive at random.
TEST(ZipTest, SurvivesRandomCorruption) {
  TempDir dir;
  const std::string good = Write(dir, {{"d/", EntryKind::kDirectory, 0755, ""},
                                       {"d/a.txt", EntryKind::kFile, 0644, std::string(3000, 'a')},
                                       {"d/b.bin", EntryKind::kFile, 0644, RandomBytes(700)},
                                       {"d/l", EntryKind::kSymlink, 0777, "a.txt"}});
  std::mt19937 gen(3);
  int refused = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string zip = good;
    const int flips = 1 + gen() % 4;
    for (int i = 0; i < flips; ++i) zip[gen() % zip.size()] = static_cast<char>(gen());
    auto entries = ReadZipDirectory(zip, ZipLimits{.max_total_bytes = 1 << 20});
    if (!entries.ok()) {
      EXPECT_EQ(entries.status().code(), absl::StatusCode::kInvalidArgument) << entries.status();
      ++refused;
      continue;
    }
    for (const ZipEntryInfo& e : *entries) {
      auto data = ReadZipEntry(zip, e);
      if (data.ok()) {
        EXPECT_EQ(data->size(), e.size);
      } else {
        EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument) << data.status();
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, 1000);
}

TEST(ZipTest, CreateNamesThePath) {
  const absl::Status status = ZipWriter::Create("/nonexistent-dir/x.zip").status();
  EXPECT_THAT(status.message(), HasSubstr("/nonexistent-dir/x.zip"));
  EXPECT_THAT(status.message(), HasSubstr("No such file or directory"));
}

}  // namespace zip_test
}  // namespace torus::package
