// A real etcd for tests (Debian's etcd-server, which scripts/setup.sh installs): members on loopback, on ports
// the kernel handed out free a moment before, its data in a temporary directory; killed by pid (and dying with the
// test process) and removed when this goes out of scope.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "torus/head/state/journal_test_util.h"

namespace torus::head::testutil {

class EtcdServer {
 public:
  // `members` members in one cluster; each member answers once the cluster has a leader.
  explicit EtcdServer(int members = 1) {
    if (dir_.path().empty()) {
      error_ = "no temporary directory";
      return;
    }
    // A port found free may be taken (by another test's server, or as the source port of a connection) before
    // etcd binds it, and the member then exits: such a start is tried again on fresh ports and data.
    for (int attempt = 0; attempt < 3; ++attempt) {
      error_.clear();
      members_.clear();
      std::string initial_cluster;
      for (int i = 0; i < members; ++i) {
        Member m{.name = absl::StrCat("a", attempt, "m", i), .client = absl::StrCat("127.0.0.1:", FreePort()),
                 .peer_url = absl::StrCat("http://127.0.0.1:", FreePort())};
        absl::StrAppend(&initial_cluster, i == 0 ? "" : ",", m.name, "=", m.peer_url);
        members_.push_back(m);
      }
      for (Member& m : members_) m.initial_cluster = initial_cluster;
      for (size_t i = 0; i < members_.size(); ++i) Spawn(i);
      for (size_t i = 0; i < members_.size() && error_.empty(); ++i) WaitUntilItAnswers(i);
      if (error_.rfind(kExitedAtStart, 0) != 0) break;
      for (size_t i = 0; i < members_.size(); ++i) Kill(i);
    }
    endpoint_ = members_[0].client;
  }
  ~EtcdServer() {
    for (size_t i = 0; i < members_.size(); ++i) Kill(i);
  }
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  // Every member's client endpoint, "127.0.0.1:PORT".
  std::vector<std::string> endpoints() const {
    std::vector<std::string> out;
    for (const Member& m : members_) out.push_back(m.client);
    return out;
  }
  // SIGKILL of member `i` (its data stays).
  void Kill(size_t i) {
    if (members_[i].pid <= 0) return;
    kill(members_[i].pid, SIGCONT);
    kill(members_[i].pid, SIGKILL);
    waitpid(members_[i].pid, nullptr, 0);
    members_[i].pid = -1;
  }
  // Starts member `i` again on its data; returns once it answers (or error() says why not).
  void Restart(size_t i) {
    Kill(i);
    Spawn(i);
    WaitUntilItAnswers(i);
  }

  // Empty once it answers.
  const std::string& error() const { return error_; }
  const std::string& endpoint() const { return endpoint_; }
  // etcd://127.0.0.1:PORT<prefix> (the first member)
  std::string Url(const std::string& prefix) const { return absl::StrCat("etcd://", endpoint_, prefix); }
  // POSTs `body` to /v3/<method>; the answer's body, or "" when none came.
  std::string Post(const std::string& method, const std::string& body) const {
    httplib::Client c("http://" + endpoint_);
    auto r = c.Post("/v3/" + method, body, "application/json");
    return r ? r->body : "";
  }

  // A port nothing listens on now (bound and released).
  static int FreePort() {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    close(fd);
    return ntohs(addr.sin_port);
  }

 private:
  static constexpr const char* kExitedAtStart = "etcd exited at start; see its log in ";

  struct Member {
    std::string name;
    std::string client;    // host:port
    std::string peer_url;  // http://host:port
    std::string initial_cluster;
    pid_t pid = -1;
  };

  void Spawn(size_t i) {
    Member& m = members_[i];
    const std::string data = absl::StrCat(dir_.path(), "/", m.name);
    std::vector<std::string> args = {"etcd", "--name", m.name, "--data-dir", data,
                                     "--listen-client-urls", "http://" + m.client,
                                     "--advertise-client-urls", "http://" + m.client,
                                     "--listen-peer-urls", m.peer_url, "--initial-advertise-peer-urls", m.peer_url,
                                     "--initial-cluster", m.initial_cluster, "--logger", "zap", "--log-outputs",
                                     data + ".log"};
    m.pid = fork();
    if (m.pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("etcd", argv.data());
      _exit(127);
    }
  }

  void WaitUntilItAnswers(size_t i) {
    Member& m = members_[i];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(m.pid, &status, WNOHANG) == m.pid) {
        m.pid = -1;
        error_ = WIFEXITED(status) && WEXITSTATUS(status) == 127
                     ? "etcd is not installed (Debian: etcd-server; scripts/setup.sh installs it)"
                     : kExitedAtStart + dir_.path();
        return;
      }
      httplib::Client c("http://" + m.client);
      c.set_connection_timeout(0, 200'000);
      if (auto r = c.Post("/v3/kv/range", R"({"key":"AA=="})", "application/json"); r && r->status == 200) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    error_ = "etcd did not answer within 30 s; see its log in " + dir_.path();
  }

  TempDir dir_;
  std::vector<Member> members_;
  std::string endpoint_;  // the first member's
  std::string error_;
};

}  // namespace torus::head::testutil
