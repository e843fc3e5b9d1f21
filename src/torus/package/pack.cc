#include "torus/package/pack.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "torus/common/status.h"
#include "torus/common/strings.h"
#include "torus/package/zip.h"

namespace torus::package {
namespace {

// Bumped when the hashed framing changes, so that old and new names never collide.
constexpr std::string_view kHashVersion = "torus-package-v1";

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }
  void Update(std::string_view data) { EVP_DigestUpdate(ctx_.get(), data.data(), data.size()); }
  void UpdateFramed(std::string_view data) {  // the length first, so that no two sequences hash alike
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>(static_cast<uint64_t>(data.size()) >> (8 * i));
    Update(std::string_view(len, 8));
    Update(data);
  }
  std::string Hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), digest, &n);
    return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), n));
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

// Reads `path` (with `follow`, through a symlink) in 1 MiB pieces passed to `piece`; returns the bytes read.
absl::StatusOr<uint64_t> ReadPieces(const std::string& path, bool follow,
                                    const std::function<void(std::string_view)>& piece) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
  if (fd < 0) return ErrnoError("cannot read", path);
  std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  while (true) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const absl::Status status = ErrnoError("cannot read", path);
      ::close(fd);
      return status;
    }
    if (n == 0) break;
    piece(std::string_view(buf.data(), static_cast<size_t>(n)));
    total += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return total;
}

// One gitignore line, parsed. `segments` are matched against a path's segments; "**" spans any number of them.
struct Pattern {
  std::vector<std::string> segments;
  bool negate = false;
  bool dir_only = false;
};

std::optional<Pattern> ParsePattern(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  while (!line.empty() && line.back() == ' ' && !(line.size() > 1 && line[line.size() - 2] == '\\')) {
    line.remove_suffix(1);
  }
  if (line.empty() || line.front() == '#') return std::nullopt;
  Pattern p;
  if (line.front() == '!') {
    p.negate = true;
    line.remove_prefix(1);
  }
  if (!line.empty() && line.back() == '/') {
    p.dir_only = true;
    line.remove_suffix(1);
  }
  // A slash at the start or in the middle anchors the pattern at the top; otherwise it matches at any depth.
  const bool anchored = line.find('/') != std::string_view::npos;
  if (!line.empty() && line.front() == '/') line.remove_prefix(1);
  if (line.empty()) return std::nullopt;
  if (!anchored) p.segments.push_back("**");
  for (absl::string_view s : absl::StrSplit(AbslView(line), '/', absl::SkipEmpty())) p.segments.emplace_back(s);
  return p;
}

std::vector<Pattern> ParsePatterns(const std::vector<std::string>& lines) {
  std::vector<Pattern> patterns;
  for (const std::string& line : lines) {
    if (auto p = ParsePattern(line)) patterns.push_back(std::move(*p));
  }
  return patterns;
}

bool MatchSegments(const std::vector<std::string>& pattern, size_t pi, const std::vector<std::string>& path,
                   size_t si) {
  if (pi == pattern.size()) return si == path.size();
  if (pattern[pi] == "**") {
    if (pi + 1 == pattern.size()) return si < path.size();  // "a/**" is what is inside a, not a itself
    for (size_t k = si; k <= path.size(); ++k) {
      if (MatchSegments(pattern, pi + 1, path, k)) return true;
    }
    return false;
  }
  if (si == path.size() || fnmatch(pattern[pi].c_str(), path[si].c_str(), 0) != 0) return false;
  return MatchSegments(pattern, pi + 1, path, si + 1);
}

// Whether the last pattern matching `path` itself excludes it (true) or re-includes it (false); nullopt when none
// matches. Parents are not looked at.
std::optional<bool> Decide(const std::vector<Pattern>& patterns, const std::vector<std::string>& path, bool is_dir) {
  std::optional<bool> excluded;
  for (const Pattern& p : patterns) {
    if (p.dir_only && !is_dir) continue;
    if (MatchSegments(p.segments, 0, path, 0)) excluded = !p.negate;
  }
  return excluded;
}

struct Item {
  std::string path;  // in the archive: '/'-joined, a directory's ending in '/'
  std::string source;
  EntryKind kind = EntryKind::kFile;
  uint32_t mode = 0;
  int64_t mtime = 0;
  struct stat st {};  // as walked, for StampDirectory
};

// The patterns of one .gitignore file, `depth` segments below the packed directory.
struct IgnoreLevel {
  size_t depth = 0;
  std::vector<Pattern> patterns;
};

struct Walker {
  const PackOptions& options;
  std::vector<Pattern> excludes;
  std::string prefix;  // "<basename>/" with include_parent_dir
  dev_t out_dev = 0;   // the archive being written, should it lie inside the directory
  ino_t out_ino = 0;
  std::vector<IgnoreLevel> levels;
  std::vector<Item> items;

  bool Excluded(const std::vector<std::string>& path, bool is_dir) const {
    if (Decide(excludes, path, is_dir).value_or(false)) return true;
    std::optional<bool> excluded;
    for (const IgnoreLevel& level : levels) {  // deeper files come later and win, as in git
      const std::vector<std::string> below(path.begin() + level.depth, path.end());
      if (auto d = Decide(level.patterns, below, is_dir)) excluded = d;
    }
    return excluded.value_or(false);
  }

  absl::Status ReadIgnoreFile(const std::string& file, size_t depth) {
    struct stat st;
    if (::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return absl::OkStatus();
    TORUS_ASSIGN_OR_RETURN(const std::string text, ReadFile(file));
    std::vector<std::string> lines = absl::StrSplit(text, '\n');
    levels.push_back(IgnoreLevel{depth, ParsePatterns(lines)});
    return absl::OkStatus();
  }

  // Hashes a file's bytes as UpdateFramed would, reading in pieces (the name alone needs no copy of the file).
  static absl::Status HashFileFramed(Sha256& hash, const std::string& file) {
    struct stat st {};
    if (::lstat(file.c_str(), &st) != 0) return ErrnoError("cannot stat", file);
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>(size >> (8 * i));
    hash.Update(std::string_view(len, 8));
    TORUS_ASSIGN_OR_RETURN(const uint64_t read, ReadPieces(file, false, [&](std::string_view p) { hash.Update(p); }));
    if (read != size) return absl::FailedPreconditionError(absl::StrCat(file, " changed while it was read; try again"));
    return absl::OkStatus();
  }

  static absl::StatusOr<std::string> ReadFile(const std::string& file) {
    std::string data;
    TORUS_RETURN_IF_ERROR(ReadPieces(file, false, [&](std::string_view p) { data.append(p.data(), p.size()); }).status());
    return data;
  }

  absl::Status Walk(const std::string& dir, std::vector<std::string>& rel) {
    const size_t levels_before = levels.size();
    if (options.use_gitignore) TORUS_RETURN_IF_ERROR(ReadIgnoreFile(dir + "/.gitignore", rel.size()));
    std::vector<std::string> names;
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return ErrnoError("cannot read directory", dir);
    errno = 0;
    while (const dirent* e = ::readdir(d)) {
      const std::string_view name = e->d_name;
      if (name != "." && name != ".." && name != ".git") names.emplace_back(name);
    }
    const int read_errno = errno;
    ::closedir(d);
    if (read_errno != 0) {
      errno = read_errno;
      return ErrnoError("cannot read directory", dir);
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const std::string source = absl::StrCat(dir, "/", name);
      struct stat st;
      if (::lstat(source.c_str(), &st) != 0) return ErrnoError("cannot stat", source);
      EntryKind kind;
      if (S_ISREG(st.st_mode)) {
        kind = EntryKind::kFile;
        if (st.st_dev == out_dev && st.st_ino == out_ino) continue;
      } else if (S_ISDIR(st.st_mode)) {
        kind = EntryKind::kDirectory;
      } else if (S_ISLNK(st.st_mode)) {
        kind = EntryKind::kSymlink;
      } else {
        continue;  // sockets, FIFOs, devices
      }
      rel.push_back(name);
      const bool is_dir = kind == EntryKind::kDirectory;
      if (!Excluded(rel, is_dir)) {
        items.push_back(Item{absl::StrCat(prefix, absl::StrJoin(rel, "/"), is_dir ? "/" : ""), source, kind,
                             static_cast<uint32_t>(st.st_mode & 0777), static_cast<int64_t>(st.st_mtim.tv_sec), st});
        if (is_dir) TORUS_RETURN_IF_ERROR(Walk(source, rel));
      }
      rel.pop_back();
    }
    levels.resize(levels_before);
    return absl::OkStatus();
  }
};

absl::StatusOr<std::string> ReadLink(const std::string& path) {
  std::string target(4096, '\0');
  const ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
  if (n < 0) return ErrnoError("cannot read symlink", path);
  target.resize(n);
  return target;
}

absl::Status TooLarge(const std::string& dir, uint64_t max_bytes, uint64_t size, bool finished) {
  return absl::FailedPreconditionError(absl::StrCat("the package of ", dir, " is larger than the limit of ", max_bytes,
                                                    " bytes (", size, finished ? " bytes)" : " bytes written so far)"));
}

// Walks `dir`, hashing every entry for the package's name and, with a writer, adding it to the archive.
absl::StatusOr<Packed> Pack(const std::string& dir, const std::string& out_path, const PackOptions& options,
                            Walker& walker, ZipWriter* writer) {
  struct stat out;
  if (writer != nullptr) {
    if (::stat(out_path.c_str(), &out) != 0) return ErrnoError("cannot stat", out_path);
    walker.out_dev = out.st_dev;
    walker.out_ino = out.st_ino;
  }
  std::vector<std::string> rel;
  TORUS_RETURN_IF_ERROR(walker.Walk(dir, rel));
  std::sort(walker.items.begin(), walker.items.end(), [](const Item& a, const Item& b) { return a.path < b.path; });

  Packed packed;
  Sha256 hash;
  hash.UpdateFramed(kHashVersion);
  for (const Item& item : walker.items) {
    std::string data;
    const bool stream = writer == nullptr && item.kind == EntryKind::kFile;  // the name only: no copy of the file
    if (item.kind == EntryKind::kFile && !stream) {
      TORUS_ASSIGN_OR_RETURN(data, Walker::ReadFile(item.source));
      ++packed.files;
    } else if (item.kind == EntryKind::kSymlink) {
      TORUS_ASSIGN_OR_RETURN(data, ReadLink(item.source));
    }
    const bool exec = item.kind == EntryKind::kFile && (item.mode & 0111) != 0;
    const char kind = item.kind == EntryKind::kFile ? 'f' : item.kind == EntryKind::kDirectory ? 'd' : 'l';
    hash.UpdateFramed(item.path);
    hash.Update(std::string_view(&kind, 1));
    hash.Update(exec ? "x" : "-");
    if (stream) {
      TORUS_RETURN_IF_ERROR(Walker::HashFileFramed(hash, item.source));
      ++packed.files;
    } else {
      hash.UpdateFramed(data);
    }
    if (writer == nullptr) continue;
    TORUS_RETURN_IF_ERROR(writer->Add(item.path, item.kind, item.mode, item.mtime, data));
    if (::stat(out_path.c_str(), &out) != 0) return ErrnoError("cannot stat", out_path);
    if (static_cast<uint64_t>(out.st_size) > options.max_bytes) {
      return TooLarge(dir, options.max_bytes, out.st_size, false);
    }
  }
  packed.name = absl::StrCat("_torus_pkg_", hash.Hex().substr(0, 32), ".zip");
  if (writer == nullptr) return packed;
  TORUS_ASSIGN_OR_RETURN(packed.size, writer->Finish());
  if (packed.size > options.max_bytes) return TooLarge(dir, options.max_bytes, packed.size, true);
  packed.zip_path = out_path;
  return packed;
}

}  // namespace

namespace {

// What to walk for `dir`: its patterns, and the entries' prefix for include_parent_dir.
absl::StatusOr<Walker> WalkerFor(const std::string& dir, const PackOptions& options) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("not a directory: ", dir));
  }
  Walker walker{options, ParsePatterns(options.excludes)};
  if (options.include_parent_dir) {
    std::string abs = std::filesystem::absolute(dir).lexically_normal().string();
    while (!abs.empty() && abs.back() == '/') abs.pop_back();
    const std::string base = abs.substr(abs.rfind('/') + 1);
    if (base.empty()) return absl::InvalidArgumentError(absl::StrCat("directory has no name to prefix: ", dir));
    walker.prefix = base + "/";
  }
  return walker;
}

}  // namespace

absl::StatusOr<Packed> PackDirectory(const std::string& dir, const std::string& out_path, const PackOptions& options) {
  TORUS_ASSIGN_OR_RETURN(Walker walker, WalkerFor(dir, options));
  TORUS_ASSIGN_OR_RETURN(std::unique_ptr<ZipWriter> writer, ZipWriter::Create(out_path));
  absl::StatusOr<Packed> packed = Pack(dir, out_path, options, walker, writer.get());
  if (!packed.ok()) {
    writer.reset();
    ::unlink(out_path.c_str());  // no partial archive is left behind
  }
  return packed;
}

absl::StatusOr<TreeStamp> StampDirectory(const std::string& dir, const PackOptions& options) {
  TORUS_ASSIGN_OR_RETURN(Walker walker, WalkerFor(dir, options));
  std::vector<std::string> rel;
  TORUS_RETURN_IF_ERROR(walker.Walk(dir, rel));
  std::sort(walker.items.begin(), walker.items.end(), [](const Item& a, const Item& b) { return a.path < b.path; });
  Sha256 hash;
  hash.UpdateFramed(kHashVersion);
  hash.UpdateFramed(std::filesystem::absolute(dir).lexically_normal().string());
  TreeStamp stamp;
  auto ns = [](const timespec& t) { return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec; };
  for (const Item& item : walker.items) {
    const struct stat& st = item.st;
    hash.UpdateFramed(item.path);
    hash.UpdateFramed(absl::StrCat(st.st_mode, ":", st.st_size, ":", ns(st.st_mtim), ":", ns(st.st_ctim), ":",
                                   st.st_ino, ":", st.st_dev));
    stamp.newest_change_ns = std::max({stamp.newest_change_ns, ns(st.st_mtim), ns(st.st_ctim)});
  }
  stamp.fingerprint = hash.Hex();
  return stamp;
}

absl::StatusOr<std::string> PackageNameOfDirectory(const std::string& dir, const PackOptions& options) {
  TORUS_ASSIGN_OR_RETURN(Walker walker, WalkerFor(dir, options));
  TORUS_ASSIGN_OR_RETURN(Packed packed, Pack(dir, "", options, walker, nullptr));
  return packed.name;
}

bool MatchesExclude(const std::vector<std::string>& patterns, std::string_view path, bool is_dir) {
  const std::vector<Pattern> parsed = ParsePatterns(patterns);
  const std::vector<std::string> segments = absl::StrSplit(AbslView(path), '/', absl::SkipEmpty());
  // As in git, nothing below an excluded directory can be re-included.
  std::vector<std::string> prefix;
  for (size_t i = 0; i + 1 < segments.size(); ++i) {
    prefix.push_back(segments[i]);
    if (Decide(parsed, prefix, /*is_dir=*/true).value_or(false)) return true;
  }
  return Decide(parsed, segments, is_dir).value_or(false);
}

std::string Sha256Hex(std::string_view data) {
  Sha256 hash;
  hash.Update(data);
  return hash.Hex();
}

absl::StatusOr<std::string> Sha256File(const std::string& path) {
  Sha256 hash;
  TORUS_RETURN_IF_ERROR(ReadPieces(path, true, [&](std::string_view p) { hash.Update(p); }).status());
  return hash.Hex();
}

}  // namespace torus::package
