#include "torus/package/zip.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "torus/common/status.h"
#include "torus/common/strings.h"

namespace torus::package {
namespace {

constexpr uint32_t kLocalHeaderSig = 0x04034b50;
constexpr uint32_t kCentralHeaderSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kEndSize = 22;
constexpr size_t kZip64EndSize = 56;
constexpr size_t kZip64LocatorSize = 20;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint32_t kMax32 = 0xFFFFFFFF;
constexpr uint16_t kMax16 = 0xFFFF;
constexpr uint16_t kUnixSystem = 3;
constexpr uint16_t kFlagEncrypted = 0x0001;
constexpr uint16_t kFlagUtf8 = 0x0800;
constexpr size_t kChunk = 64 << 10;

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("invalid zip archive: ", AbslView(what)));
}

std::string EntryName(size_t index, std::string_view path) {
  return absl::StrCat("entry ", index, " (\"", absl::CHexEscape(AbslView(path)), "\")");
}

// Little-endian reads; callers have checked the bounds.
uint16_t Get16(std::string_view s, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(s[at]) | static_cast<uint8_t>(s[at + 1]) << 8);
}
uint32_t Get32(std::string_view s, size_t at) { return Get16(s, at) | static_cast<uint32_t>(Get16(s, at + 2)) << 16; }
uint64_t Get64(std::string_view s, size_t at) { return Get32(s, at) | static_cast<uint64_t>(Get32(s, at + 4)) << 32; }

// True when [offset, offset + length) lies within a buffer of `size` bytes, without overflowing.
bool Within(uint64_t offset, uint64_t length, uint64_t size) { return offset <= size && length <= size - offset; }

struct EndRecord {
  uint64_t entries = 0;
  uint64_t cd_size = 0;
  uint64_t cd_offset = 0;
  uint64_t records_start = 0;  // where the end records begin: the central directory must end before
};

absl::StatusOr<EndRecord> FindEndRecord(std::string_view archive) {
  if (archive.size() < kEndSize) {
    return absl::InvalidArgumentError("not a zip archive: no end of central directory record");
  }
  // The record is the last thing in the file but for a comment of at most 65,535 bytes.
  const size_t last = archive.size() - kEndSize;
  const size_t first = last > kMax16 ? last - kMax16 : 0;
  std::optional<size_t> at;
  for (size_t i = last + 1; i-- > first;) {
    if (Get32(archive, i) == kEndSig && i + kEndSize + Get16(archive, i + 20) <= archive.size()) {
      at = i;
      break;
    }
  }
  if (!at) return absl::InvalidArgumentError("not a zip archive: no end of central directory record");
  const size_t e = *at;
  EndRecord end{Get16(archive, e + 10), Get32(archive, e + 12), Get32(archive, e + 16), e};
  const uint16_t disk = Get16(archive, e + 4), cd_disk = Get16(archive, e + 6);
  // Zip64 records exist when a count, size or offset does not fit here, which writers mark with all ones. Otherwise
  // the bytes before this record are the central directory's end (an entry's name, extra field or comment), whatever
  // they look like: a name may end in a locator's signature.
  const bool needs_zip64 = end.entries == kMax16 || end.cd_size == kMax32 || end.cd_offset == kMax32;
  if (needs_zip64 && e >= kZip64LocatorSize && Get32(archive, e - kZip64LocatorSize) == kZip64LocatorSig) {
    const size_t loc = e - kZip64LocatorSize;
    const uint64_t record = Get64(archive, loc + 8);
    if (Get32(archive, loc + 4) != 0 || Get32(archive, loc + 16) > 1) {
      return absl::InvalidArgumentError("multi-disk zip archives are not supported");
    }
    if (!Within(record, kZip64EndSize, loc) || Get32(archive, record) != kZip64EndSig) {
      return Bad("zip64 end of central directory locator points to no zip64 record");
    }
    if (Get32(archive, record + 16) != 0 || Get32(archive, record + 20) != 0) {
      return absl::InvalidArgumentError("multi-disk zip archives are not supported");
    }
    end = EndRecord{Get64(archive, record + 32), Get64(archive, record + 40), Get64(archive, record + 48), record};
  } else if (disk != 0 || cd_disk != 0) {
    return absl::InvalidArgumentError("multi-disk zip archives are not supported");
  }
  if (!Within(end.cd_offset, end.cd_size, end.records_start)) {
    return Bad(absl::StrCat("central directory (", end.cd_size, " bytes at offset ", end.cd_offset,
                            ") lies outside the archive"));
  }
  return end;
}

// Replaces the 32-bit fields that are 0xFFFFFFFF with the values of the zip64 extra field, in APPNOTE's order.
absl::Status ApplyZip64Extra(std::string_view extra, bool need_size, bool need_csize, bool need_offset,
                             ZipEntryInfo& entry, const std::string& name) {
  if (!need_size && !need_csize && !need_offset) return absl::OkStatus();
  for (size_t i = 0; i + 4 <= extra.size();) {
    const uint16_t id = Get16(extra, i), len = Get16(extra, i + 2);
    if (!Within(i + 4, len, extra.size())) break;
    if (id == kZip64ExtraId) {
      size_t at = i + 4;
      const size_t end = at + len;
      for (auto [need, field] : {std::pair{need_size, &entry.size}, std::pair{need_csize, &entry.compressed_size},
                                 std::pair{need_offset, &entry.local_header_offset}}) {
        if (!need) continue;
        if (at + 8 > end) return Bad(absl::StrCat(name, ": zip64 extra field is too short"));
        *field = Get64(extra, at);
        at += 8;
      }
      return absl::OkStatus();
    }
    i += 4 + len;
  }
  return Bad(absl::StrCat(name, ": sizes need a zip64 extra field and there is none"));
}

struct DosTime {
  uint16_t time = 0;
  uint16_t date = 0;
};

DosTime ToDosTime(int64_t mtime) {
  const time_t t = static_cast<time_t>(mtime);
  struct tm tm {};
  if (localtime_r(&t, &tm) == nullptr || tm.tm_year < 80) return DosTime{0, (1 << 5) | 1};         // 1980-01-01
  if (tm.tm_year > 207) return DosTime{(23 << 11) | (59 << 5) | 29, (127 << 9) | (12 << 5) | 31};  // 2107-12-31
  return DosTime{static_cast<uint16_t>(tm.tm_hour << 11 | tm.tm_min << 5 | tm.tm_sec / 2),
                 static_cast<uint16_t>((tm.tm_year - 80) << 9 | (tm.tm_mon + 1) << 5 | tm.tm_mday)};
}

void Put16(std::string& out, uint16_t v) {
  out.push_back(static_cast<char>(v & 0xFF));
  out.push_back(static_cast<char>(v >> 8));
}
void Put32(std::string& out, uint32_t v) {
  Put16(out, static_cast<uint16_t>(v));
  Put16(out, static_cast<uint16_t>(v >> 16));
}
void Put64(std::string& out, uint64_t v) {
  Put32(out, static_cast<uint32_t>(v));
  Put32(out, static_cast<uint32_t>(v >> 32));
}

uint32_t Crc32(std::string_view data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t i = 0; i < data.size(); i += kChunk) {
    const size_t n = std::min(kChunk, data.size() - i);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data() + i), static_cast<uInt>(n));
  }
  return static_cast<uint32_t>(crc);
}

// Level 1: packages are made on every submission of changed code, where time matters more than the last bytes.
absl::StatusOr<std::string> Deflate(std::string_view data) {
  z_stream z{};
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return absl::InternalError("deflateInit2 failed");
  }
  std::string out;
  size_t in = 0;
  int rc = Z_OK;
  char buf[kChunk];
  while (rc != Z_STREAM_END) {
    if (z.avail_in == 0 && in < data.size()) {
      const size_t n = std::min<size_t>(data.size() - in, 1u << 30);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + in));
      z.avail_in = static_cast<uInt>(n);
      in += n;
    }
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    rc = deflate(&z, in == data.size() ? Z_FINISH : Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) {
      deflateEnd(&z);
      return absl::InternalError(absl::StrCat("deflate failed: ", rc));
    }
    out.append(buf, sizeof(buf) - z.avail_out);
  }
  deflateEnd(&z);
  return out;
}

// Inflates a raw deflate stream piece by piece into `sink`, `size` bytes at most; more is an error. Returns the bytes
// produced. Memory stays one piece whatever the entry declares.
absl::StatusOr<uint64_t> Inflate(std::string_view data, uint64_t size, const std::string& name,
                                 const std::function<absl::Status(std::string_view)>& sink) {
  z_stream z{};
  if (inflateInit2(&z, -15) != Z_OK) return absl::InternalError("inflateInit2 failed");
  uint64_t out = 0;
  size_t in = 0;
  char buf[kChunk];
  absl::Status status;
  while (true) {
    if (z.avail_in == 0 && in < data.size()) {
      const size_t n = std::min<size_t>(data.size() - in, 1u << 30);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + in));
      z.avail_in = static_cast<uInt>(n);
      in += n;
    }
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof(buf);
    const int rc = inflate(&z, Z_NO_FLUSH);
    const size_t produced = sizeof(buf) - z.avail_out;
    if (produced > size - out) {
      status = Bad(absl::StrCat(name, ": inflates to more than its declared size of ", size, " bytes"));
      break;
    }
    out += produced;
    if (produced > 0) {
      status = sink(std::string_view(buf, produced));
      if (!status.ok()) break;
    }
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR) {  // no progress with a fresh output buffer: the input ran out
      status = Bad(absl::StrCat(name, ": compressed data is truncated"));
      break;
    }
    if (rc != Z_OK) {
      status = Bad(absl::StrCat(name, ": compressed data does not inflate (", z.msg ? z.msg : "zlib error", ")"));
      break;
    }
  }
  inflateEnd(&z);
  if (!status.ok()) return status;
  return out;
}

}  // namespace

absl::StatusOr<std::vector<ZipEntryInfo>> ReadZipDirectory(std::string_view archive, const ZipLimits& limits) {
  TORUS_ASSIGN_OR_RETURN(const EndRecord end, FindEndRecord(archive));
  if (end.entries > limits.max_entries) {
    return absl::InvalidArgumentError(
        absl::StrCat("zip archive has more than ", limits.max_entries, " entries (", end.entries, ")"));
  }
  if (end.entries > end.cd_size / kCentralHeaderSize) {
    return Bad(absl::StrCat(end.entries, " entries cannot fit in a central directory of ", end.cd_size, " bytes"));
  }
  const std::string_view cd = archive.substr(end.cd_offset, end.cd_size);
  std::vector<ZipEntryInfo> entries;
  entries.reserve(end.entries);
  uint64_t total = 0;
  size_t at = 0;
  for (uint64_t i = 0; i < end.entries; ++i) {
    if (!Within(at, kCentralHeaderSize, cd.size()) || Get32(cd, at) != kCentralHeaderSig) {
      return Bad(absl::StrCat("entry ", i, ": no central directory header at offset ", end.cd_offset + at));
    }
    const uint16_t made_by = Get16(cd, at + 4), flags = Get16(cd, at + 8);
    const uint16_t name_len = Get16(cd, at + 28), extra_len = Get16(cd, at + 30), comment_len = Get16(cd, at + 32);
    const size_t variable = size_t{name_len} + extra_len + comment_len;
    if (!Within(at + kCentralHeaderSize, variable, cd.size())) {
      return Bad(absl::StrCat("entry ", i, ": central directory header runs past the directory's end"));
    }
    ZipEntryInfo entry;
    entry.path = std::string(cd.substr(at + kCentralHeaderSize, name_len));
    entry.method = Get16(cd, at + 10);
    entry.crc32 = Get32(cd, at + 16);
    entry.compressed_size = Get32(cd, at + 20);
    entry.size = Get32(cd, at + 24);
    entry.local_header_offset = Get32(cd, at + 42);
    const uint32_t external = Get32(cd, at + 38);
    const std::string name = EntryName(i, entry.path);
    TORUS_RETURN_IF_ERROR(ApplyZip64Extra(cd.substr(at + kCentralHeaderSize + name_len, extra_len),
                                          entry.size == kMax32, entry.compressed_size == kMax32,
                                          entry.local_header_offset == kMax32, entry, name));
    at += kCentralHeaderSize + variable;

    if (flags & kFlagEncrypted) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": encrypted entries are not supported"));
    }
    if (entry.method != 0 && entry.method != 8) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": compression method ", entry.method,
                                                     " is not supported; only stored (0) and deflated (8)"));
    }
    if (entry.method == 0 && entry.size != entry.compressed_size) {
      return Bad(
          absl::StrCat(name, ": stored entry's sizes differ (", entry.compressed_size, " and ", entry.size, ")"));
    }
    if (!Within(entry.local_header_offset, kLocalHeaderSize, end.cd_offset) ||
        !Within(entry.local_header_offset + kLocalHeaderSize, entry.compressed_size, end.cd_offset)) {
      return Bad(absl::StrCat(name, ": data (", entry.compressed_size, " bytes at offset ", entry.local_header_offset,
                              ") lies outside the archive"));
    }
    // Python's zipfile keeps the Unix mode (type bits included) in the high half when the archive was made on Unix.
    const uint32_t unix_mode = (made_by >> 8) == kUnixSystem ? external >> 16 : 0;
    entry.mode = unix_mode & 07777;
    if (!entry.path.empty() && entry.path.back() == '/') {
      entry.kind = EntryKind::kDirectory;
    } else if ((unix_mode & S_IFMT) == S_IFLNK) {
      entry.kind = EntryKind::kSymlink;
    } else if ((unix_mode & S_IFMT) == S_IFDIR) {
      entry.kind = EntryKind::kDirectory;
    }
    if (entry.size > limits.max_total_bytes - total) {  // total <= max_total_bytes: checked before each addition
      return absl::InvalidArgumentError(absl::StrCat("zip archive's entries inflate to more than ",
                                                     limits.max_total_bytes, " bytes in all (", name, " declares ",
                                                     entry.size, " bytes)"));
    }
    total += entry.size;
    entries.push_back(std::move(entry));
  }
  return entries;
}

absl::Status ReadZipEntryTo(std::string_view archive, const ZipEntryInfo& entry,
                            const std::function<absl::Status(std::string_view)>& sink) {
  const std::string name = absl::StrCat("entry \"", absl::CHexEscape(entry.path), "\"");
  const uint64_t at = entry.local_header_offset;
  if (!Within(at, kLocalHeaderSize, archive.size()) || Get32(archive, at) != kLocalHeaderSig) {
    return Bad(absl::StrCat(name, ": no local header at offset ", at));
  }
  const uint16_t name_len = Get16(archive, at + 26), extra_len = Get16(archive, at + 28);
  if (!Within(at + kLocalHeaderSize, size_t{name_len} + extra_len, archive.size())) {
    return Bad(absl::StrCat(name, ": local header runs past the archive's end"));
  }
  if (Get16(archive, at + 8) != entry.method || archive.substr(at + kLocalHeaderSize, name_len) != entry.path) {
    return Bad(absl::StrCat(name, ": local header does not match the central directory"));
  }
  if (Get16(archive, at + 6) & kFlagEncrypted) return absl::InvalidArgumentError(absl::StrCat(name, ": is encrypted"));
  const uint64_t data_at = at + kLocalHeaderSize + name_len + extra_len;
  if (!Within(data_at, entry.compressed_size, archive.size())) {
    return Bad(absl::StrCat(name, ": data runs past the archive's end"));
  }
  const std::string_view data = archive.substr(data_at, entry.compressed_size);
  uLong crc = crc32(0L, Z_NULL, 0);
  // The CRC is computed as the pieces pass; the caller sees every piece before the last check (an unpacker removes
  // what it wrote on an error).
  auto checked = [&](std::string_view piece) {
    crc = crc32(crc, reinterpret_cast<const Bytef*>(piece.data()), static_cast<uInt>(piece.size()));
    return sink(piece);
  };
  uint64_t produced = 0;
  if (entry.method == 0) {
    if (entry.size != entry.compressed_size) return Bad(absl::StrCat(name, ": stored entry's sizes differ"));
    for (size_t i = 0; i < data.size(); i += kChunk) {
      TORUS_RETURN_IF_ERROR(checked(data.substr(i, std::min(kChunk, data.size() - i))));
    }
    produced = data.size();
  } else if (entry.method == 8) {
    TORUS_ASSIGN_OR_RETURN(produced, Inflate(data, entry.size, name, checked));
  } else {
    return absl::InvalidArgumentError(absl::StrCat(name, ": compression method ", entry.method, " is not supported"));
  }
  if (produced != entry.size) {
    return Bad(absl::StrCat(name, ": inflates to ", produced, " bytes, not the declared ", entry.size));
  }
  if (static_cast<uint32_t>(crc) != entry.crc32) {
    return Bad(absl::StrCat(name, ": CRC-32 mismatch (data has ", absl::Hex(static_cast<uint32_t>(crc), absl::kZeroPad8),
                            ", the directory says ", absl::Hex(entry.crc32, absl::kZeroPad8), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadZipEntry(std::string_view archive, const ZipEntryInfo& entry) {
  std::string out;
  TORUS_RETURN_IF_ERROR(ReadZipEntryTo(archive, entry, [&out](std::string_view piece) {
    out.append(piece.data(), piece.size());
    return absl::OkStatus();
  }));
  return out;
}

struct ZipWriter::Impl {
  struct Central {
    std::string path;
    uint32_t external = 0;
    uint16_t method = 0;
    uint16_t flags = 0;
    DosTime time;
    uint32_t crc = 0;
    uint64_t compressed_size = 0;
    uint64_t size = 0;
    uint64_t offset = 0;
  };

  std::string path;
  int fd = -1;
  uint64_t offset = 0;
  std::vector<Central> entries;

  absl::Status Write(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
      bytes.remove_prefix(n);
      offset += n;
    }
    return absl::OkStatus();
  }
};

ZipWriter::ZipWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ZipWriter::~ZipWriter() {
  if (impl_->fd >= 0) ::close(impl_->fd);
}

absl::StatusOr<std::unique_ptr<ZipWriter>> ZipWriter::Create(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (impl->fd < 0) return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  return std::unique_ptr<ZipWriter>(new ZipWriter(std::move(impl)));
}

absl::Status ZipWriter::Add(std::string_view path, EntryKind kind, uint32_t mode, int64_t mtime,
                            std::string_view data) {
  if (impl_->fd < 0) return absl::FailedPreconditionError(absl::StrCat(impl_->path, ": archive already finished"));
  if (path.empty() || path.size() > kMax16) {
    return absl::InvalidArgumentError(
        absl::StrCat("zip entry path must be 1 to 65535 bytes: \"", absl::CHexEscape(AbslView(path)), "\""));
  }
  Impl::Central e;
  e.path = std::string(path);
  const uint32_t type = kind == EntryKind::kDirectory ? S_IFDIR : kind == EntryKind::kSymlink ? S_IFLNK : S_IFREG;
  e.external = (type | (mode & 07777)) << 16 | (kind == EntryKind::kDirectory ? 0x10 : 0);
  e.flags = std::any_of(path.begin(), path.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; })
                ? kFlagUtf8
                : 0;
  e.time = ToDosTime(mtime);
  e.crc = Crc32(data);
  e.size = data.size();
  e.offset = impl_->offset;
  std::string compressed;
  // A sample tells incompressible data (weights, archives, images) early: it is stored without deflating it all.
  constexpr size_t kSample = 64 << 10;
  bool worth_deflating = kind == EntryKind::kFile;
  if (worth_deflating && data.size() > 4 * kSample) {
    TORUS_ASSIGN_OR_RETURN(std::string sample, Deflate(data.substr(0, kSample)));
    worth_deflating = sample.size() < kSample * 95 / 100;
  }
  if (worth_deflating) {
    TORUS_ASSIGN_OR_RETURN(compressed, Deflate(data));
    // Data that does not shrink (weights, archives, images) is stored, as zip tools do: no bigger, and no inflate.
    if (compressed.size() < data.size()) {
      e.method = 8;
      data = compressed;
    }
  }
  e.compressed_size = data.size();
  const bool zip64 = e.size >= kMax32 || e.compressed_size >= kMax32;
  std::string header;
  Put32(header, kLocalHeaderSig);
  Put16(header, zip64 ? 45 : 20);
  Put16(header, e.flags);
  Put16(header, e.method);
  Put16(header, e.time.time);
  Put16(header, e.time.date);
  Put32(header, e.crc);
  Put32(header, zip64 ? kMax32 : static_cast<uint32_t>(e.compressed_size));
  Put32(header, zip64 ? kMax32 : static_cast<uint32_t>(e.size));
  Put16(header, static_cast<uint16_t>(path.size()));
  Put16(header, zip64 ? 20 : 0);
  header.append(path);
  if (zip64) {  // a local zip64 field holds both sizes
    Put16(header, kZip64ExtraId);
    Put16(header, 16);
    Put64(header, e.size);
    Put64(header, e.compressed_size);
  }
  TORUS_RETURN_IF_ERROR(impl_->Write(header));
  TORUS_RETURN_IF_ERROR(impl_->Write(data));
  impl_->entries.push_back(std::move(e));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ZipWriter::Finish() {
  if (impl_->fd < 0) return absl::FailedPreconditionError(absl::StrCat(impl_->path, ": archive already finished"));
  const uint64_t cd_offset = impl_->offset;
  std::string cd;
  for (const Impl::Central& e : impl_->entries) {
    std::string extra;
    if (e.size >= kMax32) Put64(extra, e.size);
    if (e.compressed_size >= kMax32) Put64(extra, e.compressed_size);
    if (e.offset >= kMax32) Put64(extra, e.offset);
    const bool zip64 = !extra.empty();
    Put32(cd, kCentralHeaderSig);
    Put16(cd, kUnixSystem << 8 | (zip64 ? 45 : 20));
    Put16(cd, zip64 ? 45 : 20);
    Put16(cd, e.flags);
    Put16(cd, e.method);
    Put16(cd, e.time.time);
    Put16(cd, e.time.date);
    Put32(cd, e.crc);
    Put32(cd, static_cast<uint32_t>(std::min<uint64_t>(e.compressed_size, kMax32)));
    Put32(cd, static_cast<uint32_t>(std::min<uint64_t>(e.size, kMax32)));
    Put16(cd, static_cast<uint16_t>(e.path.size()));
    Put16(cd, static_cast<uint16_t>(zip64 ? extra.size() + 4 : 0));
    Put16(cd, 0);  // comment
    Put16(cd, 0);  // disk
    Put16(cd, 0);  // internal attributes
    Put32(cd, e.external);
    Put32(cd, static_cast<uint32_t>(std::min<uint64_t>(e.offset, kMax32)));
    cd.append(e.path);
    if (zip64) {
      Put16(cd, kZip64ExtraId);
      Put16(cd, static_cast<uint16_t>(extra.size()));
      cd.append(extra);
    }
    if (cd.size() >= kChunk) {
      TORUS_RETURN_IF_ERROR(impl_->Write(cd));
      cd.clear();
    }
  }
  TORUS_RETURN_IF_ERROR(impl_->Write(cd));
  cd.clear();
  const uint64_t count = impl_->entries.size();
  const uint64_t cd_size = impl_->offset - cd_offset;
  std::string end;
  if (count >= kMax16 || cd_size >= kMax32 || cd_offset >= kMax32) {
    const uint64_t record = impl_->offset;
    Put32(end, kZip64EndSig);
    Put64(end, kZip64EndSize - 12);  // the record's size after this field
    Put16(end, kUnixSystem << 8 | 45);
    Put16(end, 45);
    Put32(end, 0);
    Put32(end, 0);
    Put64(end, count);
    Put64(end, count);
    Put64(end, cd_size);
    Put64(end, cd_offset);
    Put32(end, kZip64LocatorSig);
    Put32(end, 0);
    Put64(end, record);
    Put32(end, 1);
  }
  Put32(end, kEndSig);
  Put16(end, 0);
  Put16(end, 0);
  Put16(end, static_cast<uint16_t>(std::min<uint64_t>(count, kMax16)));
  Put16(end, static_cast<uint16_t>(std::min<uint64_t>(count, kMax16)));
  Put32(end, static_cast<uint32_t>(std::min<uint64_t>(cd_size, kMax32)));
  Put32(end, static_cast<uint32_t>(std::min<uint64_t>(cd_offset, kMax32)));
  Put16(end, 0);
  TORUS_RETURN_IF_ERROR(impl_->Write(end));
  const int fd = std::exchange(impl_->fd, -1);
  if (::close(fd) != 0) {
    return absl::InternalError(absl::StrCat("cannot write ", impl_->path, ": ", std::strerror(errno)));
  }
  return impl_->offset;
}

}  // namespace torus::package
