// torus up | down | node restart: a local simulated cluster. Each simulated TPU host also gets torus-tpu-sim, a
// simulator of libtpu's metrics service (unless --no-tpu-sim), whose port its agent finds in
// TPU_RUNTIME_METRICS_PORTS.
#include <ctime>
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
#include "torus/cli/sim_hosts.h"
#include "torus/client/client.h"
#include "torus/common/resources.h"
#include "torus/rpc/auth.h"
#include "torus/tls/cluster_secrets.h"

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

// `torus up --ha`: a 3-member etcd on loopback, then two heads on its journal, each standing by while the other
// leads; both know both addresses. The first leads (on `base.port` and `base.dashboard_port`, or free ports), the
// second stands by (on the next ports). With `bridge` (--netns) each head runs in a namespace of its own, at the
// subnet's .2 and .3, and etcd serves its clients on the bridge. With TLS both heads are given one CA and join token
// (<session>/tls, as `torus tls init` writes them) and both hosts as names. Returns the session's head_address, "A,B".
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
  HeadLaunch shared = base;
  if (base.tls) {
    auto secrets = tls::WriteClusterSecrets(base.session + "/tls", time(nullptr));
    if (!secrets.ok()) return secrets.status();
    shared.tls_ca = secrets->ca_cert;
    shared.tls_ca_key = secrets->ca_key;
    shared.join_token_file = secrets->join_token;
    shared.tls_san = absl::StrCat(hosts[0], ",", hosts[1]);
  }
  const std::string addresses = absl::StrCat(hosts[0], ":", ports[0], ",", hosts[1], ":", ports[1]);
  const std::string http_addresses = absl::StrCat(hosts[0], ":", http_ports[0], ",", hosts[1], ":", http_ports[1]);
  absl::StatusOr<std::string> address;
  for (int i = 0; i < 2; ++i) {
    HeadLaunch head = shared;
    head.name = names[i];
    head.host = hosts[i];
    head.port = ports[i];
    head.dashboard_port = http_ports[i];
    // Each head's ingress on a port of its own: 8000 and 8001 by default.
    const int serve_base = base.serve_port.value_or(base.dashboard_port == 0 ? 0 : 8000);
    head.serve_port = serve_base <= 0 ? serve_base : serve_base + i;
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
  if (!spec->node_types.empty() && flags.netns) {
    std::cerr << "torus up: node_types (autoscaled slices) cannot be used with --netns yet\n";
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
  if (!spec->node_types.empty()) {
    std::ofstream out(*session + "/autoscaler.yaml");
    out << AutoscalerConfigFor(*spec, *session);
    if (!out) {
      std::cerr << "torus up: cannot write " << *session << "/autoscaler.yaml\n";
      return 1;
    }
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
                  .package_unused_grace_s = flags.package_unused_grace_s,
                  .autoscaler_config = spec->node_types.empty() ? "" : *session + "/autoscaler.yaml",
                  .serve_port = flags.serve_port,
                  .tls = flags.UseTls(),
                  .plaintext = !flags.UseTls()};
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
  const std::vector<SimulatedHost> hosts = ExpandClusterSpec(*spec, addresses);
  for (size_t i = 1; bridge && i < hosts.size(); ++i) {  // hosts[0] is the head's, on the bridge itself
    if (absl::Status s = AddHostNamespace(*session, *bridge, hosts[i].name, hosts[i].node_ip,
                                          addresses.first + static_cast<int>(i) - 1);
        !s.ok()) {
      std::cerr << "torus up --netns: " << s.message() << "\n(`torus down` removes what was made)\n";
      return 1;
    }
  }
  auto started = StartSimulatedHosts(*session, *address, hosts,
                                     {.tpu_sim = flags.tpu_sim, .metrics_period_ms = flags.metrics_period_ms});
  if (!started.ok()) {
    std::cerr << "torus up: " << started.status().message() << "\n(`torus down` stops what started)\n";
    return 1;
  }
  for (const auto& [name, pid] : *started) {
    node_ids.insert(name);
    agents[name] = pid;
  }
  absl::Status ready = WaitForNodes(*address, *token, node_ids, agents, *session, std::chrono::seconds(flags.wait_s));
  if (!ready.ok()) {
    std::cerr << "torus up: " << ready.message() << "\n(the cluster is left running for inspection; "
              << "`torus down` stops it)\n";
    return 1;
  }
  auto client = client::Client::Connect({.address = *address, .token = *token, .tls_ca = client::SessionTlsCa(*session)});
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
