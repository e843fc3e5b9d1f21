#include "torus/package/unpack.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "torus/common/status.h"
#include "torus/common/strings.h"

namespace torus::package {
namespace {

constexpr size_t kMaxSymlinkTarget = 4095;  // PATH_MAX less the NUL
constexpr int kMaxSymlinkHops = 40;         // as Linux's MAXSYMLINKS
constexpr size_t kMaxPath = 4095;           // PATH_MAX less the NUL
constexpr size_t kMaxSegment = 255;         // NAME_MAX
constexpr size_t kMaxDepth = 256;           // directories below the destination


absl::Status Refuse(std::string_view entry, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("entry ", Quoted(entry), ": ", AbslView(why)));
}

// One entry to write, with its path normalized to '/'-joined segments (no trailing '/').
struct PlannedEntry {
  const ZipEntryInfo* info;
  std::string path;
  std::string target;  // symlinks
};

struct Plan {
  std::vector<ZipEntryInfo> infos;
  std::set<std::string> directories;  // explicit and implicit; sorted, so parents come first
  std::vector<PlannedEntry> files;
  std::vector<PlannedEntry> symlinks;
};

// The entry's name as segments; refuses absolute paths, "..", backslashes and NULs. Empty and "." segments are
// dropped ("./a//b" is "a/b"), as zipfile does.
absl::StatusOr<std::vector<std::string>> Segments(const std::string& name) {
  if (name.find('\0') != std::string::npos) return Refuse(name, "NUL in the name");
  // Paths the file system takes: longer ones could not be created, and deep ones would cost their depth per entry.
  if (name.size() > kMaxPath) return Refuse(name.substr(0, 64) + "...", absl::StrCat("path longer than ", kMaxPath, " bytes"));
  if (name.find('\\') != std::string::npos) return Refuse(name, "backslash in the name");
  if (!name.empty() && name.front() == '/') return Refuse(name, "absolute path");
  std::vector<std::string> segments;
  for (absl::string_view s : absl::StrSplit(name, '/')) {
    if (s.empty() || s == ".") continue;
    if (s == "..") return Refuse(name, "\"..\" segment in the path");
    if (s.size() > kMaxSegment) return Refuse(name, absl::StrCat("a name in the path is longer than ", kMaxSegment, " bytes"));
    segments.emplace_back(s);
  }
  if (segments.size() > kMaxDepth) return Refuse(name, absl::StrCat("more than ", kMaxDepth, " directories deep"));
  return segments;
}

// Resolves `target` from the directory `dir` (segments, none a symlink) as the kernel would in the unpacked tree,
// following the archive's own symlinks; refuses when it leaves the root at any step.
absl::Status ResolveWithin(const std::map<std::string, std::string>& links, std::vector<std::string>& dir,
                           std::string_view target, int& hops, std::string_view link, std::string_view link_target) {
  for (absl::string_view s : absl::StrSplit(AbslView(target), '/')) {
    if (s.empty() || s == ".") continue;
    if (s == "..") {
      if (dir.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("symlink ", Quoted(link), " -> ", Quoted(link_target),
                                                       ": target points outside the destination"));
      }
      dir.pop_back();
      continue;
    }
    dir.emplace_back(s);
    const auto it = links.find(absl::StrJoin(dir, "/"));
    if (it == links.end()) continue;
    if (++hops > kMaxSymlinkHops) {
      return absl::InvalidArgumentError(
          absl::StrCat("symlink ", Quoted(link), " -> ", Quoted(link_target), ": too many levels of symlinks"));
    }
    dir.pop_back();  // a target is relative to its link's directory
    TORUS_RETURN_IF_ERROR(ResolveWithin(links, dir, it->second, hops, link, link_target));
  }
  return absl::OkStatus();
}

// Reads the directory and checks every path and symlink target; reads symlinks' targets but no file's data.
absl::StatusOr<Plan> MakePlan(std::string_view archive, const ZipLimits& limits) {
  Plan plan;
  TORUS_ASSIGN_OR_RETURN(plan.infos, ReadZipDirectory(archive, limits));
  std::map<std::string, EntryKind> explicit_kinds;
  std::map<std::string, std::string> links;
  std::vector<std::pair<const ZipEntryInfo*, std::vector<std::string>>> parsed;
  for (const ZipEntryInfo& info : plan.infos) {
    TORUS_ASSIGN_OR_RETURN(std::vector<std::string> segments, Segments(info.path));
    if (segments.empty()) {
      if (info.kind == EntryKind::kDirectory) continue;  // "./": the root itself
      return Refuse(info.path, "empty path");
    }
    const std::string path = absl::StrJoin(segments, "/");
    if (!explicit_kinds.emplace(path, info.kind).second) return Refuse(info.path, "duplicate entry");
    if (info.kind == EntryKind::kSymlink) {
      if (info.size > kMaxSymlinkTarget) return Refuse(info.path, "symlink target is empty, too long or holds a NUL");
      TORUS_ASSIGN_OR_RETURN(std::string target, ReadZipEntry(archive, info));
      if (target.empty() || target.size() > kMaxSymlinkTarget || target.find('\0') != std::string::npos) {
        return Refuse(info.path, "symlink target is empty, too long or holds a NUL");
      }
      links.emplace(path, std::move(target));
    }
    parsed.emplace_back(&info, std::move(segments));
  }
  for (auto& [info, segments] : parsed) {
    std::string path = absl::StrJoin(segments, "/");
    std::string parent;
    for (size_t i = 0; i + 1 < segments.size(); ++i) {
      absl::StrAppend(&parent, i ? "/" : "", segments[i]);
      const auto it = explicit_kinds.find(parent);
      if (it != explicit_kinds.end() && it->second != EntryKind::kDirectory) {
        return Refuse(info->path,
                      absl::StrCat(Quoted(parent), " is a ", it->second == EntryKind::kSymlink ? "symlink" : "file"));
      }
      plan.directories.insert(parent);
    }
    switch (info->kind) {
      case EntryKind::kDirectory:
        plan.directories.insert(path);
        break;
      case EntryKind::kFile:
        plan.files.push_back(PlannedEntry{info, std::move(path), ""});
        break;
      case EntryKind::kSymlink: {
        const std::string& target = links.at(path);
        if (target.front() == '/') {
          return absl::InvalidArgumentError(
              absl::StrCat("symlink ", Quoted(info->path), " -> ", Quoted(target), ": absolute targets are not allowed"));
        }
        std::vector<std::string> dir(segments.begin(), segments.end() - 1);
        int hops = 0;
        TORUS_RETURN_IF_ERROR(ResolveWithin(links, dir, target, hops, info->path, target));
        plan.symlinks.push_back(PlannedEntry{info, std::move(path), target});
        break;
      }
    }
  }
  return plan;
}

// Closes a file descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      Reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// Opens the directory `rel` below `root` one segment at a time, never following a symlink.
absl::StatusOr<Fd> OpenDirBelow(int root, std::string_view rel, const std::string& shown_root) {
  Fd dir(::dup(root));
  if (dir.get() < 0) return ErrnoError("cannot open", shown_root);
  for (absl::string_view s : absl::StrSplit(AbslView(rel), '/', absl::SkipEmpty())) {
    Fd next(::openat(dir.get(), std::string(s).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (next.get() < 0) return ErrnoError("cannot open", absl::StrCat(shown_root, "/", AbslView(rel)));
    dir = std::move(next);
  }
  return dir;
}

std::pair<std::string_view, std::string_view> SplitParent(std::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return {"", path};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

absl::Status WriteAll(int fd, std::string_view data, const std::string& shown) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("cannot write", shown);
    data.remove_prefix(n);
  }
  return absl::OkStatus();
}

// Writes the planned tree below the directory `root` (shown as `shown_root` in errors): directories, then files, then
// symlinks, so that no symlink exists while anything is written.
absl::Status WriteTree(std::string_view archive, const Plan& plan, int root, const std::string& shown_root) {
  for (const std::string& dir : plan.directories) {
    const auto [parent, name] = SplitParent(dir);
    TORUS_ASSIGN_OR_RETURN(Fd parent_fd, OpenDirBelow(root, parent, shown_root));
    const std::string shown = absl::StrCat(shown_root, "/", dir);
    if (::mkdirat(parent_fd.get(), std::string(name).c_str(), 0700) != 0) return ErrnoError("cannot create", shown);
    Fd fd(::openat(parent_fd.get(), std::string(name).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (fd.get() < 0 || ::fchmod(fd.get(), 0755) != 0) return ErrnoError("cannot set the mode of", shown);
  }
  std::string open_parent = "\n";  // the files come in archive order; reuse the parent while it stays the same
  Fd parent_fd;
  for (const PlannedEntry& file : plan.files) {
    const auto [parent, name] = SplitParent(file.path);
    if (parent != open_parent) {
      TORUS_ASSIGN_OR_RETURN(parent_fd, OpenDirBelow(root, parent, shown_root));
      open_parent = std::string(parent);
    }
    const std::string shown = absl::StrCat(shown_root, "/", file.path);
    Fd fd(::openat(parent_fd.get(), std::string(name).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                   0600));
    if (fd.get() < 0) return ErrnoError("cannot create", shown);
    // Written as it inflates: memory stays one piece whatever the entry's size.
    TORUS_RETURN_IF_ERROR(ReadZipEntryTo(archive, *file.info, [&](std::string_view piece) {
      return WriteAll(fd.get(), piece, shown);
    }));
    if (::fchmod(fd.get(), (file.info->mode & 0111) ? 0755 : 0644) != 0) return ErrnoError("cannot set the mode of", shown);
    if (::close(fd.Release()) != 0) return ErrnoError("cannot write", shown);
  }
  for (const PlannedEntry& link : plan.symlinks) {
    const auto [parent, name] = SplitParent(link.path);
    TORUS_ASSIGN_OR_RETURN(Fd dir, OpenDirBelow(root, parent, shown_root));
    if (::symlinkat(link.target.c_str(), dir.get(), std::string(name).c_str()) != 0) {
      return ErrnoError("cannot create symlink", absl::StrCat(shown_root, "/", link.path));
    }
  }
  if (::fchmod(root, 0755) != 0) return ErrnoError("cannot set the mode of", shown_root);
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckZip(std::string_view archive, const ZipLimits& limits) {
  TORUS_ASSIGN_OR_RETURN(const Plan plan, MakePlan(archive, limits));
  for (const PlannedEntry& file : plan.files) {
    TORUS_RETURN_IF_ERROR(ReadZipEntryTo(archive, *file.info, [](std::string_view) { return absl::OkStatus(); }));
  }
  return absl::OkStatus();
}

absl::Status UnpackZip(std::string_view archive, const std::string& dest, const ZipLimits& limits) {
  std::string target = dest;
  while (target.size() > 1 && target.back() == '/') target.pop_back();
  if (target.empty() || target == "/") {
    return absl::InvalidArgumentError(absl::StrCat("invalid destination ", Quoted(dest)));
  }
  struct stat st;
  if (::lstat(target.c_str(), &st) == 0) return absl::AlreadyExistsError(absl::StrCat(target, " already exists"));
  TORUS_ASSIGN_OR_RETURN(const Plan plan, MakePlan(archive, limits));

  std::string tmp = absl::StrCat(target, ".tmp-XXXXXX");
  if (::mkdtemp(tmp.data()) == nullptr) return ErrnoError("cannot create a directory beside", target);
  absl::Status status = [&]() -> absl::Status {
    Fd root(::open(tmp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (root.get() < 0) return ErrnoError("cannot open", tmp);
    TORUS_RETURN_IF_ERROR(WriteTree(archive, plan, root.get(), tmp));
    // RENAME_NOREPLACE: a plain rename would replace an empty directory created at `dest` meanwhile.
    int rc = ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && errno == EINVAL) {  // a file system without RENAME_NOREPLACE
      rc = ::rename(tmp.c_str(), target.c_str());
    }
    if (rc == 0) return absl::OkStatus();
    if (errno == EEXIST || errno == ENOTEMPTY) return absl::AlreadyExistsError(absl::StrCat(target, " already exists"));
    return ErrnoError(absl::StrCat("cannot rename ", tmp, " to"), target);
  }();
  if (!status.ok()) {
    std::error_code ignored;
    std::filesystem::remove_all(tmp, ignored);  // removes symlinks, never what they point to
  }
  return status;
}

}  // namespace torus::package
