// libFuzzer target for package archives (docs/fuzzing.md): a zip uploaded to the head (PUT /api/packages/...) or
// fetched by an agent; the whole input is the archive. Reading may fail, with InvalidArgument; it must never crash,
// read out of bounds or inflate without limit. An archive CheckZip accepts has a directory whose files and symlinks
// all read back with their sizes and CRCs, and it round-trips: written again entry by entry with ZipWriter, the
// new archive passes CheckZip and reads back the same paths, kinds, modes and contents (unless an entry has an empty
// name, which CheckZip takes as the root and ZipWriter does not write).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "torus/package/unpack.h"
#include "torus/package/zip.h"

namespace {

namespace package = torus::package;

// Small enough that a hostile directory cannot make a fuzzer run out of memory; large enough for any input.
constexpr package::ZipLimits kLimits{.max_entries = 10'000, .max_total_bytes = 64 << 20};
// Entries up to this size are kept for the round trip.
constexpr uint64_t kMaxKept = 1 << 20;

// Aborts, so that libFuzzer records the input, when a property that reading promises does not hold.
void Require(bool condition) {
  if (!condition) std::abort();
}

std::string* scratch = nullptr;

// Reads every entry (directories' data included, which CheckZip does not read); the contents of those that read and
// are small, by index.
std::vector<std::string> ReadAll(std::string_view archive, const std::vector<package::ZipEntryInfo>& entries,
                                 bool require_ok) {
  std::vector<std::string> contents(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    std::string& out = contents[i];
    uint64_t seen = 0;
    absl::Status status = package::ReadZipEntryTo(archive, entries[i], [&](std::string_view piece) {
      seen += piece.size();
      Require(seen <= entries[i].size);  // never more than the entry declares
      if (entries[i].size <= kMaxKept) out.append(piece.data(), piece.size());
      return absl::OkStatus();
    });
    if (status.ok()) {
      Require(seen == entries[i].size);
    } else {
      Require(status.code() == absl::StatusCode::kInvalidArgument);
      Require(!require_ok || entries[i].kind == package::EntryKind::kDirectory);
    }
  }
  return contents;
}

void CheckRoundTrip(const std::vector<package::ZipEntryInfo>& entries, const std::vector<std::string>& contents) {
  uint64_t total = 0;
  for (const package::ZipEntryInfo& entry : entries) {
    // A nameless directory entry is the root, as "./" is, and unpacks to nothing; ZipWriter takes names of 1 to
    // 65535 bytes only, so such an archive cannot be written again as it is.
    if (entry.path.empty()) return;
    total += entry.size;
  }
  if (total > kMaxKept) return;
  {
    absl::StatusOr<std::unique_ptr<package::ZipWriter>> writer = package::ZipWriter::Create(*scratch);
    Require(writer.ok());
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string data = entries[i].kind == package::EntryKind::kDirectory ? "" : contents[i];
      Require((*writer)->Add(entries[i].path, entries[i].kind, entries[i].mode, 0, data).ok());
    }
    Require((*writer)->Finish().ok());
  }
  std::ifstream in(*scratch, std::ios::binary);
  const std::string rewritten((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Require(package::CheckZip(rewritten, kLimits).ok());
  absl::StatusOr<std::vector<package::ZipEntryInfo>> again = package::ReadZipDirectory(rewritten, kLimits);
  Require(again.ok() && again->size() == entries.size());
  const std::vector<std::string> again_contents = ReadAll(rewritten, *again, /*require_ok=*/true);
  for (size_t i = 0; i < entries.size(); ++i) {
    Require((*again)[i].path == entries[i].path && (*again)[i].kind == entries[i].kind &&
            (*again)[i].mode == entries[i].mode);
    if (entries[i].kind != package::EntryKind::kDirectory) Require(again_contents[i] == contents[i]);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  namespace fs = std::filesystem;
  scratch = new std::string((fs::temp_directory_path() / absl::StrCat("zip_fuzz.", getpid(), ".zip")).string());
  std::atexit([] { std::filesystem::remove(*scratch); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view archive(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<package::ZipEntryInfo>> entries = package::ReadZipDirectory(archive, kLimits);
  const absl::Status checked = package::CheckZip(archive, kLimits);
  Require(checked.ok() || checked.code() == absl::StatusCode::kInvalidArgument);
  if (!entries.ok()) {
    Require(entries.status().code() == absl::StatusCode::kInvalidArgument && !checked.ok());
    return 0;
  }
  uint64_t total = 0;
  for (const package::ZipEntryInfo& entry : *entries) {
    Require(entry.method == 0 || entry.method == 8);
    Require(entry.mode <= 07777);
    total += entry.size;
  }
  Require(entries->size() <= kLimits.max_entries && total <= kLimits.max_total_bytes);
  const std::vector<std::string> contents = ReadAll(archive, *entries, /*require_ok=*/checked.ok());
  if (checked.ok()) CheckRoundTrip(*entries, contents);
  return 0;
}
