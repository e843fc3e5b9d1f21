// WorkerSupervisor: reading workers' logs, and waiting for more of them (worker_supervisor.h).
#include "torus/node/worker_supervisor.h"

#include <fcntl.h>
#include <poll.h>
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
    std::lock_guard<std::mutex> lock(mu_);
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
  auto running = [this, &worker_id]() {  // REQUIRES: mu_ held
    auto it = workers_.find(worker_id);
    return it != workers_.end() && it->second.info.running;
  };
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = workers_.find(worker_id);
    if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("no worker ", worker_id, " on this node"));
    if (!it->second.info.running) return absl::OkStatus();
    path = it->second.info.log_path;
  }
  // Writes to the log and the worker's last close of it (its exit) wake the wait. A worker whose own children keep
  // the log open exits without that close: the tick notices its exit.
  constexpr auto kTick = std::chrono::milliseconds(100);
  const int watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (watch >= 0 && inotify_add_watch(watch, path.c_str(), IN_MODIFY | IN_CLOSE_WRITE) < 0) {
    spdlog::warn("cannot watch {} for output ({}); checking every {} ms", path, std::strerror(errno), kTick.count());
  }
  while (!cancelled()) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && st.st_size > offset) break;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!running()) break;
    }
    const auto slice = std::min<std::chrono::steady_clock::duration>(deadline - now, kTick);
    const int ms = std::max<int>(1, std::chrono::duration_cast<std::chrono::milliseconds>(slice).count());
    pollfd p{watch, POLLIN, 0};
    if (watch < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      continue;
    }
    if (poll(&p, 1, ms) <= 0) continue;
    bool closed = false;
    alignas(inotify_event) char buffer[4096];
    ssize_t n;
    while ((n = read(watch, buffer, sizeof(buffer))) > 0) {
      for (ssize_t at = 0; at < n;) {
        const auto* e = reinterpret_cast<const inotify_event*>(buffer + at);
        closed = closed || (e->mask & IN_CLOSE_WRITE) != 0;
        at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      }
    }
    if (closed) {  // it is exiting: wait for the reaper to say so
      std::unique_lock<std::mutex> lock(mu_);
      exit_cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + kTick),
                          [&] { return !running(); });
    }
  }
  if (watch >= 0) close(watch);
  return absl::OkStatus();
}

}  // namespace torus::node
