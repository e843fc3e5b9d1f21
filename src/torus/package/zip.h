// Zip archives (PKWARE APPNOTE), as Python's zipfile writes them for Ray's runtime_env packages: stored (method 0)
// and deflated (method 8) entries, Unix modes in the external attributes (symlinks included), zip64 end records.
// Only what packages need: no encryption, no multi-disk archives, no other compression methods.
//
// Reading is for untrusted input (a PUT body, a file fetched from the head): every offset and size is checked
// against the archive's bounds, each entry's CRC-32 and size are checked after inflating, and the totals are
// bounded (ZipLimits) so that a small archive cannot inflate without limit.
//
// Thread-safety: pure functions and value types; a ZipWriter is not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace torus::package {

enum class EntryKind { kFile, kDirectory, kSymlink };

struct ZipLimits {
  uint64_t max_entries = 200'000;
  uint64_t max_total_bytes = 4ull << 30;  // the sum of the entries' uncompressed sizes
};

// One entry of an archive's central directory, as read. `path` is the name as stored ("a/b.py", "a/" for a
// directory). Directories are entries whose name ends in '/' or whose mode says so.
struct ZipEntryInfo {
  std::string path;
  EntryKind kind = EntryKind::kFile;
  uint32_t mode = 0;           // Unix permission bits (07777); 0 when the archive gives none
  uint16_t method = 0;         // 0 stored, 8 deflated
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t size = 0;           // uncompressed
  uint64_t local_header_offset = 0;
};

// The central directory of `archive` (the whole file's bytes). InvalidArgument naming what is wrong ("not a zip
// archive: no end of central directory record", "entry 3 (\"a.py\"): compression method 12 is not supported; only
// stored (0) and deflated (8)", "more than 200000 entries", ...) for anything malformed or beyond `limits`.
absl::StatusOr<std::vector<ZipEntryInfo>> ReadZipDirectory(std::string_view archive, const ZipLimits& limits);

// The uncompressed bytes of `entry` (one returned by ReadZipDirectory for the same archive); InvalidArgument when
// its local header does not match, it does not inflate, or its size or CRC-32 is wrong. Holds the whole entry:
// for small ones (a symlink's target, a test); ReadZipEntryTo streams.
absl::StatusOr<std::string> ReadZipEntry(std::string_view archive, const ZipEntryInfo& entry);

// The same, in pieces of at most 64 KiB passed to `sink` as they are inflated (memory stays one piece, whatever the
// entry declares); the errors come after the pieces when the size or CRC-32 is wrong, and a sink's error stops it.
absl::Status ReadZipEntryTo(std::string_view archive, const ZipEntryInfo& entry,
                            const std::function<absl::Status(std::string_view)>& sink);

// Writes an archive to a file, one entry at a time (files deflated unless that does not make them smaller;
// directories and symlinks stored), with Unix
// modes in the external attributes as Python's zipfile does; zip64 records only when 65,535 entries or more, or
// 4 GiB, are written.
class ZipWriter {
 public:
  // Creates (truncates) `path`. Errors name the path and errno's text.
  static absl::StatusOr<std::unique_ptr<ZipWriter>> Create(const std::string& path);
  ~ZipWriter();  // closes the file; an archive not Finish()ed is left incomplete

  // REQUIRES: `path` relative, '/'-separated, no "." or ".." segments; directories end in '/'. Not checked: the path is
  // stored as given (tests write hostile archives this way).
  // `mtime` is seconds since the epoch (stored as a DOS date, local time). `data` is a file's bytes or a symlink's
  // target.
  absl::Status Add(std::string_view path, EntryKind kind, uint32_t mode, int64_t mtime, std::string_view data);
  // Writes the central directory and closes the file. Returns the archive's size in bytes.
  absl::StatusOr<uint64_t> Finish();

 private:
  struct Impl;
  explicit ZipWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace torus::package
