// Registration and heartbeat load on a real torus-head process.
//
// Starts torus-head, registers N synthetic nodes over gRPC (TPU hosts in v6e-16 slices, with the labels a real
// agent sends), then heartbeats every node at the default period for a measurement window and reports the head's
// CPU (% of one core, from /proc/<pid>/stat) and resident memory, plus whether every node stayed ALIVE.
//
//   build/bin/bench_registration --nodes 1000,10000 --seconds 20
#include <atomic>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench_head.h"
#include "grpcpp/grpcpp.h"
#include "torus/head.grpc.pb.h"

namespace {

using namespace torus::bench;
using Clock = std::chrono::steady_clock;

struct Node {
  std::string id;
  uint64_t incarnation = 0;
};

struct Result {
  int nodes = 0;
  double register_s = 0;
  double cpu_percent = 0;
  double rss_mb = 0;
  double heartbeats_per_s = 0;
  int64_t failed = 0;
  int alive_at_end = 0;
};

Result RunOnce(int n, int seconds, int64_t period_ms, int channels_count) {
  auto started = StartHead("/tmp/torus_bench_reg_", {"--heartbeat-period-ms", std::to_string(period_ms)});
  if (!started.ok()) {
    fprintf(stderr, "bench_registration: %s\n", std::string(started.status().message()).c_str());
    exit(1);
  }
  HeadProcess head = *std::move(started);
  auto stubs = MakeStubs(head.address, channels_count, 0);
  const std::string bearer = "Bearer " + head.token;
  std::vector<Node> nodes(n);
  std::atomic<int64_t> failed{0};
  InFlight inflight(2000);

  auto t0 = Clock::now();
  const std::vector<uint64_t> incarnations = RegisterSyntheticHosts(stubs, head.token, n);
  for (int i = 0; i < n; ++i) {
    nodes[i] = {"bench-" + std::to_string(i), incarnations[i]};
    if (incarnations[i] == 0) ++failed;
  }
  Result r;
  r.nodes = n;
  r.register_s = std::chrono::duration<double>(Clock::now() - t0).count();

  // Heartbeats: every node once per period, spread evenly over 10 ms ticks.
  std::atomic<int64_t> sent{0};
  auto heartbeat = [&](int i) {
    ++sent;
    SendHeartbeat(*stubs[i % stubs.size()], bearer, nodes[i].id, nodes[i].incarnation, inflight, failed);
  };
  const int64_t tick_ms = 10;
  const int64_t ticks_per_period = std::max<int64_t>(1, period_ms / tick_ms);
  auto run_for = [&](int secs) {
    auto start = Clock::now();
    for (int64_t tick = 0;; ++tick) {
      auto due = start + std::chrono::milliseconds(tick * tick_ms);
      if (due - start >= std::chrono::seconds(secs)) break;
      std::this_thread::sleep_until(due);
      int64_t slot = tick % ticks_per_period;
      for (int i = static_cast<int>(slot); i < n; i += static_cast<int>(ticks_per_period)) heartbeat(i);
    }
  };
  run_for(3);  // warm-up
  failed = 0;
  sent = 0;
  double cpu0 = CpuSeconds(head.pid);
  auto w0 = Clock::now();
  run_for(seconds);
  double wall = std::chrono::duration<double>(Clock::now() - w0).count();
  double cpu1 = CpuSeconds(head.pid);
  inflight.Drain();
  r.cpu_percent = 100.0 * (cpu1 - cpu0) / wall;
  r.rss_mb = RssMb(head.pid);
  r.heartbeats_per_s = sent.load() / wall;
  r.failed = failed.load();

  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", bearer);
  torus::rpc::GetClusterStatusRequest request;
  torus::rpc::ClusterStatus status;
  grpc::Status status_rpc = stubs[0]->GetClusterStatus(&ctx, request, &status);
  if (!status_rpc.ok()) fprintf(stderr, "GetClusterStatus: %s\n", status_rpc.error_message().c_str());
  if (status_rpc.ok()) {
    for (const auto& node : status.nodes()) r.alive_at_end += node.state() == torus::rpc::ALIVE;
  }
  StopHead(head);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string nodes_list = "1000,10000";
  int seconds = 20;
  int64_t period_ms = 500;
  int channels = 4;
  CLI::App app{"Registration and heartbeat load on torus-head"};
  app.add_option("--nodes", nodes_list, "Comma-separated node counts")->capture_default_str();
  app.add_option("--seconds", seconds, "Measurement window per size")->capture_default_str();
  app.add_option("--period-ms", period_ms, "Heartbeat period")->capture_default_str();
  app.add_option("--channels", channels, "Client connections")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  printf("%8s  %12s  %12s  %10s  %9s  %12s  %8s  %8s\n", "nodes", "register_s", "register/s", "head_cpu%",
         "head_MB", "heartbeat/s", "failed", "alive");
  std::stringstream list(nodes_list);
  std::string item;
  while (std::getline(list, item, ',')) {
    int n = std::stoi(item);
    Result r = RunOnce(n, seconds, period_ms, channels);
    printf("%8d  %12.3f  %12.0f  %10.1f  %9.1f  %12.0f  %8lld  %8d\n", r.nodes, r.register_s, r.nodes / r.register_s,
           r.cpu_percent, r.rss_mb, r.heartbeats_per_s, static_cast<long long>(r.failed), r.alive_at_end);
    fflush(stdout);
  }
  return 0;
}
