#include "torus/cli/launcher.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "torus/cli/netns.h"
#include "torus/cli/session_dir.h"
#include "torus/client/client.h"
#include "torus/client/http_api_client.h"
#include "torus/rpc/auth.h"

namespace torus::cli {

namespace {

std::string HeadLaunchFile(const std::string& session, const std::string& name) {
  return absl::StrCat(session, "/", name, ".json");
}

// Spawns torus-head `name` with `args`, records it, and waits until it serves (the session's head_address written
// since) or, with `standby`, stands by; returns the session's head_address (may be another head's while standing by).
absl::StatusOr<std::string> StartHead(const std::string& session, const std::string& name,
                                      const std::vector<std::string>& args, bool standby) {
  const std::string log = absl::StrCat(session, "/logs/", name, ".log");
  std::error_code ec;
  const uintmax_t log_start = std::filesystem::exists(log, ec) ? std::filesystem::file_size(log, ec) : 0;
  SpawnSpec spec{.argv = NamespacePrefix(session, name), .env = CurrentEnvironment(), .log_path = log};
  spec.argv.push_back(SiblingBinary("torus-head"));
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  auto pid = SpawnDaemon(spec);
  if (!pid.ok()) return pid.status();
  auto recorded = RecordProcess(session, {"head", name, *pid});
  if (!recorded.ok()) return recorded;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < deadline) {
    std::string since;  // what this start wrote to the log
    if (std::ifstream in(log); in && in.seekg(static_cast<std::streamoff>(log_start))) {
      since.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    auto address = client::ReadTrimmed(session + "/head_address");
    if (address.ok() && !address->empty() && absl::StrContains(since, "listening on")) return *address;
    if (standby && absl::StrContains(since, "standing by:")) return address.ok() ? *address : std::string();
    if (!ProcessAlive(*pid)) {
      return absl::InternalError(absl::StrCat("torus-head exited during start; end of ", log, ":\n",
                                              TailOfFile(log, 10)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  StopProcesses({*pid}, std::chrono::seconds(2));
  return absl::DeadlineExceededError(absl::StrCat("torus-head did not start within 15 s; see ", log));
}

// The port of "host:port" (the last colon's), or nullopt.
std::optional<std::string> PortOf(const absl::StatusOr<std::string>& address) {
  if (!address.ok()) return std::nullopt;
  const size_t colon = address->rfind(':');
  if (colon == std::string::npos || colon + 1 == address->size()) return std::nullopt;
  return address->substr(colon + 1);
}

}  // namespace

absl::StatusOr<std::string> LaunchHead(const HeadLaunch& launch) {
  std::vector<std::string> args = {"--session-dir",          launch.session,
                                   "--host",                 launch.host,
                                   "--port",                 absl::StrCat(launch.port),
                                   "--dashboard-port",       absl::StrCat(launch.dashboard_port),
                                   "--heartbeat-period-ms",  absl::StrCat(launch.heartbeat_period_ms),
                                   "--node-timeout-ms",      absl::StrCat(launch.node_timeout_ms),
                                   "--agent-rpc-timeout-ms", absl::StrCat(launch.agent_rpc_timeout_ms),
                                   "--prepare-ttl-ms",       absl::StrCat(launch.prepare_ttl_ms)};
  if (launch.dashboard_read_only) args.push_back("--dashboard-read-only");
  if (launch.tls) args.push_back("--tls");
  if (launch.plaintext) args.push_back("--plaintext");
  for (const auto& [flag, value] : {std::pair<const char*, const std::string*>{"--tls-ca", &launch.tls_ca},
                                    {"--tls-ca-key", &launch.tls_ca_key},
                                    {"--join-token-file", &launch.join_token_file},
                                    {"--tls-san", &launch.tls_san}}) {
    if (value->empty()) continue;
    args.push_back(flag);
    args.push_back(*value);
  }
  if (launch.serve_port) {
    args.push_back("--serve-port");
    args.push_back(absl::StrCat(*launch.serve_port));
  }
  if (launch.no_journal) args.push_back("--no-journal");
  if (launch.package_unused_grace_s) {
    args.push_back("--package-unused-grace-s");
    args.push_back(absl::StrCat(*launch.package_unused_grace_s));
  }
  if (!launch.state_dir.empty()) {
    args.push_back("--state-dir");
    args.push_back(launch.state_dir);
  }
  if (!launch.state_store.empty()) {
    args.push_back("--state-store");
    args.push_back(launch.state_store);
  }
  if (launch.standby) args.push_back("--standby");
  if (!launch.autoscaler_config.empty()) {
    args.push_back("--autoscaler-config");
    args.push_back(launch.autoscaler_config);
  }
  if (!launch.head_addresses.empty()) {
    args.push_back("--head-addresses");
    args.push_back(launch.head_addresses);
  }
  if (!launch.head_dashboard_addresses.empty()) {
    args.push_back("--head-dashboard-addresses");
    args.push_back(launch.head_dashboard_addresses);
  }
  const std::string file = HeadLaunchFile(launch.session, launch.name);
  {
    std::ofstream out(file);
    out << nlohmann::json{{"args", args}, {"standby", launch.standby}}.dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", file));
  }
  return StartHead(launch.session, launch.name, args, launch.standby);
}

namespace {

struct SavedHead {
  std::vector<std::string> args;
  bool standby = false;
};

absl::StatusOr<SavedHead> LoadHeadLaunch(const std::string& session, const std::string& name) {
  const std::string file = HeadLaunchFile(session, name);
  std::ifstream in(file);
  if (!in) return absl::NotFoundError(absl::StrCat("no head was started in ", session, " (no ", name, ".json)"));
  auto saved = nlohmann::json::parse(in, nullptr, false);
  if (saved.is_discarded() || !saved.contains("args") || !saved["args"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(file, " is not a saved head launch"));
  }
  SavedHead head;
  for (const auto& a : saved["args"]) {
    if (!a.is_string()) return absl::InvalidArgumentError(absl::StrCat(file, ": args are strings"));
    head.args.push_back(a.get<std::string>());
  }
  if (saved.contains("standby") && !saved["standby"].is_boolean()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": standby is true or false"));
  }
  head.standby = saved.value("standby", false);
  return head;
}

// The latest pid recorded for each head name.
std::map<std::string, pid_t> HeadPids(const std::string& session) {
  std::map<std::string, pid_t> pids;
  for (const ProcessRecord& r : ReadProcesses(session)) {
    if (r.role == "head") pids[r.name] = r.pid;
  }
  return pids;
}

}  // namespace

int StopSession(const std::string& session) {
  // A head that autoscales would launch slices again for the groups that lose their hosts: it stops first (its
  // agents then stop without unregistering, which costs them nothing).
  std::error_code ec;
  const bool autoscaled = std::filesystem::exists(session + "/autoscaler.yaml", ec);
  // Then the launches it began (`torus node add-slice`, role "launch"), before the hosts they started.
  const std::vector<std::string> order = autoscaled ? std::vector<std::string>{"head", "launch", "node", "sim", "etcd"}
                                                    : std::vector<std::string>{"node", "sim", "head", "etcd"};
  std::map<std::string, std::vector<pid_t>> by_role;
  for (const ProcessRecord& r : ReadProcesses(session)) {
    by_role[std::find(order.begin(), order.end(), r.role) == order.end() ? "node" : r.role].push_back(r.pid);
  }
  int stopped = 0;
  for (const std::string& role : order) {
    if (autoscaled && role == "node") {  // hosts a launch under way recorded meanwhile
      by_role["node"].clear();
      by_role["sim"].clear();
      for (const ProcessRecord& r : ReadProcesses(session)) {
        if (r.role == "node" || r.role == "sim") by_role[r.role].push_back(r.pid);
      }
    }
    stopped += StopProcesses(by_role[role], std::chrono::seconds(5));
  }
  RemoveSessionNetwork(session);
  return stopped;
}

std::vector<std::string> HeadNames(const std::string& session) {
  std::vector<std::string> names;
  for (const ProcessRecord& r : ReadProcesses(session)) {
    if (r.role == "head" && std::find(names.begin(), names.end(), r.name) == names.end()) names.push_back(r.name);
  }
  return names;
}

absl::StatusOr<std::string> RelaunchHead(const std::string& session) {
  auto saved = LoadHeadLaunch(session, "head");
  if (!saved.ok()) return saved.status();
  std::vector<std::string>& args = saved->args;
  // The ports it served on: agents heartbeat there and workers report there.
  const std::optional<std::string> grpc_port = PortOf(client::ReadTrimmed(session + "/head_address"));
  const std::optional<std::string> http_port = PortOf(client::ReadTrimmed(session + "/dashboard_address"));
  const std::optional<std::string> serve_port = PortOf(client::ReadTrimmed(session + "/serve_address"));
  bool has_serve_port = false;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--port" && grpc_port) args[i + 1] = *grpc_port;
    if (args[i] == "--dashboard-port" && http_port) args[i + 1] = *http_port;
    if (args[i] == "--serve-port") {
      has_serve_port = true;
      if (serve_port) args[i + 1] = *serve_port;
    }
  }
  // Clients keep the ingress's address: the new head serves on the same port.
  if (!has_serve_port && serve_port) {
    args.push_back("--serve-port");
    args.push_back(*serve_port);
  }
  std::vector<pid_t> running;
  for (const ProcessRecord& r : ReadProcesses(session)) {
    if (r.role == "head" && IsTorusProcess(r.pid)) running.push_back(r.pid);
  }
  StopProcesses(running, std::chrono::seconds(5));
  std::error_code ec;
  std::filesystem::remove(session + "/head_address", ec);
  std::filesystem::remove(session + "/dashboard_address", ec);
  return StartHead(session, "head", args, /*standby=*/false);
}

absl::StatusOr<std::vector<std::string>> RestartStoppedHeads(const std::string& session) {
  std::vector<std::string> restarted;
  const std::map<std::string, pid_t> pids = HeadPids(session);
  for (const std::string& name : HeadNames(session)) {
    if (IsTorusProcess(pids.at(name))) continue;
    auto saved = LoadHeadLaunch(session, name);
    if (!saved.ok()) return saved.status();
    // Its ports are fixed in its launch (every agent was given them); it stands by while another head leads.
    auto started = StartHead(session, name, saved->args, /*standby=*/true);
    if (!started.ok()) return started.status();
    restarted.push_back(name);
  }
  return restarted;
}

absl::StatusOr<pid_t> LaunchAgent(const AgentLaunch& launch) {
  std::error_code ec;
  std::filesystem::create_directories(launch.session + "/agents", ec);
  nlohmann::json saved = {{"name", launch.name}, {"args", launch.args}, {"env", launch.env}};
  {
    // The saved environment may hold secrets of the launching shell: owner-only.
    std::string path = absl::StrCat(launch.session, "/agents/", launch.name, ".json");
    std::ofstream out(path);
    out << saved.dump(2) << "\n";
    out.close();
    std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write,
                                 std::filesystem::perm_options::replace, ec);
  }
  SpawnSpec spec{.argv = NamespacePrefix(launch.session, launch.name),
                 .env = launch.env,
                 .log_path = absl::StrCat(launch.session, "/logs/node-", launch.name, ".log")};
  spec.argv.push_back(SiblingBinary("torus-node"));
  spec.argv.insert(spec.argv.end(), launch.args.begin(), launch.args.end());
  auto pid = SpawnDaemon(spec);
  if (!pid.ok()) return pid.status();
  auto recorded = RecordProcess(launch.session, {"node", launch.name, *pid});
  if (!recorded.ok()) return recorded;
  return *pid;
}

std::string TpuSimPortFile(const std::string& session, const std::string& name) {
  return absl::StrCat(session, "/hosts/", name, "/tpu_sim_port");
}

absl::StatusOr<pid_t> StartTpuSim(const TpuSimLaunch& launch) {
  const std::string port_file = TpuSimPortFile(launch.session, launch.name);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(port_file).parent_path(), ec);
  std::filesystem::remove(port_file, ec);
  std::vector<std::string> argv = NamespacePrefix(launch.session, launch.name);
  for (const std::string& a :
       {SiblingBinary("torus-tpu-sim"), std::string("--host"), std::string("127.0.0.1"), std::string("--port"),
        std::string("0"), std::string("--port-file"), port_file, std::string("--name"), launch.name,
        std::string("--generation"), launch.generation, std::string("--chips"), absl::StrCat(launch.chips),
        std::string("--worker-mark"), launch.worker_mark, std::string("--log-dir"), launch.log_dir}) {
    argv.push_back(a);
  }
  SpawnSpec spec{.argv = std::move(argv),
                 .env = launch.env,
                 .log_path = absl::StrCat(launch.session, "/logs/sim-", launch.name, ".log")};
  auto pid = SpawnDaemon(spec);
  if (!pid.ok()) return pid.status();
  auto recorded = RecordProcess(launch.session, {"sim", launch.name, *pid});
  if (!recorded.ok()) return recorded;
  return *pid;
}

absl::StatusOr<int> WaitForTpuSimPort(const std::string& session, const std::string& name, pid_t pid,
                                      std::chrono::milliseconds timeout) {
  const std::string log = absl::StrCat(session, "/logs/sim-", name, ".log");
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto text = client::ReadTrimmed(TpuSimPortFile(session, name));
    int port = 0;
    if (text.ok() && absl::SimpleAtoi(*text, &port) && port > 0) return port;
    if (!ProcessAlive(pid)) {
      return absl::InternalError(absl::StrCat("torus-tpu-sim of ", name, " exited during start; end of ", log, ":\n",
                                              TailOfFile(log, 10)));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("torus-tpu-sim of ", name, " did not serve within ",
                                                      static_cast<double>(timeout.count()) / 1000, " s; see ", log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

absl::StatusOr<AgentLaunch> LoadAgentLaunch(const std::string& session, const std::string& name) {
  std::string path = absl::StrCat(session, "/agents/", name, ".json");
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("no agent named \"", name, "\" in session ", session));
  auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("args") || !j.contains("env")) {
    return absl::DataLossError(absl::StrCat(path, " is not a saved agent launch"));
  }
  AgentLaunch launch;
  launch.session = session;
  launch.name = name;
  if (!j["args"].is_array() || !j["env"].is_object()) {
    return absl::DataLossError(absl::StrCat(path, ": args is a list of strings and env an object of strings"));
  }
  for (const auto& a : j["args"]) {
    if (!a.is_string()) return absl::DataLossError(absl::StrCat(path, ": args is a list of strings"));
    launch.args.push_back(a.get<std::string>());
  }
  for (const auto& [k, v] : j["env"].items()) {
    if (!v.is_string()) return absl::DataLossError(absl::StrCat(path, ": env.", k, " is not a string"));
    launch.env[k] = v.get<std::string>();
  }
  return launch;
}

absl::Status WaitForNodes(const std::string& address, const std::string& token, const std::set<std::string>& node_ids,
                          const std::map<std::string, pid_t>& agents, const std::string& session,
                          std::chrono::milliseconds timeout) {
  const std::string tls_ca = client::SessionTlsCa(session);
  auto client = client::Client::Connect({.address = address, .token = token, .tls_ca = tls_ca});
  if (!client.ok()) return client.status();
  // Registrations are waited for on the head's node events (read from before the first look, so that none is
  // missed); a crashed agent is noticed at the latest a quarter second later.
  std::unique_ptr<client::HttpApiClient> http;
  std::optional<client::EventCursor> cursor;
  if (auto dashboard = client::ReadTrimmed(session + "/dashboard_address"); dashboard.ok() && !dashboard->empty()) {
    if (auto connected = client::HttpApiClient::Connect({.address = *dashboard, .token = token, .tls_ca = tls_ca});
        connected.ok()) {
      http = *std::move(connected);
      if (auto now = http->EventsNow(); now.ok()) cursor = *now;
    }
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t alive = 0;
  while (true) {
    auto status = (*client)->GetClusterStatus(/*include_dead=*/false);
    if (status.ok()) {
      alive = 0;
      for (const auto& n : status->nodes()) alive += node_ids.contains(n.info().node_id());
      if (alive == node_ids.size()) return absl::OkStatus();
    }
    for (const auto& [name, pid] : agents) {
      if (!ProcessAlive(pid)) {
        std::string log = absl::StrCat(session, "/logs/node-", name, ".log");
        return absl::InternalError(absl::StrCat("agent ", name, " exited; end of ", log, ":\n", TailOfFile(log, 10)));
      }
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string detail = absl::StrCat("; see ", session, "/logs");
      if (agents.size() == 1) {  // one agent (`torus start --address`): what it last said
        const std::string log = absl::StrCat(session, "/logs/node-", agents.begin()->first, ".log");
        detail = absl::StrCat("; end of ", log, ":\n", TailOfFile(log, 2));
      }
      return absl::DeadlineExceededError(absl::StrCat(alive, " of ", node_ids.size(), " nodes registered within ",
                                                      static_cast<double>(timeout.count()) / 1000, " s", detail));
    }
    if (!cursor || !http->WaitEvents(&*cursor, {.kinds = {"node"}}, 250).ok()) {
      cursor.reset();  // a head without events, or one that went away: look again shortly
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

std::map<std::string, std::string> CleanAgentEnvironment() {
  std::map<std::string, std::string> env = CurrentEnvironment();
  for (auto it = env.begin(); it != env.end();) {
    const std::string& k = it->first;
    bool drop = absl::StartsWith(k, "TPU_") || absl::StartsWith(k, "MEGASCALE_") ||
                absl::StartsWith(k, "TORUS_NODE_") || k == "TORUS_TOKEN" || k == "TORUS_ADDRESS" ||
                k == "CUDA_VISIBLE_DEVICES";
    it = drop ? env.erase(it) : std::next(it);
  }
  return env;
}

std::vector<std::string> SessionTlsAgentArgs(const std::string& session) {
  if (client::SessionTlsCa(session).empty()) return {};
  return {"--tls-ca", session + "/ca.crt", "--join-token-file", session + "/join_token"};
}

absl::StatusOr<std::string> DashboardLoginUrl(const std::string& session) {
  auto address = client::ReadTrimmed(session + "/dashboard_address");
  if (!address.ok()) return absl::NotFoundError(absl::StrCat("no head in ", session, " (no dashboard_address)"));
  auto token = rpc::ReadTokenFile(session + "/token");
  if (!token.ok()) return token.status();
  const bool tls = !client::SessionTlsCa(session).empty();
  return absl::StrCat(tls ? "https://" : "http://", *address, "/?token=", *token);
}

}  // namespace torus::cli
