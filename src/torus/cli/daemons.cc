#include "torus/cli/daemons.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

extern char** environ;

namespace torus::cli {

bool ProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  // Reap it if it is our own child, so a zombie does not look alive.
  int status = 0;
  waitpid(pid, &status, WNOHANG);
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t close_paren = line.rfind(')');
  return close_paren == std::string::npos || close_paren + 2 >= line.size() || line[close_paren + 2] != 'Z';
}

bool IsTorusProcess(pid_t pid) {
  if (!ProcessAlive(pid)) return false;
  std::ifstream comm(absl::StrCat("/proc/", pid, "/comm"));
  std::string name;
  std::getline(comm, name);
  return name.rfind("torus", 0) == 0 || name == "etcd";
}

bool WaitForExit(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (ProcessAlive(pid)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

int StopProcesses(const std::vector<pid_t>& pids, std::chrono::milliseconds grace) {
  std::vector<pid_t> running;
  for (pid_t pid : pids) {
    if (IsTorusProcess(pid) && kill(pid, SIGTERM) == 0) running.push_back(pid);
  }
  auto deadline = std::chrono::steady_clock::now() + grace;
  for (pid_t pid : running) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (!WaitForExit(pid, std::max(left, std::chrono::milliseconds(0)))) kill(pid, SIGKILL);
  }
  for (pid_t pid : running) WaitForExit(pid, std::chrono::milliseconds(2000));
  return static_cast<int>(running.size());
}

std::string TailOfFile(const std::string& path, int max_lines) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    lines.push_back(line);
    if (static_cast<int>(lines.size()) > max_lines) lines.pop_front();
  }
  return absl::StrJoin(lines, "\n");
}

absl::StatusOr<int> FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("cannot open a socket to find a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  if (!ok) return absl::InternalError("cannot bind a loopback socket to find a free port");
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace torus::cli
