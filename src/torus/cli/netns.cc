#include "torus/cli/netns.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace torus::cli {
namespace {

std::string NetworkFile(const std::string& session) { return session + "/netns"; }

std::string IpBinary() {
  for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return "";
}

// Runs `ip ARGS` and waits; FailedPrecondition with its output when it fails.
absl::Status Ip(const std::vector<std::string>& args) {
  const std::string ip = IpBinary();
  if (ip.empty()) return absl::FailedPreconditionError("iproute2's `ip` is not installed (apt-get install iproute2)");
  std::vector<std::string> argv = {ip};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (std::string& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return absl::InternalError("cannot make a pipe for `ip`");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, ip.c_str(), &actions, nullptr, cargv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  std::string output;
  char buf[512];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof(buf))) > 0;) output.append(buf, static_cast<size_t>(n));
  close(pipe_fds[0]);
  if (spawned != 0) return absl::InternalError(absl::StrCat("cannot run ", ip));
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  while (!output.empty() && output.back() == '\n') output.pop_back();
  return absl::FailedPreconditionError(absl::StrCat("`ip ", absl::StrJoin(args, " "), "` failed: ", output,
                                                    geteuid() != 0 ? " (network namespaces need root)" : ""));
}

absl::Status Record(const std::string& session, const std::string& line) {
  std::ofstream out(NetworkFile(session), std::ios::app);
  if (!(out << line << "\n")) return absl::InternalError(absl::StrCat("cannot write ", NetworkFile(session)));
  return absl::OkStatus();
}

// The recorded lines, split into words.
std::vector<std::vector<std::string>> Recorded(const std::string& session) {
  std::vector<std::vector<std::string>> lines;
  std::ifstream in(NetworkFile(session));
  for (std::string line; std::getline(in, line);) {
    lines.push_back(absl::StrSplit(line, ' ', absl::SkipEmpty()));
  }
  return lines;
}

}  // namespace

absl::StatusOr<SessionBridge> CreateSessionBridge(const std::string& session) {
  // A subnet no interface uses (another session's bridge, or a real network).
  std::string addresses;
  if (std::ifstream routes("/proc/net/fib_trie"); routes) {
    std::stringstream text;
    text << routes.rdbuf();
    addresses = text.str();
  }
  SessionBridge bridge;
  for (int tries = 0; tries < 250 && bridge.subnet == 0; ++tries) {
    const int candidate = 1 + (getpid() + tries) % 250;
    if (!absl::StrContains(addresses, absl::StrCat("10.213.", candidate, "."))) bridge.subnet = candidate;
  }
  if (bridge.subnet == 0) return absl::ResourceExhaustedError("every subnet 10.213.S.0/24 is in use");
  bridge.name = absl::StrCat("torus-br", bridge.subnet);
  bridge.prefix = absl::StrCat("10.213.", bridge.subnet, ".");
  bridge.address = bridge.prefix + "1";
  if (absl::Status s = Ip({"link", "add", bridge.name, "type", "bridge"}); !s.ok()) return s;
  if (absl::Status s = Record(session, absl::StrCat("bridge ", bridge.name, " ", bridge.subnet)); !s.ok()) return s;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"addr", "add", bridge.address + "/24", "dev", bridge.name},
        std::vector<std::string>{"link", "set", bridge.name, "up"}}) {
    if (absl::Status s = Ip(args); !s.ok()) return s;
  }
  return bridge;
}

absl::Status AddHostNamespace(const std::string& session, const SessionBridge& bridge, const std::string& name,
                              const std::string& ip, int index) {
  const std::string ns = absl::StrCat("torus", bridge.subnet, "-", index);
  const std::string link = absl::StrCat("tv", bridge.subnet, "-", index);  // on the bridge
  const std::string peer = absl::StrCat("tp", bridge.subnet, "-", index);  // in the namespace
  if (absl::Status s = Ip({"netns", "add", ns}); !s.ok()) return s;
  if (absl::Status s = Record(session, absl::StrCat("host ", name, " ", ns, " ", link)); !s.ok()) return s;
  const std::vector<std::vector<std::string>> steps = {
      {"link", "add", link, "type", "veth", "peer", "name", peer},
      {"link", "set", peer, "netns", ns},
      {"link", "set", link, "master", bridge.name},
      {"link", "set", link, "up"},
      {"-n", ns, "addr", "add", ip + "/24", "dev", peer},
      {"-n", ns, "link", "set", peer, "up"},
      {"-n", ns, "link", "set", "lo", "up"},
  };
  for (const auto& step : steps) {
    if (absl::Status s = Ip(step); !s.ok()) return s;
  }
  // `ip netns exec` mounts /etc/netns/NS/hosts over /etc/hosts: there this machine's name resolves to the host's
  // own address, as a real host's does (libraries such as gloo advertise the address their hostname resolves to).
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  const std::string etc = absl::StrCat("/etc/netns/", ns);
  std::error_code ec;
  std::filesystem::create_directories(etc, ec);
  std::ofstream hosts(etc + "/hosts");
  hosts << "127.0.0.1 localhost\n" << ip << " " << hostname << "\n";
  if (!hosts) return absl::InternalError(absl::StrCat("cannot write ", etc, "/hosts"));
  return absl::OkStatus();
}

std::vector<std::string> NamespacePrefix(const std::string& session, const std::string& name) {
  for (const auto& line : Recorded(session)) {
    if (line.size() == 4 && line[0] == "host" && line[1] == name) return {IpBinary(), "netns", "exec", line[2]};
  }
  return {};
}

absl::Status SetHostLink(const std::string& session, const std::string& name, bool up) {
  for (const auto& line : Recorded(session)) {
    if (line.size() == 4 && line[0] == "host" && line[1] == name) {
      return Ip({"link", "set", line[3], up ? "up" : "down"});
    }
  }
  return absl::NotFoundError(absl::StrCat("host ", name, " of ", session,
                                          " has no network namespace (only `torus up --netns` makes them)"));
}

void RemoveSessionNetwork(const std::string& session) {
  for (const auto& line : Recorded(session)) {
    if (line.size() != 4 || line[0] != "host") continue;
    (void)Ip({"netns", "del", line[2]});  // its veth pair goes with it
    std::error_code ec;
    std::filesystem::remove_all(absl::StrCat("/etc/netns/", line[2]), ec);
  }
  for (const auto& line : Recorded(session)) {
    if (line.size() == 3 && line[0] == "bridge") (void)Ip({"link", "del", line[1]});
  }
  std::remove(NetworkFile(session).c_str());
}

}  // namespace torus::cli
