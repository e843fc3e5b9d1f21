// torus up | down | node restart: a local simulated cluster. Each simulated TPU host also gets torus-tpu-sim, a
// simulator of libtpu's metrics service (unless --no-tpu-sim), whose port its agent finds in
// TPU_RUNTIME_METRICS_PORTS.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "torus/accel/fake_host.h"
#include "torus/cli/cluster_spec.h"
#include "torus/cli/commands.h"
#include "torus/cli/daemons.h"
#include "torus/cli/format.h"
#include "torus/cli/launcher.h"
#include "torus/cli/local_etcd.h"
#include "torus/cli/netns.h"
#include "torus/cli/session_dir.h"
#include "torus/client/client.h"
#include "torus/common/resources.h"
#include "torus/rpc/auth.h"

namespace torus::cli {
namespace {

// The latest session's live processes, if any.
std::vector<ProcessRecord> LiveProcesses(const std::string& session) {
  std::vector<ProcessRecord> live;
  for (const auto& r : ReadProcesses(session)) {
    if (IsTorusProcess(r.pid)) live.push_back(r);
  }
  return live;
}

// Lays out a simulated host's device root: TPU chips or GPUs as the kernel and driver would show them.
absl::Status PrepareHostRoot(const SimulatedHost& host, const std::string& root) {
  std::error_code ec;
  std::filesystem::create_directories(root + "/dev", ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", root, ": ", ec.message()));
  if (host.tpu_generation) {
    absl::Status s = WriteFakeTpuDevices(root, *host.tpu_generation, host.tpu_chips);
    if (!s.ok()) return s;
  }
  if (host.gpu_count > 0) return WriteFakeGpuDevices(root, host.gpu_count, host.gpu_model);
  return absl::OkStatus();
}

std::string HostWorkDir(const std::string& session, const std::string& name) {
  return absl::StrCat(session, "/hosts/", name, "/work");
}

std::string HostTpuLogDir(const std::string& session, const std::string& name) {
  return absl::StrCat(session, "/hosts/", name, "/tpu_logs");
}

std::vector<std::string> SimulatedAgentArgs(const SimulatedHost& host, const std::string& address,
                                            const std::string& session, const std::string& root) {
  std::vector<std::string> args = {"--address",   address, "--token-file", session + "/token", "--node-id",
                                   host.name,     "--node-ip", host.node_ip, "--dev-root", root,
                                   "--metadata-url", "off", "--no-nvml",
                                   "--work-dir", HostWorkDir(session, host.name)};
  if (host.num_cpus) {
    args.push_back("--num-cpus");
    args.push_back(FormatFixed(static_cast<int64_t>(*host.num_cpus * kResourceScale)));
  }
  if (host.memory_bytes) {
    args.push_back("--memory");
    args.push_back(absl::StrCat(*host.memory_bytes));
  }
  if (host.object_store_bytes) {
    args.push_back("--object-store-memory");
    args.push_back(absl::StrCat(*host.object_store_bytes));
  }
  if (!host.labels.empty()) {
    args.push_back("--labels");
    args.push_back(FormatLabels(host.labels));
  }
  return args;
}

// `torus up --ha`: a 3-member etcd on loopback, then two heads on its journal, each standing by while the other
// leads; both know both addresses. The first leads (on `base.port` and `base.dashboard_port`, or free ports), the
// second stands by (on the next ports). With `bridge` (--netns) each head runs in a namespace of its own, at the
// subnet's .2 and .3, and etcd serves its clients on the bridge. Returns the session's head_address, "A,B".
absl::StatusOr<std::string> LaunchHeadPair(const HeadLaunch& base, const std::optional<SessionBridge>& bridge) {
  auto endpoints = StartLocalEtcd(base.session, 3, std::chrono::seconds(30), bridge ? bridge->address : "127.0.0.1");
  if (!endpoints.ok()) return endpoints.status();
  const std::vector<std::string> names = {"head-a", "head-b"};
  std::vector<std::string> hosts = {base.host, base.host};
  for (int i = 0; bridge && i < 2; ++i) {
    hosts[i] = absl::StrCat(bridge->prefix, 2 + i);
    if (absl::Status s = AddHostNamespace(base.session, *bridge, names[i], hosts[i], 2 + i); !s.ok()) return s;
  }
  // Both heads' ports are fixed now: each head, agent and worker is told both.
  std::vector<int> ports, http_ports;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<int> port = base.port == 0 ? FreeLoopbackPort() : absl::StatusOr<int>(base.port + i);
    absl::StatusOr<int> http = base.dashboard_port == 0 ? FreeLoopbackPort()
                                                        : absl::StatusOr<int>(base.dashboard_port + i);
    if (!port.ok()) return port.status();
    if (!http.ok()) return http.status();
    ports.push_back(*port);
    http_ports.push_back(*http);
  }
  const std::string addresses = absl::StrCat(hosts[0], ":", ports[0], ",", hosts[1], ":", ports[1]);
  const std::string http_addresses = absl::StrCat(hosts[0], ":", http_ports[0], ",", hosts[1], ":", http_ports[1]);
  absl::StatusOr<std::string> address;
  for (int i = 0; i < 2; ++i) {
    HeadLaunch head = base;
    head.name = names[i];
    head.host = hosts[i];
    head.port = ports[i];
    head.dashboard_port = http_ports[i];
    head.state_store = absl::StrCat("etcd://", *endpoints, "/torus");
    head.standby = true;
    head.head_addresses = addresses;
    head.head_dashboard_addresses = http_addresses;
    address = LaunchHead(head);
    if (!address.ok()) return address.status();
  }
  return address;
}

}  // namespace

int CmdUp(const UpFlags& flags) {
  std::ifstream in(flags.spec_path);
  if (!in) {
    std::cerr << "torus up: cannot read " << flags.spec_path << "\n";
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto spec = ParseClusterSpec(text.str());
  if (!spec.ok()) {
    std::cerr << "torus up: " << flags.spec_path << ": " << spec.status().message() << "\n";
    return 2;
  }
  const std::string root = client::TempRoot();
  if (auto latest = client::LatestSessionDir(root); latest.ok() && !LiveProcesses(*latest).empty()) {
    std::cerr << "torus up: a cluster is already running in " << *latest << "; run `torus down` first\n";
    return 1;
  }
  auto session = CreateSession(root);
  if (!session.ok()) {
    std::cerr << "torus up: " << session.status().message() << "\n";
    return 1;
  }
  // With --netns, every host but the head's in a namespace of its own on the session's bridge, where the head listens.
  HostAddresses addresses;
  std::optional<SessionBridge> bridge;
  if (flags.netns) {
    auto created = CreateSessionBridge(*session);
    if (!created.ok()) {
      std::cerr << "torus up --netns: " << created.status().message() << "\n";
      RemoveSessionNetwork(*session);
      return 1;
    }
    bridge = *created;
    // .2 and .3 are for the heads of --ha.
    addresses = {.head = bridge->address, .prefix = bridge->prefix, .first = 4};
  }
  HeadLaunch head{.session = *session,
                  .host = bridge ? bridge->address : "127.0.0.1",
                  .port = flags.port,
                  .dashboard_port = flags.dashboard_port,
                  .heartbeat_period_ms = flags.heartbeat_period_ms,
                  .node_timeout_ms = flags.node_timeout_ms,
                  .agent_rpc_timeout_ms = flags.agent_rpc_timeout_ms,
                  .prepare_ttl_ms = flags.prepare_ttl_ms,
                  .dashboard_read_only = flags.dashboard_read_only,
                  .no_journal = flags.no_journal,
                  .state_store = flags.state_store,
                  .package_unused_grace_s = flags.package_unused_grace_s};
  absl::StatusOr<std::string> address;
  if (flags.ha) {
    address = LaunchHeadPair(head, bridge);
  } else {
    address = LaunchHead(head);
  }
  if (!address.ok()) {
    std::cerr << "torus up: " << address.status().message() << "\n(`torus down` stops what started)\n";
    return 1;
  }
  auto token = rpc::ReadTokenFile(*session + "/token");
  if (!token.ok()) {
    std::cerr << "torus up: " << token.status().message() << "\n";
    return 1;
  }

  std::set<std::string> node_ids;
  std::map<std::string, pid_t> agents;
  const auto base_env = CleanAgentEnvironment();
  const std::vector<SimulatedHost> hosts = ExpandClusterSpec(*spec, addresses);
  for (size_t i = 1; bridge && i < hosts.size(); ++i) {  // hosts[0] is the head's, on the bridge itself
    if (absl::Status s = AddHostNamespace(*session, *bridge, hosts[i].name, hosts[i].node_ip,
                                          addresses.first + static_cast<int>(i) - 1);
        !s.ok()) {
      std::cerr << "torus up --netns: " << s.message() << "\n(`torus down` removes what was made)\n";
      return 1;
    }
  }
  // Device roots first, and every TPU host's simulated libtpu metrics server, so that the simulators come up
  // together; each agent then starts once its host's simulator serves.
  std::map<std::string, pid_t> sims;
  for (const SimulatedHost& host : hosts) {
    if (absl::Status s = PrepareHostRoot(host, absl::StrCat(*session, "/hosts/", host.name)); !s.ok()) {
      std::cerr << "torus up: " << s.message() << "\n";
      return 1;
    }
    if (!flags.tpu_sim || !host.tpu_generation) continue;
    auto pid = StartTpuSim({.session = *session,
                            .name = host.name,
                            .generation = std::string(GetGenerationInfo(*host.tpu_generation).pod_prefix),
                            .chips = host.tpu_chips,
                            .worker_mark = HostWorkDir(*session, host.name),
                            .log_dir = HostTpuLogDir(*session, host.name),
                            .env = base_env});
    if (!pid.ok()) {
      std::cerr << "torus up: " << pid.status().message() << " (`torus up --no-tpu-sim` starts no simulators)\n";
      return 1;
    }
    sims[host.name] = *pid;
  }
  for (const SimulatedHost& host : hosts) {
    std::string host_root = absl::StrCat(*session, "/hosts/", host.name);
    auto env = base_env;
    for (const auto& [k, v] : host.env) env[k] = v;
    std::vector<std::string> args = SimulatedAgentArgs(host, *address, *session, host_root);
    if (flags.metrics_period_ms) {
      args.push_back("--metrics-period-ms");
      args.push_back(absl::StrCat(*flags.metrics_period_ms));
    }
    if (auto sim = sims.find(host.name); sim != sims.end()) {
      auto port = WaitForTpuSimPort(*session, host.name, sim->second, std::chrono::seconds(15));
      if (!port.ok()) {
        std::cerr << "torus up: " << port.status().message() << "\n(the cluster is left running for inspection; "
                  << "`torus down` stops it)\n";
        return 1;
      }
      env["TPU_RUNTIME_METRICS_PORTS"] = absl::StrCat(*port);
      args.push_back("--tpu-log-dir");
      args.push_back(HostTpuLogDir(*session, host.name));
    }
    auto pid = LaunchAgent({.session = *session, .name = host.name, .args = args, .env = env});
    if (!pid.ok()) {
      std::cerr << "torus up: " << pid.status().message() << "\n";
      return 1;
    }
    node_ids.insert(host.name);
    agents[host.name] = *pid;
  }
  absl::Status ready = WaitForNodes(*address, *token, node_ids, agents, *session, std::chrono::seconds(flags.wait_s));
  if (!ready.ok()) {
    std::cerr << "torus up: " << ready.message() << "\n(the cluster is left running for inspection; "
              << "`torus down` stops it)\n";
    return 1;
  }
  auto client = client::Client::Connect({*address, *token});
  auto status = (*client)->GetClusterStatus(true);
  if (status.ok()) std::cout << FormatStatus(*status, *address);
  std::cout << "\nsession " << *session << " (logs in " << *session << "/logs)\n";
  if (auto url = DashboardLoginUrl(*session); url.ok()) std::cout << "dashboard: " << *url << "\n";
  std::cout << "stop with: torus down\n";
  return 0;
}

int CmdDashboard() {
  auto latest = client::LatestSessionDir(client::TempRoot());
  if (!latest.ok()) {
    std::cerr << "torus dashboard: " << latest.status().message() << "\n";
    return 1;
  }
  auto url = DashboardLoginUrl(*latest);
  if (!url.ok()) {
    std::cerr << "torus dashboard: " << url.status().message() << "\n";
    return 1;
  }
  std::cout << *url << "\n";
  return 0;
}

int CmdDown() {
  auto latest = client::LatestSessionDir(client::TempRoot());
  if (!latest.ok()) {
    std::cout << "no torus session to stop\n";
    return 0;
  }
  const int stopped = StopSession(*latest);
  std::cout << "stopped " << stopped << " torus process" << (stopped == 1 ? "" : "es") << " of " << *latest
            << "\n";
  return 0;
}

int CmdNodeRestart(const std::string& name) {
  auto latest = client::LatestSessionDir(client::TempRoot());
  if (!latest.ok()) {
    std::cerr << "torus node restart: " << latest.status().message() << "\n";
    return 1;
  }
  for (const auto& r : LiveProcesses(*latest)) {
    if (r.role == "node" && r.name == name) {
      std::cerr << "torus node restart: agent " << name << " is running (pid " << r.pid << ")\n";
      return 1;
    }
  }
  // The saved launch repeats the agent's TPU_RUNTIME_METRICS_PORTS and --tpu-log-dir. Its host's simulated libtpu
  // metrics server is not restarted: it outlives an agent's crash, and if it was stopped, the agent finds libtpu
  // unavailable, as on a TPU VM where no framework holds the chips.
  auto launch = LoadAgentLaunch(*latest, name);
  if (!launch.ok()) {
    std::cerr << "torus node restart: " << launch.status().message() << "\n";
    return 2;
  }
  auto pid = LaunchAgent(*launch);
  if (!pid.ok()) {
    std::cerr << "torus node restart: " << pid.status().message() << "\n";
    return 1;
  }
  std::cout << "agent " << name << " started (pid " << *pid << ")\n";
  return 0;
}

int CmdNodeLink(const std::string& name, bool up) {
  const std::string verb = up ? "heal" : "cut";
  auto latest = client::LatestSessionDir(client::TempRoot());
  if (!latest.ok()) {
    std::cerr << "torus node " << verb << ": " << latest.status().message() << "\n";
    return 1;
  }
  if (absl::Status s = SetHostLink(*latest, name, up); !s.ok()) {
    std::cerr << "torus node " << verb << ": " << s.message() << "\n";
    return absl::IsNotFound(s) ? 2 : 1;
  }
  std::cout << "host " << name << (up ? ": link up" : ": link down (its packets go nowhere until `torus node heal`)")
            << "\n";
  return 0;
}

}  // namespace torus::cli
