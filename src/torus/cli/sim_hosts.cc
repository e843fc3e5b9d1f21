#include "torus/cli/sim_hosts.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "torus/accel/fake_host.h"
#include "torus/cli/format.h"
#include "torus/cli/launcher.h"
#include "torus/common/resources.h"

namespace torus::cli {
namespace {

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
  for (std::string& flag : SessionTlsAgentArgs(session)) args.push_back(std::move(flag));
  return args;
}

}  // namespace

absl::StatusOr<std::map<std::string, pid_t>> StartSimulatedHosts(const std::string& session,
                                                                 const std::string& head_address,
                                                                 const std::vector<SimulatedHost>& hosts,
                                                                 const SimulatedHostOptions& options) {
  const auto base_env = CleanAgentEnvironment();
  std::map<std::string, pid_t> agents;
  // Device roots first, and every TPU host's simulated libtpu metrics server, so that the simulators come up
  // together; each agent then starts once its host's simulator serves.
  std::map<std::string, pid_t> sims;
  for (const SimulatedHost& host : hosts) {
    if (absl::Status s = PrepareHostRoot(host, absl::StrCat(session, "/hosts/", host.name)); !s.ok()) {
      return s;
    }
    if (!options.tpu_sim || !host.tpu_generation) continue;
    auto pid = StartTpuSim({.session = session,
                            .name = host.name,
                            .generation = std::string(GetGenerationInfo(*host.tpu_generation).pod_prefix),
                            .chips = host.tpu_chips,
                            .worker_mark = HostWorkDir(session, host.name),
                            .log_dir = HostTpuLogDir(session, host.name),
                            .env = base_env});
    if (!pid.ok()) {
      return absl::Status(pid.status().code(),
                          absl::StrCat(pid.status().message(), " (`torus up --no-tpu-sim` starts no simulators)"));
    }
    sims[host.name] = *pid;
  }
  for (const SimulatedHost& host : hosts) {
    std::string host_root = absl::StrCat(session, "/hosts/", host.name);
    auto env = base_env;
    for (const auto& [k, v] : host.env) env[k] = v;
    std::vector<std::string> args = SimulatedAgentArgs(host, head_address, session, host_root);
    if (options.metrics_period_ms) {
      args.push_back("--metrics-period-ms");
      args.push_back(absl::StrCat(*options.metrics_period_ms));
    }
    if (auto sim = sims.find(host.name); sim != sims.end()) {
      auto port = WaitForTpuSimPort(session, host.name, sim->second, std::chrono::seconds(15));
      if (!port.ok()) {
        return port.status();
      }
      env["TPU_RUNTIME_METRICS_PORTS"] = absl::StrCat(*port);
      args.push_back("--tpu-log-dir");
      args.push_back(HostTpuLogDir(session, host.name));
    }
    auto pid = LaunchAgent({.session = session, .name = host.name, .args = args, .env = env});
    if (!pid.ok()) {
      return pid.status();
    }
    agents[host.name] = *pid;
  }
  return agents;
}

}  // namespace torus::cli
