#include "torus/node/log_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "torus/common/utf8.h"
#include "torus/node/worker_supervisor.h"

namespace torus::node {
namespace {

constexpr char kAgentName[] = "agent";
constexpr char kTpuPrefix[] = "tpu/";
constexpr char kWorkersPrefix[] = "workers/";
constexpr char kWorkerLogSuffix[] = ".log";
constexpr size_t kMaxListedPerDir = 10'000;

int64_t ModifiedMillis(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
}

// Opens `dir` for listing and reading only when it is a real directory (not a symbolic link) that nobody but its
// owner can write, and whose owner is this process's user or root: /tmp/tpu_logs lives in a world-writable directory,
// where another user could otherwise plant a link to /etc or a directory of their own links. -1 otherwise.
int OpenTrustedDir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode) || (st.st_uid != geteuid() && st.st_uid != 0) ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Regular files directly under `dir` (symbolic links, names that are not UTF-8, and everything else left out), by
// name; nothing when the directory is not trusted (OpenTrustedDir).
std::vector<std::pair<std::string, struct stat>> RegularFiles(const std::string& dir) {
  std::vector<std::pair<std::string, struct stat>> out;
  const int fd = OpenTrustedDir(dir);
  if (fd < 0) return out;
  DIR* d = fdopendir(fd);
  if (d == nullptr) {
    close(fd);
    return out;
  }
  const int dir_fd = dirfd(d);
  while (struct dirent* entry = readdir(d)) {
    if (out.size() >= kMaxListedPerDir) break;
    const std::string name = entry->d_name;
    if (name == "." || name == ".." || !IsValidUtf8(name)) continue;
    struct stat st;
    if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    out.emplace_back(name, st);
  }
  closedir(d);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

absl::Status NameError(const std::string& name, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("name '", name, "' ", why,
                                                 "; expected agent, tpu/<file> or workers/<worker id> as ListLogs "
                                                 "names them"));
}

}  // namespace

std::vector<LogFileEntry> LogFiles::List() const {
  std::vector<LogFileEntry> out;
  struct stat st;
  if (!options_.agent_log.empty() && stat(options_.agent_log.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    out.push_back({kAgentName, static_cast<int64_t>(st.st_size), ModifiedMillis(st)});
  }
  if (!options_.tpu_log_dir.empty()) {
    for (const auto& [file, fst] : RegularFiles(options_.tpu_log_dir)) {
      out.push_back({absl::StrCat(kTpuPrefix, file), static_cast<int64_t>(fst.st_size), ModifiedMillis(fst)});
    }
  }
  if (!options_.worker_log_dir.empty()) {
    for (const auto& [file, fst] : RegularFiles(options_.worker_log_dir)) {
      if (!absl::EndsWith(file, kWorkerLogSuffix)) continue;
      const std::string id = file.substr(0, file.size() - std::strlen(kWorkerLogSuffix));
      if (!ValidateWorkerId(id).ok()) continue;
      out.push_back({absl::StrCat(kWorkersPrefix, id), static_cast<int64_t>(fst.st_size), ModifiedMillis(fst)});
    }
  }
  return out;
}

absl::StatusOr<std::string> LogFiles::PathOf(const std::string& name) const {
  if (name.empty()) return NameError(name, "is empty");
  if (name.front() == '/') return NameError(name, "is an absolute path");
  if (name.find("..") != std::string::npos) return NameError(name, "holds '..'");
  if (name.find('\0') != std::string::npos) return NameError(name, "holds a NUL byte");
  if (name == kAgentName) {
    if (options_.agent_log.empty()) {
      return absl::NotFoundError("name 'agent': this agent's log is not a file (its stdout is not a regular file)");
    }
    return options_.agent_log;
  }
  if (absl::StartsWith(name, kTpuPrefix)) {
    const std::string file = name.substr(std::strlen(kTpuPrefix));
    if (file.empty() || file.find('/') != std::string::npos || file == ".") {
      return NameError(name, "is not tpu/<file> with a file directly in the TPU log directory");
    }
    if (options_.tpu_log_dir.empty()) return absl::NotFoundError("name '" + name + "': no TPU log directory");
    return absl::StrCat(options_.tpu_log_dir, "/", file);
  }
  if (absl::StartsWith(name, kWorkersPrefix)) {
    const std::string id = name.substr(std::strlen(kWorkersPrefix));
    if (absl::Status s = ValidateWorkerId(id); !s.ok()) {
      return NameError(name, absl::StrCat("does not name a worker (", s.message(), ")"));
    }
    return absl::StrCat(options_.worker_log_dir, "/", id, kWorkerLogSuffix);
  }
  return NameError(name, "has an unknown prefix");
}

absl::StatusOr<LogRead> LogFiles::Read(const std::string& name, int64_t offset, int64_t max_bytes) const {
  if (max_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("max_bytes must be >= 0 (0 = 64 KiB, at most 1 MiB); got ",
                                                   max_bytes));
  }
  absl::StatusOr<std::string> path = PathOf(name);
  if (!path.ok()) return path.status();
  // A file of a directory is opened through the trusted directory, and with O_NOFOLLOW: a symbolic link put in the
  // directory is refused rather than followed out of it. The agent's own log is the one path taken as configured.
  int fd = -1;
  if (name == kAgentName) {
    fd = open(path->c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } else {
    const size_t slash = path->rfind('/');
    const int dir_fd = OpenTrustedDir(slash == std::string::npos ? "." : path->substr(0, slash));
    if (dir_fd < 0) {
      return absl::NotFoundError(absl::StrCat("name '", name, "': its directory is missing, a symbolic link, or "
                                              "writable by others (not served)"));
    }
    fd = openat(dir_fd, path->substr(slash + 1).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
    const int error = errno;
    close(dir_fd);
    errno = error;
  }
  if (fd < 0) {
    const int error = errno;
    return absl::NotFoundError(absl::StrCat("name '", name, "': no such log file",
                                            error == ELOOP ? " (a symbolic link, not served)" : ""));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::NotFoundError(absl::StrCat("name '", name, "': not a regular file"));
  }
  LogRead out;
  out.size = static_cast<int64_t>(st.st_size);
  out.offset = offset < 0 ? std::max<int64_t>(0, out.size + offset) : std::min(offset, out.size);
  const int64_t want = std::min(max_bytes == 0 ? kDefaultLogReadBytes : std::min(max_bytes, kMaxLogReadBytes),
                                out.size - out.offset);
  out.data.resize(static_cast<size_t>(std::max<int64_t>(want, 0)));
  size_t got = 0;
  while (got < out.data.size()) {
    const ssize_t n = pread(fd, out.data.data() + got, out.data.size() - got, out.offset + got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the file shrank, or an I/O error: serve what was read
    got += static_cast<size_t>(n);
  }
  out.data.resize(got);
  close(fd);
  return out;
}

std::string DetectStdoutLogFile() {
  char buffer[4096];
  const ssize_t n = readlink("/proc/self/fd/1", buffer, sizeof(buffer) - 1);
  if (n <= 0) return "";
  std::string path(buffer, static_cast<size_t>(n));
  if (path.empty() || path.front() != '/') return "";  // pipe:[...], socket:[...]
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "";  // /dev/null, a tty, or deleted
  return path;
}

}  // namespace torus::node
