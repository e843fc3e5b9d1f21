#include "torus/cli/local_etcd.h"

#include <unistd.h>

#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "httplib.h"
#include "torus/cli/daemons.h"
#include "torus/cli/session_dir.h"

namespace torus::cli {
namespace {

// The path of the etcd executable on PATH (Debian installs /usr/bin/etcd), or "".
std::string EtcdBinary() {
  const char* path = getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/etcd");
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace

absl::StatusOr<std::string> StartLocalEtcd(const std::string& session, int members,
                                           std::chrono::milliseconds timeout, const std::string& client_host) {
  const std::string etcd = EtcdBinary();
  if (etcd.empty()) {
    return absl::FailedPreconditionError(
        "etcd is not installed (Debian: apt-get install etcd-server; scripts/setup.sh installs it)");
  }
  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    pid_t pid = 0;
  };
  std::vector<Member> all(members);
  std::vector<std::string> initial_cluster;
  for (int i = 0; i < members; ++i) {
    all[i].name = absl::StrCat("etcd-", i + 1);
    auto client = FreeLoopbackPort();
    auto peer = FreeLoopbackPort();
    if (!client.ok()) return client.status();
    if (!peer.ok()) return peer.status();
    all[i].client_port = *client;
    all[i].peer_port = *peer;
    initial_cluster.push_back(absl::StrCat(all[i].name, "=http://127.0.0.1:", all[i].peer_port));
  }
  const std::string cluster = absl::StrJoin(initial_cluster, ",");
  std::vector<std::string> endpoints;
  for (Member& m : all) {
    const std::string client_url = absl::StrCat("http://", client_host, ":", m.client_port);
    const std::string peer_url = absl::StrCat("http://127.0.0.1:", m.peer_port);
    const std::string data = absl::StrCat(session, "/etcd/", m.name);
    std::error_code ec;
    std::filesystem::create_directories(data, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create ", data, ": ", ec.message()));
    SpawnSpec spec{.argv = {etcd, "--name", m.name, "--data-dir", data, "--listen-client-urls", client_url,
                            "--advertise-client-urls", client_url, "--listen-peer-urls", peer_url,
                            "--initial-advertise-peer-urls", peer_url, "--initial-cluster", cluster,
                            "--initial-cluster-state", "new", "--initial-cluster-token",
                            std::filesystem::path(session).filename().string()},
                   .env = CurrentEnvironment(),
                   .log_path = absl::StrCat(session, "/logs/", m.name, ".log")};
    auto pid = SpawnDaemon(spec);
    if (!pid.ok()) return pid.status();
    m.pid = *pid;
    if (auto recorded = RecordProcess(session, {"etcd", m.name, m.pid}); !recorded.ok()) return recorded;
    endpoints.push_back(absl::StrCat(client_host, ":", m.client_port));
  }
  // A member answers /health with "true" once the cluster has a leader.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const Member& m : all) {
    httplib::Client http(client_host, m.client_port);
    http.set_connection_timeout(std::chrono::seconds(1));
    http.set_read_timeout(std::chrono::seconds(2));
    while (true) {
      auto reply = http.Get("/health");
      if (reply && reply->status == 200 && reply->body.find("\"true\"") != std::string::npos) break;
      const std::string log = absl::StrCat(session, "/logs/", m.name, ".log");
      if (!ProcessAlive(m.pid)) {
        return absl::InternalError(absl::StrCat(m.name, " exited during start; end of ", log, ":\n", TailOfFile(log, 10)));
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat(m.name, " was not healthy within ", static_cast<double>(timeout.count()) / 1000, " s; see ", log));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return absl::StrJoin(endpoints, ",");
}

}  // namespace torus::cli
