// torus start | stop
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "torus/cli/cluster_spec.h"
#include "torus/cli/commands.h"
#include "torus/cli/daemons.h"
#include "torus/cli/launcher.h"
#include "torus/cli/session_dir.h"
#include "torus/client/session.h"
#include "torus/common/labels.h"
#include "torus/common/resources.h"
#include "torus/rpc/auth.h"

namespace torus::cli {

namespace {

int UsageError(std::string_view message) {
  std::cerr << "torus start: " << message << "\n";
  return 2;
}

// Checks the agent flags here, so that bad input fails before anything starts (exit 2).
absl::Status ValidateAgentFlags(const AgentFlags& flags) {
  auto labels = ParseLabelsFlag(flags.labels);
  if (!labels.ok()) return absl::InvalidArgumentError(absl::StrCat("--labels: ", labels.status().message()));
  if (!flags.labels_file.empty()) {
    std::ifstream in(flags.labels_file);
    if (!in) return absl::InvalidArgumentError(absl::StrCat("--labels-file: cannot read ", flags.labels_file));
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto parsed = ParseLabelsFile(text);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--labels-file ", flags.labels_file, ": ", parsed.status().message()));
    }
  }
  if (!flags.resources.empty()) {
    auto resources = ParseCustomResourcesJson(flags.resources);
    if (!resources.ok()) return resources.status();
  }
  if (flags.memory) {
    auto bytes = ParseByteSize(*flags.memory);
    if (!bytes.ok()) return absl::InvalidArgumentError(absl::StrCat("--memory: ", bytes.status().message()));
  }
  if (flags.object_store_memory) {
    auto bytes = ParseByteSize(*flags.object_store_memory);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--object-store-memory: ", bytes.status().message()));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> AgentArgs(const AgentFlags& flags, const std::string& address,
                                   const std::string& token_file, const std::string& node_id,
                                   const std::string& work_dir) {
  std::vector<std::string> args = {"--address", address, "--token-file", token_file, "--node-id", node_id,
                                   "--node-ip", flags.node_ip, "--work-dir", work_dir};
  auto add = [&](const char* name, const std::string& value) {
    if (!value.empty()) {
      args.push_back(name);
      args.push_back(value);
    }
  };
  add("--labels", flags.labels);
  add("--labels-file", flags.labels_file);
  add("--resources", flags.resources);
  add("--dev-root", flags.dev_root);
  add("--sys-root", flags.sys_root);
  add("--metadata-url", flags.metadata_url);
  if (flags.num_cpus) add("--num-cpus", FormatFixed(static_cast<int64_t>(*flags.num_cpus * kResourceScale)));
  if (flags.memory) add("--memory", absl::StrCat(*ParseByteSize(*flags.memory)));
  if (flags.object_store_memory) {
    add("--object-store-memory", absl::StrCat(*ParseByteSize(*flags.object_store_memory)));
  }
  if (flags.chips_per_host) add("--chips-per-host", absl::StrCat(*flags.chips_per_host));
  if (flags.slice_name) add("--slice-name", *flags.slice_name);
  add("--task-python", flags.task_python);
  return args;
}

std::string NewNodeId() {
  auto token = rpc::GenerateToken();
  return token.ok() ? token->substr(0, 16) : absl::StrCat("node-", getpid());
}

}  // namespace

int CmdStart(const StartFlags& flags) {
  if (flags.head == !flags.address.empty()) {
    return UsageError("give either --head (start a cluster) or --address HOST:PORT (join one)");
  }
  if (absl::Status s = ValidateAgentFlags(flags.agent); !s.ok()) return UsageError(std::string(s.message()));

  // A joining agent's token is settled before anything is created, so that a refused join leaves the latest
  // session (and the cluster it points at) as it was.
  std::string join_token;
  if (!flags.head) {
    if (!flags.token.empty()) {
      join_token = flags.token;
    } else if (!flags.token_file.empty()) {
      auto t = rpc::ReadTokenFile(flags.token_file);
      if (!t.ok()) return UsageError(std::string(t.status().message()));
      join_token = *t;
    } else if (const char* env = getenv("TORUS_TOKEN"); env != nullptr && env[0] != '\0') {
      join_token = env;
    } else {
      return UsageError("joining needs the cluster token: --token, --token-file or TORUS_TOKEN");
    }
  }

  auto session = CreateSession(client::TempRoot());
  if (!session.ok()) {
    std::cerr << "torus start: " << session.status().message() << "\n";
    return 1;
  }
  std::string address = flags.address;
  const std::string token_file = *session + "/token";
  if (flags.head) {
    auto head_address = LaunchHead({.session = *session,
                                    .host = flags.host,
                                    .port = flags.port,
                                    .dashboard_port = flags.dashboard_port,
                                    .heartbeat_period_ms = flags.heartbeat_period_ms,
                                    .node_timeout_ms = flags.node_timeout_ms,
                                    .dashboard_read_only = flags.dashboard_read_only,
                                    .state_dir = flags.state_dir,
                                    .state_store = flags.state_store,
                                    .package_unused_grace_s = flags.package_unused_grace_s,
                                    .serve_port = flags.serve_port,
                                    .tls = flags.tls,
                                    .plaintext = flags.plaintext});
    if (!head_address.ok()) {
      std::cerr << "torus start: " << head_address.status().message() << "\n";
      return 1;
    }
    address = *head_address;
  } else {
    // The session keeps its own copy (mode 0600), so that later commands on this machine find the cluster, and
    // the token stays out of the agent's argv.
    int fd = open(token_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    std::string line = join_token + "\n";
    bool written = fd >= 0 && write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    if (fd >= 0) close(fd);
    if (!written) {
      std::cerr << "torus start: cannot write " << token_file << "\n";
      return 1;
    }
    std::ofstream(*session + "/head_address") << address << "\n";
    if (!flags.tls_ca.empty()) {
      // Later commands on this machine check the head against the cluster CA, and the agent joins with the token.
      std::error_code ec;
      std::filesystem::copy_file(flags.tls_ca, *session + "/ca.crt", std::filesystem::copy_options::overwrite_existing,
                                 ec);
      if (!ec && !flags.join_token_file.empty()) {
        std::filesystem::copy_file(flags.join_token_file, *session + "/join_token",
                                   std::filesystem::copy_options::overwrite_existing, ec);
      }
      if (ec) {
        std::cerr << "torus start: --tls-ca/--join-token-file: " << ec.message() << "\n";
        return 2;
      }
    }
  }

  auto token = rpc::ReadTokenFile(token_file);
  if (!token.ok()) {
    std::cerr << "torus start: " << token.status().message() << "\n";
    return 2;
  }
  if (!(flags.head && flags.no_local_node)) {
    std::string node_id = flags.agent.node_id.empty() ? NewNodeId() : flags.agent.node_id;
    auto env = CurrentEnvironment();
    env.erase("TORUS_TOKEN");
    std::vector<std::string> args = AgentArgs(flags.agent, address, token_file, node_id, *session + "/work");
    for (std::string& flag : SessionTlsAgentArgs(*session)) args.push_back(std::move(flag));
    auto pid = LaunchAgent({.session = *session, .name = "local", .args = std::move(args), .env = env});
    if (!pid.ok()) {
      std::cerr << "torus start: " << pid.status().message() << "\n";
      return 1;
    }
    absl::Status up = WaitForNodes(address, *token, {node_id}, {{"local", *pid}}, *session, std::chrono::seconds(15));
    if (!up.ok()) {
      std::cerr << "torus start: " << up.message() << "\n"
                << "(the agent keeps trying in the background; `torus stop` stops it)\n";
      return 1;
    }
    std::cout << "node " << node_id << " joined the cluster at " << address << "\n";
  }
  if (flags.head) {
    const std::string tls_ca = client::SessionTlsCa(*session);
    std::cout << "torus head started at " << address << (tls_ca.empty() ? " (plaintext)" : " (TLS)") << "\n"
              << "  session:  " << *session << "\n"
              << "  token:    " << token_file << " (mode 0600)\n"
              << "  http:     " << (tls_ca.empty() ? "http://" : "https://")
              << client::ReadTrimmed(*session + "/dashboard_address").value_or("?")
              << "/api/v0/cluster (Authorization: Bearer <token>" << (tls_ca.empty() ? "" : "; CA " + tls_ca)
              << ")\n"
              << "  dashboard: " << DashboardLoginUrl(*session).value_or("?") << "\n"
              << "  join:     torus start --address " << address << " --token-file " << token_file
              << (tls_ca.empty() ? "" : " --tls-ca " + tls_ca + " --join-token-file " + *session + "/join_token")
              << "\n"
              << "  status:   torus status\n"
              << "  stop:     torus stop\n";
  }
  return 0;
}

int CmdStop() {
  int stopped = 0;
  for (const std::string& session : AllSessions(client::TempRoot())) {
    stopped += StopSession(session);
  }
  std::cout << "stopped " << stopped << " torus process" << (stopped == 1 ? "" : "es") << "\n";
  return 0;
}

}  // namespace torus::cli
