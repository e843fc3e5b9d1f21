// torus-node: the per-host agent. Parses flags, detects the host, keeps it registered with the head, and runs the
// workers the head asks for.
#include <signal.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "spdlog/spdlog.h"
#include "torus/accel/tpu_detect.h"
#include "torus/common/clock.h"
#include "torus/common/parse_flags.h"
#include "torus/common/strings.h"
#include "torus/common/termination.h"
#include "torus/node/agent.h"
#include "torus/node/bundle_ledger.h"
#include "torus/node/exit_reporter.h"
#include "torus/node/leftovers.h"
#include "torus/node/log_files.h"
#include "torus/node/metrics_sampler.h"
#include "torus/node/node_certificate.h"
#include "torus/node/node_identity.h"
#include "torus/node/lease_service.h"
#include "torus/node/object_service.h"
#include "torus/node/object_store.h"
#include "torus/node/node_service.h"
#include "torus/node/worker_leases.h"
#include "torus/node/worker_supervisor.h"
#include "torus/rpc/auth.h"
#include "torus/common/head_target.h"
#include "torus/tls/credentials.h"
#include "torus/tls/pki.h"

extern char** environ;

namespace {

struct NodeFlags {
  int64_t package_cache_bytes = int64_t{10} << 30;
  std::string address;
  std::string token;
  std::string token_file;
  std::string node_id;
  std::string node_ip = "127.0.0.1";
  int node_port = 0;
  std::string dev_root = "/";
  std::string sys_root;
  std::string metadata_url = "http://metadata.google.internal";
  std::string labels;
  std::string labels_file;
  std::string resources;
  std::optional<double> num_cpus;
  std::optional<int64_t> memory;
  std::optional<int> chips_per_host;
  std::optional<std::string> slice_name;
  bool no_nvml = false;
  std::string work_dir;
  std::optional<int64_t> object_store_memory;
  std::string object_store_dir;
  int64_t metrics_period_ms = 5000;
  std::string tpu_log_dir = "/tmp/tpu_logs";
  int64_t head_grace_ms = 300'000;
  std::string task_python = "/usr/bin/python3";
  std::string python_path;  // default: beside the build or install
  int64_t idle_worker_ms = 10'000;
  std::string tls_ca;           // the cluster CA: TLS on, with a node certificate
  std::string join_token;
  std::string join_token_file;
};

// Workers get SIGTERM on agent shutdown and SIGKILL this long after.
constexpr int64_t kShutdownGraceMicros = 3'000'000;

torus::EnvMap ProcessEnvironment() {
  torus::EnvMap env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

std::string RandomNodeId() {
  auto token = torus::rpc::GenerateToken();
  return token.ok() ? token->substr(0, 16) : absl::StrCat(getpid(), "-", time(nullptr));
}

// Where task workers find the torus Python package: the python/ directory of the source tree and the build's python/
// (its compiled module) beside a build (bin/../../python, bin/../python), or an install's share/torus/python, or
// the source tree this binary was built from (a build folder elsewhere).
std::string DefaultPythonPath() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  std::vector<std::string> dirs;
  for (auto candidate : {exe.parent_path() / "../../python", exe.parent_path() / "../share/torus/python",
                         std::filesystem::path(TORUS_SOURCE_DIR) / "python"}) {
    if (std::filesystem::exists(candidate / "torus" / "__init__.py", ec)) {
      dirs.push_back(std::filesystem::weakly_canonical(candidate, ec).string());
      break;
    }
  }
  if (std::filesystem::exists(exe.parent_path() / "../python", ec)) {
    dirs.push_back(std::filesystem::weakly_canonical(exe.parent_path() / "../python", ec).string());
  }
  return absl::StrJoin(dirs, ":");
}

std::string Hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// The node's object store: in --object-store-dir, or a directory of its own on /dev/shm (what agents that died left
// there goes), else in the work dir.
absl::StatusOr<std::unique_ptr<torus::node::ObjectStore>> OpenObjectStore(const NodeFlags& flags,
                                                                          const std::string& node_id,
                                                                          const torus::ResourceSet& resources,
                                                                          const std::string& work_dir) {
  const int64_t memory = resources.GetFixed(torus::kResourceMemory) / torus::kResourceScale;
  uint64_t capacity = static_cast<uint64_t>(flags.object_store_memory.value_or(static_cast<int64_t>(memory * 0.3)));
  std::string dir = flags.object_store_dir;
  if (dir.empty()) {
    std::error_code ec;
    if (std::filesystem::is_directory("/dev/shm", ec)) {
      torus::node::RemoveLeftoverStores("/dev/shm", "torus-objects-");
      dir = absl::StrCat("/dev/shm/torus-objects-", node_id, "-", getpid());
    } else {
      dir = work_dir + "/objects";
    }
  }
  // The default never promises more than the file system holds (a container's /dev/shm may be 64 MiB).
  struct statvfs fs {};
  const std::string parent = std::filesystem::path(dir).parent_path().string();
  if (!flags.object_store_memory && statvfs(parent.c_str(), &fs) == 0) {
    const uint64_t room = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize / 100 * 95;
    if (room < capacity) {
      spdlog::warn("object store: {} holds {}; the store is sized to it (set --object-store-memory to choose)", parent,
                   torus::HumanBytes(static_cast<int64_t>(room)));
      capacity = room;
    }
  }
  return torus::node::ObjectStore::Open(dir, capacity);
}

// Exit codes: 0 stopped, 1 runtime failure, 2 bad flags or input.
int Run(const NodeFlags& flags) {
  torus::node::IdentityOptions options;
  options.node_id = flags.node_id.empty() ? RandomNodeId() : flags.node_id;
  options.address = flags.node_ip;
  options.hostname = Hostname();
  options.dev_root = flags.dev_root;
  options.sys_root = flags.sys_root.empty() ? flags.dev_root : flags.sys_root;
  options.env = ProcessEnvironment();
  options.use_nvml = !flags.no_nvml;
  options.chips_per_host = flags.chips_per_host;
  options.slice_name = flags.slice_name;
  options.num_cpus = flags.num_cpus;
  options.memory_bytes = flags.memory;

  auto labels = torus::ParseLabelsFlag(flags.labels);
  if (!labels.ok()) {
    std::cerr << "torus-node: --labels: " << labels.status().message() << "\n";
    return 2;
  }
  options.user_labels = *labels;
  if (!flags.labels_file.empty()) {
    std::ifstream in(flags.labels_file);
    if (!in) {
      std::cerr << "torus-node: --labels-file: cannot read " << flags.labels_file << "\n";
      return 2;
    }
    std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto file_labels = torus::ParseLabelsFile(contents);
    if (!file_labels.ok()) {
      std::cerr << "torus-node: --labels-file " << flags.labels_file << ": " << file_labels.status().message()
                << "\n";
      return 2;
    }
    // --labels wins over the file.
    for (auto& [k, v] : *file_labels) options.user_labels.emplace(k, v);
  }
  if (!flags.resources.empty()) {
    auto resources = torus::ParseCustomResourcesJson(flags.resources);
    if (!resources.ok()) {
      std::cerr << "torus-node: " << resources.status().message() << "\n";
      return 2;
    }
    options.custom_resources = *resources;
  }

  std::string token = flags.token;
  if (token.empty() && !flags.token_file.empty()) {
    auto t = torus::rpc::ReadTokenFile(flags.token_file);
    if (!t.ok()) {
      std::cerr << "torus-node: " << t.status().message() << "\n";
      return 2;
    }
    token = *t;
  }
  if (token.empty()) {
    const char* env_token = getenv("TORUS_TOKEN");
    if (env_token != nullptr) token = env_token;
  }
  if (token.empty()) {
    std::cerr << "torus-node: no cluster token; pass --token, --token-file or set TORUS_TOKEN\n";
    return 2;
  }

  std::unique_ptr<torus::MetadataSource> metadata;
  if (flags.metadata_url != "off") metadata = torus::MakeHttpMetadataSource(flags.metadata_url);
  options.metadata = metadata.get();

  auto identity = torus::node::BuildNodeIdentity(options);
  if (!identity.ok()) {
    std::cerr << "torus-node: " << identity.status().message() << "\n";
    spdlog::error("host detection failed: {}", std::string(identity.status().message()));
    return 2;
  }
  for (const std::string& w : identity->warnings) spdlog::warn("{}", w);
  spdlog::info("torus-node {} starting: node {} at {}; {}", getpid(), identity->node_id, identity->address,
               identity->summary);
  spdlog::info("resources {} labels {}", identity->resources.ToJson(), torus::FormatLabels(identity->labels));

  const std::string work_dir =
      flags.work_dir.empty() ? absl::StrCat("/tmp/torus/node_", identity->node_id) : flags.work_dir;
  const std::string worker_log_dir = work_dir + "/workers";
  std::error_code dir_error;
  std::filesystem::create_directories(worker_log_dir, dir_error);
  if (dir_error) {
    std::cerr << "torus-node: --work-dir: cannot create " << worker_log_dir << ": " << dir_error.message() << "\n";
    return 1;
  }
  spdlog::info("work dir {} (worker logs in {})", work_dir, worker_log_dir);
  if (int killed = torus::node::KillLeftoverWorkers(work_dir); killed > 0) {
    spdlog::warn("killed {} processes left by an earlier run of this agent's workers", killed);
  }
  torus::EnvMap worker_env = options.env;
  worker_env[torus::node::kWorkerMarkVariable] = work_dir;
  // libtpu in a worker logs where the agent looks for a failed worker's last accelerator error.
  if (!flags.tpu_log_dir.empty()) worker_env.try_emplace("TPU_LOG_DIR", flags.tpu_log_dir);
  // Workers talk TLS exactly when this agent does (set below): a CA in the agent's own environment, from another
  // cluster, is not theirs.
  worker_env.erase("TORUS_TLS_CA");

  torus::RealClock clock;
  // With TLS: this node's certificate (joined with the join token once, then kept and renewed in the work dir).
  std::unique_ptr<torus::node::NodeCertificateKeeper> certificate;
  if (!flags.tls_ca.empty()) {
    std::string join_token = flags.join_token;
    if (join_token.empty() && !flags.join_token_file.empty()) {
      auto t = torus::rpc::ReadTokenFile(flags.join_token_file);
      if (!t.ok()) {
        std::cerr << "torus-node: --join-token-file: " << t.status().message() << "\n";
        return 2;
      }
      join_token = *t;
    }
    auto obtained = torus::node::NodeCertificateKeeper::Obtain({.ca_file = flags.tls_ca,
                                                                .join_token = join_token,
                                                                .dir = work_dir + "/tls",
                                                                .node_id = identity->node_id,
                                                                .head_address = flags.address},
                                                               &clock, flags.head_grace_ms);
    if (!obtained.ok()) {
      std::cerr << "torus-node: " << obtained.status().message() << "\n";
      spdlog::error("no node certificate: {}", std::string(obtained.status().message()));
      return 2;
    }
    certificate = *std::move(obtained);
    worker_env["TORUS_TLS_CA"] = certificate->files().ca;
    spdlog::info("TLS on: node certificate {} valid until {}", certificate->files().cert, certificate->not_after_s());
  }
  const int chips = static_cast<int>(identity->resources.GetFixed(torus::kResourceTpu) / torus::kResourceScale);
  const int gpus = static_cast<int>(identity->resources.GetFixed(torus::kResourceGpu) / torus::kResourceScale);
  torus::node::BundleLedger ledger(&clock, identity->resources, chips, gpus);
  torus::node::HostDevices devices{.chips = chips, .gpus = gpus, .base_env = worker_env};
  if (auto type = identity->labels.find("torus.io/accelerator-type"); type != identity->labels.end()) {
    if (auto gen = torus::ParseAcceleratorType(type->second); gen.ok()) devices.tpu_generation = *gen;
  }

  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, torus::kHeadConnectTimeoutMs);
  // Heartbeats travel on one long stream: pings notice a head that vanished without closing the connection (its
  // machine cut off), within 4 s, so that the agent moves to the head that leads after it before its node timeout.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2'000);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Package pieces come in replies of up to 4 MiB of data.
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 16 << 20);
  auto channel = grpc::CreateCustomChannel(
      torus::HeadTarget(flags.address),
      certificate ? torus::tls::ChannelCredentials(certificate->files(), torus::tls::kHeadIdentity)
                  : grpc::InsecureChannelCredentials(),
      args);
  if (certificate) certificate->StartRenewal(channel);
  torus::node::ExitReporter exit_reporter(torus::node::MakeHeadExitSender(channel, token, identity->node_id));
  std::unique_ptr<torus::node::Agent> agent_holder;
  std::atomic<torus::node::NodeServiceImpl*> service_for_exits{nullptr};  // set once the service exists
  std::atomic<torus::node::WorkerLeases*> leases_for_exits{nullptr};       // set once the leases exist
  torus::node::WorkerSupervisor workers(&clock, worker_log_dir, worker_env,
                                        [&exit_reporter, &ledger, &agent_holder, &service_for_exits,
                                         &leases_for_exits](const torus::node::WorkerExit& exit) {
                                          // The packages it ran in may be evicted once nothing else uses them.
                                          if (auto* s = service_for_exits.load()) s->OnWorkerExited(exit.worker_id);
                                          // A released bundle is free once its last worker is gone.
                                          if (ledger.Unbind(exit.worker_id)) {
                                            if (agent_holder) agent_holder->NotifyLedgerChanged();
                                            if (auto* l = leases_for_exits.load()) l->LedgerChanged();
                                          }
                                          // Task workers are the agent's own: their leases end here.
                                          if (torus::node::IsLeaseOwner(exit.owner)) {
                                            if (auto* l = leases_for_exits.load()) {
                                              l->OnWorkerExited(exit.worker_id, torus::node::DescribeExit(exit));
                                            }
                                            return;
                                          }
                                          exit_reporter.Report(exit);
                                        },
                                        {.tpu_log_dir = flags.tpu_log_dir});
  const torus::node::LogFiles log_files({.agent_log = torus::node::DetectStdoutLogFile(),
                                         .tpu_log_dir = flags.tpu_log_dir,
                                         .worker_log_dir = worker_log_dir});
  // Declared before the service: starts waiting on a fetch use it until the service is gone.
  torus::node::PackageCache packages(work_dir + "/packages", torus::node::MakeHeadPackageFetcher(channel, token),
                                     {.max_bytes = static_cast<uint64_t>(flags.package_cache_bytes)});
  torus::node::NodeServiceImpl service(
      &ledger, &workers, flags.node_ip, token,
      [&agent_holder, &leases_for_exits] {
        if (agent_holder) agent_holder->NotifyLedgerChanged();
        if (auto* l = leases_for_exits.load()) l->LedgerChanged();
      },
      &log_files, devices);
  service.SetPackageCache(&packages);
  service_for_exits = &service;
  // Task workers: the port is known once the server listens, so their environment is completed below.
  torus::node::WorkerLeasesOptions lease_options{.node_ip = flags.node_ip, .idle_worker_ms = flags.idle_worker_ms};
  std::unique_ptr<torus::node::WorkerLeases> leases;
  grpc::ServerBuilder builder;
  int agent_port = 0;
  builder.AddListeningPort(absl::StrCat(flags.node_ip, ":", flags.node_port),
                           certificate ? torus::tls::ServerCredentials(certificate->files())
                                       : grpc::InsecureServerCredentials(),
                           &agent_port);
  service.RequireHeadForControl(certificate != nullptr);
  builder.RegisterService(&service);
  // Registered before the server starts; it answers UNAVAILABLE until the leases exist (their workers' environment
  // names the agent's port).
  torus::node::LeaseServiceImpl lease_service(token, identity->node_id);
  builder.RegisterService(&lease_service);
  // The object store answers only once the port is known (it tells other agents where to pull from).
  auto object_store = OpenObjectStore(flags, identity->node_id, identity->resources, work_dir);
  if (!object_store.ok()) {
    std::cerr << "torus-node: object store: " << object_store.status().message() << "\n";
    return 1;
  }
  torus::node::ObjectStoreServiceImpl object_service(object_store->get(), token, torus::node::ReadBootId());
  if (certificate) {
    object_service.SetTls(certificate->files());
  }
  builder.RegisterService(&object_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || agent_port == 0) {
    std::cerr << "torus-node: cannot listen on " << flags.node_ip << ":" << flags.node_port
              << " (in use, or not an address of this host?)\n";
    return 1;
  }
  spdlog::info("agent service listening on {}:{}", flags.node_ip, agent_port);
  if (absl::Status s = object_service.Start(absl::StrCat(flags.node_ip, ":", agent_port)); !s.ok()) {
    std::cerr << "torus-node: object store: " << s.message() << "\n";
    return 1;
  }
  spdlog::info("object store in {} holding up to {}", (*object_store)->dir(),
               torus::HumanBytes(static_cast<int64_t>((*object_store)->stats().capacity)));
  {
    const std::string python_path = flags.python_path.empty() ? DefaultPythonPath() : flags.python_path;
    lease_options.worker_argv = {flags.task_python, "-m", "torus._private.default_worker"};
    lease_options.worker_env = {{"TORUS_AGENT_ADDRESS", absl::StrCat(flags.node_ip, ":", agent_port)},
                                {"TORUS_ADDRESS", flags.address},
                                {"TORUS_TOKEN", token},
                                {"TORUS_NODE_ID", identity->node_id},
                                {"TORUS_NODE_IP", flags.node_ip}};
    if (certificate) lease_options.worker_env["TORUS_TLS_CA"] = certificate->files().ca;
    if (!python_path.empty()) {
      auto inherited = worker_env.find("PYTHONPATH");
      lease_options.worker_env["PYTHONPATH"] =
          inherited == worker_env.end() || inherited->second.empty() ? python_path
                                                                     : absl::StrCat(python_path, ":", inherited->second);
    }
    leases = std::make_unique<torus::node::WorkerLeases>(&ledger, &workers, devices, lease_options, [&agent_holder] {
      if (agent_holder) agent_holder->NotifyLedgerChanged();
    });
    leases_for_exits = leases.get();
    lease_service.Attach(leases.get());
  }
  agent_holder = std::make_unique<torus::node::Agent>(*identity, channel, token, &ledger, &workers, agent_port,
                                                      flags.head_grace_ms);
  torus::node::Agent& agent = *agent_holder;
  agent.set_tls(certificate != nullptr);

  std::unique_ptr<torus::node::MetricsSampler> sampler;
  if (flags.metrics_period_ms > 0) {
    sampler = std::make_unique<torus::node::MetricsSampler>(
        &clock, torus::node::MetricsSamplerOptions{.node_id = identity->node_id, .period_ms = flags.metrics_period_ms},
        [&] {
          auto sources = torus::node::MakeHostMetricsSources(chips, gpus, !flags.no_nvml, options.env,
                                                             [&workers] { return workers.Running(); });
          sources.read_agent = [&leases, store = object_store->get()] {
            std::vector<torus::node::AgentSample> samples = leases->Samples();
            for (auto& s : torus::node::StoreSamples(store->stats())) samples.push_back(std::move(s));
            return samples;
          };
          return sources;
        }(),
        torus::node::MakeHeadMetricsSender(channel, token), [&agent] { return agent.incarnation(); });
    sampler->Start();
    spdlog::info("sampling metrics every {} ms", flags.metrics_period_ms);
  }

  std::thread signal_thread([&agent, &workers, &exit_reporter, &service, &leases_for_exits] {
    const int sig = torus::WaitForTerminationSignal();
    spdlog::info("signal {}: stopping workers, unregistering and stopping", sig);
    // Workers go first, while the head still hears about their exits; a start waiting on a package fetch gives up.
    service.StopStarting();
    if (auto* l = leases_for_exits.load()) l->Shutdown();
    if (int stopped = workers.StopAll(kShutdownGraceMicros); stopped > 0) {
      spdlog::info("stopped {} worker{}", stopped, stopped == 1 ? "" : "s");
      exit_reporter.WaitIdle(std::chrono::seconds(1));
    }
    agent.Stop();
  });
  torus::node::AgentExit exit = agent.Run();
  if (exit == torus::node::AgentExit::kUnauthenticated) {
    std::cerr << "torus-node: the head refused the cluster token\n";
    std::_Exit(2);
  }
  if (exit == torus::node::AgentExit::kRefused) {
    // Revoked: nothing of this node may keep running.
    service.StopStarting();
    if (auto* l = leases_for_exits.load()) l->Shutdown();
    workers.StopAll(kShutdownGraceMicros);
    std::cerr << "torus-node: the head refused this node (revoked?); its workers were stopped\n";
    std::_Exit(3);
  }
  signal_thread.join();
  if (sampler) sampler->Stop();
  if (certificate) certificate->Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  object_service.Stop();
  service_for_exits = nullptr;  // the service goes before the supervisor
  leases_for_exits = nullptr;   // and so do the leases
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian builds Abseil with mutex deadlock detection on; it graphs every lock gRPC takes per call. The agent's lock
  // order is fixed by construction, so the graph is not kept (as in the head).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  torus::BlockTerminationSignals();

  NodeFlags flags;
  CLI::App app{"torus-node: the torus agent. Detects this host's TPUs and GPUs and keeps it registered."};
  app.add_option("--address", flags.address, "Head address HOST:PORT")->required();
  app.add_option("--token", flags.token, "Cluster token (prefer --token-file or TORUS_TOKEN)");
  app.add_option("--token-file", flags.token_file, "File holding the cluster token");
  app.add_option("--node-id", flags.node_id, "Node id (1-64 of [0-9A-Za-z_-]) [default: random]");
  app.add_option("--node-ip", flags.node_ip, "Address other nodes reach this host at")->capture_default_str();
  app.add_option("--node-port", flags.node_port, "Port of this agent's service on --node-ip (0 = any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--dev-root", flags.dev_root, "Root holding dev/ for device detection")->capture_default_str();
  app.add_option("--sys-root", flags.sys_root, "Root holding sys/ (PCI ids of TPU chips) [default: --dev-root]");
  app.add_option("--metadata-url", flags.metadata_url,
                 "GCE metadata server base URL, or 'off' (also skipped when TPU_SKIP_MDS_QUERY=true)")
      ->capture_default_str();
  app.add_option("--labels", flags.labels, "User labels k=v,k2=v2 (torus.io/ keys: market-type, node-group, "
                                           "availability-zone, availability-region)");
  app.add_option("--labels-file", flags.labels_file, "YAML or JSON map of user labels");
  app.add_option("--resources", flags.resources, "Custom resources as JSON, e.g. '{\"special\": 2}'");
  app.add_option("--num-cpus", flags.num_cpus, "CPU resource [default: CPUs this process may use]")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--memory", flags.memory, "memory resource in bytes [default: MemTotal]")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
  app.add_option("--chips-per-host", flags.chips_per_host, "TPU chips per host setting (settles v5e/v6e 2x4)")
      ->check(CLI::IsMember({1, 4, 8}));
  app.add_option("--slice-name", flags.slice_name, "Override the TPU slice name (TPU_NAME)");
  app.add_flag("--no-nvml", flags.no_nvml, "Do not load NVML; count GPUs from device files only");
  app.add_option("--work-dir", flags.work_dir,
                 "Directory for this agent's files; worker logs go to <work-dir>/workers/ "
                 "[default: /tmp/torus/node_<node-id>]");
  app.add_option("--object-store-memory", flags.object_store_memory,
                 "Bytes of shared memory for large objects of tasks and actors [default: 30% of the memory resource]")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
  app.add_option("--object-store-dir", flags.object_store_dir,
                 "Directory of the object store's files, on a tmpfs [default: /dev/shm/torus-objects-<node-id>-<pid>]");
  app.add_option("--package-cache-bytes", flags.package_cache_bytes,
                 "Unpacked bytes of packages (uploaded working dirs and py_modules) kept for later workers; the "
                 "least recently used go first, never one a worker runs in")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
  app.add_option("--metrics-period-ms", flags.metrics_period_ms,
                 "How often host, worker, TPU and GPU metrics are sampled and sent to the head (0 = never)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}));
  app.add_option("--task-python", flags.task_python, "Python interpreter of task workers (python3 -m torus._private.default_worker)");
  app.add_option("--python-path", flags.python_path,
                 "Directories (:-separated) put first on task workers' PYTHONPATH; default: beside the build");
  app.add_option("--idle-worker-ms", flags.idle_worker_ms, "Idle pooled task workers are stopped after this long");
  app.add_option("--tls-ca", flags.tls_ca,
                 "The cluster CA's certificate (the head's <state dir>/tls/ca.crt): talk TLS to the head and to other "
                 "nodes, with a node certificate from the head (docs/security.md)");
  app.add_option("--join-token", flags.join_token,
                 "With --tls-ca and no certificate yet: the cluster's join token, exchanged once for this node's "
                 "certificate (prefer --join-token-file)");
  app.add_option("--join-token-file", flags.join_token_file, "File holding the join token");
  app.add_option("--tpu-log-dir", flags.tpu_log_dir, "Directory of libtpu's logs, served as tpu/<file>")
      ->capture_default_str();
  app.add_option("--head-grace-ms", flags.head_grace_ms,
                 "How long workers keep running while the head is unreachable; after that the agent stops them and "
                 "releases its bundles")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1000}, int64_t{7 * 86'400'000}));
  if (auto exit_code = torus::ParseFlags(app, argc, argv)) return *exit_code;
  if (flags.metrics_period_ms > 0 && flags.metrics_period_ms < 100) {
    std::cerr << "torus-node: --metrics-period-ms must be 0 (off) or at least 100 (got " << flags.metrics_period_ms
              << ")\n";
    return 2;
  }
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  return Run(flags);
}
