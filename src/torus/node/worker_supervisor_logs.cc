// WorkerSupervisor: reading workers' logs, and waiting for more of them (worker_supervisor.h).
#include "torus/node/worker_supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace torus::node {
namespace {

constexpr int64_t kMaxLogChunk = 1 << 20;

}  // namespace

absl::StatusOr<LogChunk> WorkerSupervisor::ReadLog(const std::string& worker_id, int64_t offset,
                                                   int64_t max_bytes) const {
  if (offset < 0) return absl::InvalidArgumentError("offset must be >= 0");
  if (max_bytes <= 0 || max_bytes > kMaxLogChunk) max_bytes = kMaxLogChunk;
  std::string path;
  bool running = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(worker_id);
    if (it == workers_.end() || !it->second.exec_confirmed) {
      return absl::NotFoundError(absl::StrCat("no worker ", worker_id, " on this node"));
    }
    path = it->second.info.log_path;
    running = it->second.info.running;
  }
  // `running` was read first: a finished worker's leader wrote everything before we looked.
  LogChunk chunk;
  chunk.next_offset = offset;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      chunk.finished = !running;
      return chunk;
    }
    return absl::InternalError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int error = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("cannot stat ", path, ": ", std::strerror(error)));
  }
  const int64_t size = st.st_size;
  const int64_t want = std::clamp<int64_t>(size - offset, 0, max_bytes);
  chunk.data.resize(want);
  int64_t got = 0;
  while (got < want) {
    ssize_t n = pread(fd, chunk.data.data() + got, want - got, offset + got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += n;
  }
  close(fd);
  chunk.data.resize(got);
  chunk.next_offset = offset + got;
  chunk.finished = !running && chunk.next_offset >= size;
  return chunk;
}

absl::Status WorkerSupervisor::WaitForLog(const std::string& worker_id, int64_t offset,
                                          std::chrono::steady_clock::time_point deadline,
                                          const std::function<bool()>& cancelled) {
  return WaitForLogs({{worker_id, offset}}, deadline, cancelled);
}

absl::Status WorkerSupervisor::WaitForLogs(const std::vector<std::pair<std::string, int64_t>>& logs,
                                           std::chrono::steady_clock::time_point deadline,
                                           const std::function<bool()>& cancelled) {
  // Woken by writes to the logs (inotify) and by a worker's exit (an eventfd the reaper signals, so that an exit
  // that closed its log before the watch was set still wakes it); `cancelled` is asked every tick. A worker that has
  // ended is not waited on: what it wrote is all there is.
  constexpr auto kTick = std::chrono::milliseconds(100);
  const int exited = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (exited < 0) return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  std::vector<std::pair<std::string, int64_t>> paths;  // log path, offset, of the running ones
  std::vector<std::string> running;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [worker_id, offset] : logs) {
      auto it = workers_.find(worker_id);
      if (it == workers_.end()) {
        close(exited);
        return absl::NotFoundError(absl::StrCat("no worker ", worker_id, " on this node"));
      }
      if (!it->second.info.running) continue;
      paths.emplace_back(it->second.info.log_path, offset);
      running.push_back(worker_id);
    }
    for (const std::string& worker_id : running) log_waiters_.emplace(worker_id, exited);
  }
  if (running.empty()) {
    close(exited);
    return absl::OkStatus();
  }
  const int watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  for (const auto& [path, offset] : paths) {
    if (watch >= 0 && inotify_add_watch(watch, path.c_str(), IN_MODIFY) < 0) {
      spdlog::warn("cannot watch {} for output ({}); checking every {} ms", path, std::strerror(errno),
                   kTick.count());
    }
  }
  auto written = [&] {
    for (const auto& [path, offset] : paths) {
      struct stat st;
      if (stat(path.c_str(), &st) == 0 && st.st_size > offset) return true;
    }
    return false;
  };
  auto all_ended = [&] {
    absl::MutexLock lock(&mu_);
    for (const std::string& worker_id : running) {
      auto it = workers_.find(worker_id);
      if (it != workers_.end() && it->second.info.running) return false;
    }
    return true;
  };
  // (An exit before the waiters were registered is caught by the first check.)
  while (!cancelled() && !written() && !all_ended()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    const auto slice = std::min<std::chrono::steady_clock::duration>(deadline - now, kTick);
    const int ms = std::max<int>(1, std::chrono::duration_cast<std::chrono::milliseconds>(slice).count());
    pollfd fds[2] = {{exited, POLLIN, 0}, {watch, POLLIN, 0}};
    if (poll(fds, watch >= 0 ? 2 : 1, ms) <= 0) continue;
    if (fds[0].revents & POLLIN) {
      uint64_t count = 0;
      [[maybe_unused]] ssize_t n = read(exited, &count, sizeof(count));  // one exited: the loop asks whether all did
    }
    alignas(inotify_event) char buffer[4096];
    while (watch >= 0 && read(watch, buffer, sizeof(buffer)) > 0) {
    }
  }
  {
    absl::MutexLock lock(&mu_);
    for (auto it = log_waiters_.begin(); it != log_waiters_.end();) {
      it = it->second == exited ? log_waiters_.erase(it) : std::next(it);
    }
  }
  if (watch >= 0) close(watch);
  close(exited);
  return absl::OkStatus();
}

}  // namespace torus::node
