// torus-tpu-sim: a SIMULATOR of libtpu's runtime metrics service, for the simulated TPU hosts of a local cluster
// (`torus up`). It serves tpu.monitoring.runtime.RuntimeMetricService on loopback with local credentials, as libtpu
// does on a TPU VM, with values derived from the CPU and memory use of the workers bound to this host's chips,
// and writes libtpu-style log lines. It is not libtpu and measures no TPU.
//
// `torus-tpu-sim --query HOST:PORT` instead prints what a RuntimeMetricService (simulated or real) serves, as JSON.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "spdlog/spdlog.h"
#include "torus/common/parse_flags.h"
#include "torus/common/termination.h"
#include "torus/sim/query.h"
#include "torus/sim/simulator.h"

namespace {

struct Flags {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string port_file;
  int chips = 4;
  std::string generation = "v6e";
  std::string worker_mark;
  std::string log_dir;
  std::string name;
  std::string proc_root = "/proc";
  int sample_interval_ms = 1000;
  std::string query;
  int query_timeout_ms = 3000;
};

// Writes `text` to `path` through a temporary file and a rename, so readers never see it half written.
bool WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!(out << text) || !out.flush()) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  return !ec;
}

std::string DefaultHostName() {
  char buffer[256] = {};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0 || buffer[0] == '\0') return "localhost";
  return buffer;
}

int Query(const Flags& flags) {
  auto result = torus::sim::QueryMetrics(flags.query, std::chrono::milliseconds(flags.query_timeout_ms));
  if (!result.ok()) {
    std::cerr << "torus-tpu-sim --query: " << result.status().message() << "\n";
    return 1;
  }
  std::cout << result->dump(2) << "\n";
  return 0;
}

int Serve(const Flags& flags) {
  auto generation = torus::sim::ParseGeneration(flags.generation);
  if (!generation.ok()) {
    std::cerr << "torus-tpu-sim: --generation: " << generation.status().message() << "\n";
    return 2;
  }
  torus::BlockTerminationSignals();
  const std::string name = flags.name.empty() ? DefaultHostName() : flags.name;

  torus::sim::ChipModelOptions model{.generation = *generation, .chips = flags.chips};
  torus::sim::SimulatedMetricService service(torus::sim::ChipModel(model).Idle(absl::ToUnixNanos(absl::Now())));
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(absl::StrCat(flags.host, ":", flags.port), torus::sim::LocalTcpServerCredentials(),
                           &bound_port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    spdlog::error("cannot serve on {}:{} (local credentials need a loopback address)", flags.host, flags.port);
    return 1;
  }
  const std::string address = absl::StrCat(flags.host, ":", bound_port);

  std::unique_ptr<torus::sim::TpuLog> log;
  if (!flags.log_dir.empty()) {
    auto opened = torus::sim::TpuLog::Open(flags.log_dir, name);
    if (!opened.ok()) {
      spdlog::error("--log-dir: {}", std::string(opened.status().message()));
      return 1;
    }
    log = std::move(*opened);
    for (const std::string& line : torus::sim::StartupLines(*generation, flags.chips, address)) log->Info(line);
    spdlog::info("libtpu-style log: {}", log->path());
  }
  if (flags.worker_mark.empty()) spdlog::warn("no --worker-mark: no process will count as holding a chip");

  torus::sim::Simulator simulator({.proc_root = flags.proc_root,
                                   .worker_mark = flags.worker_mark,
                                   .chips = flags.chips,
                                   .ticks_per_second = sysconf(_SC_CLK_TCK),
                                   .page_size = sysconf(_SC_PAGESIZE)},
                                  model, &service, log.get());
  absl::Notification stop;
  std::thread sampler([&] {
    const auto start = std::chrono::steady_clock::now();
    do {
      const double now = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      simulator.Tick(now, absl::ToUnixNanos(absl::Now()));
    } while (!stop.WaitForNotificationWithTimeout(absl::Milliseconds(flags.sample_interval_ms)));
  });

  if (!flags.port_file.empty() && !WriteFileAtomically(flags.port_file, absl::StrCat(bound_port, "\n"))) {
    spdlog::error("cannot write --port-file {}", flags.port_file);
    stop.Notify();
    sampler.join();
    server->Shutdown();
    return 1;
  }
  spdlog::info("torus-tpu-sim (simulated libtpu metrics) for host {}: {} {} chips, serving on {}", name,
               flags.generation, flags.chips, address);

  const int signal_number = torus::WaitForTerminationSignal();
  spdlog::info("signal {}: stopping", signal_number);
  if (log) log->Info("Shutting down (simulated libtpu)");
  stop.Notify();
  sampler.join();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "torus-tpu-sim: a simulator of libtpu's runtime metrics service (RuntimeMetricService) for the simulated TPU "
      "hosts of a local torus cluster. Values follow the CPU and memory use of the workers holding this host's "
      "chips; no TPU is read."};
  Flags flags;
  app.add_option("--host", flags.host, "Address to listen on (loopback: local credentials)")->capture_default_str();
  app.add_option("--port", flags.port, "Port to listen on (0 = any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  app.add_option("--port-file", flags.port_file, "Write the bound port here (atomically) once serving");
  app.add_option("--chips", flags.chips, "TPU chips of this host")->capture_default_str()->check(CLI::Range(1, 32));
  app.add_option("--generation", flags.generation, "v4, v5e (v5litepod), v5p, v6e or tpu7x")->capture_default_str();
  app.add_option("--worker-mark", flags.worker_mark,
                 "The agent's work dir: processes with TORUS_WORKER_OF=DIR hold the chips in their TPU_VISIBLE_CHIPS "
                 "(every chip with TPU_WORKER_ID and no TPU_VISIBLE_CHIPS)");
  app.add_option("--log-dir", flags.log_dir, "Write libtpu-style log lines to a file in DIR");
  app.add_option("--name", flags.name, "Host name used in the log file name [default: gethostname]");
  app.add_option("--proc-root", flags.proc_root, "Where to read processes from")->capture_default_str();
  app.add_option("--sample-interval-ms", flags.sample_interval_ms, "How often to sample the workers")
      ->capture_default_str()
      ->check(CLI::Range(10, 60000));
  app.add_option("--query", flags.query, "Print the metrics served at HOST:PORT as JSON, and exit");
  app.add_option("--query-timeout-ms", flags.query_timeout_ms, "Deadline of each --query call")
      ->capture_default_str()
      ->check(CLI::Range(1, 600000));
  if (auto exit_code = torus::ParseFlags(app, argc, argv)) return *exit_code;
  return flags.query.empty() ? Serve(flags) : Query(flags);
}
