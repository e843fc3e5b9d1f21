// A real etcd for tests (Debian's etcd-server, which scripts/setup.sh installs): one member on loopback, on ports
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
  EtcdServer() {
    if (dir_.path().empty()) {
      error_ = "no temporary directory";
      return;
    }
    const int client = FreePort(), peer = FreePort();
    endpoint_ = absl::StrCat("127.0.0.1:", client);
    const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer);
    const std::string client_url = absl::StrCat("http://", endpoint_);
    std::vector<std::string> args = {"etcd", "--name", "t", "--data-dir", dir_.path() + "/data",
                                     "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
                                     "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                                     "--initial-cluster", "t=" + peer_url, "--logger", "zap", "--log-outputs",
                                     dir_.path() + "/etcd.log"};
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("etcd", argv.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        error_ = WIFEXITED(status) && WEXITSTATUS(status) == 127
                     ? "etcd is not installed (Debian: etcd-server; scripts/setup.sh installs it)"
                     : "etcd exited at start; see its log in " + dir_.path();
        return;
      }
      httplib::Client c("http://" + endpoint_);
      c.set_connection_timeout(0, 200'000);
      if (auto r = c.Post("/v3/kv/range", R"({"key":"AA=="})", "application/json"); r && r->status == 200) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    error_ = "etcd did not answer within 30 s";
  }
  ~EtcdServer() {
    if (pid_ > 0) {
      kill(pid_, SIGCONT);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  // Empty once it answers.
  const std::string& error() const { return error_; }
  const std::string& endpoint() const { return endpoint_; }
  // etcd://127.0.0.1:PORT<prefix>
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
  TempDir dir_;
  std::string endpoint_;
  pid_t pid_ = -1;
  std::string error_;
};

}  // namespace torus::head::testutil
