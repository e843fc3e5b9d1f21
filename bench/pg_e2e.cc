// End-to-end placement group and slice group latency and throughput on a real local cluster.
//
// Starts `torus up examples/clusters/local.yaml` (16 agents) in a temporary TORUS_TEMP_DIR, then through the C++
// client: create a 4-bundle PG (or reserve one TPU-V6E 4x4 slice), wait until CREATED, remove it; sequentially and
// with 8 concurrent clients. Prints ops/s and p50/p99 of create->CREATED and of the whole create+remove.
//
//   build/bin/bench_pg_e2e [--ops 400] [--clients 8]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "torus/client/client.h"

namespace {

using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

struct Sample {
  double ready_ms;
  double cycle_ms;
};

torus::rpc::PlacementGroupSpec FourBundles() {
  torus::rpc::PlacementGroupSpec spec;
  spec.set_strategy("PACK");
  for (int i = 0; i < 4; ++i) (*spec.add_bundles()->mutable_resources())["CPU"] = 1000;  // 0.1 CPU
  return spec;
}

torus::rpc::SliceGroupSpec OneSlice() {
  torus::rpc::SliceGroupSpec spec;
  spec.mutable_primary()->set_accelerator_type("TPU-V6E");
  spec.mutable_primary()->set_topology("4x4");
  spec.mutable_primary()->set_num_slices(1);
  return spec;
}

// One create -> CREATED -> remove cycle; returns false on any error.
bool Cycle(torus::client::Client& client, bool slice, Sample& out) {
  auto t0 = Clock::now();
  auto created = slice ? client.ReserveSlices(OneSlice()) : client.CreatePlacementGroup(FourBundles());
  if (!created.ok()) return false;
  auto ready = client.WaitUntilReady(created->id(), std::chrono::seconds(30));
  if (!ready.ok() || ready->state() != "CREATED") return false;
  auto t1 = Clock::now();
  if (!client.RemovePlacementGroup(created->id()).ok()) return false;
  auto t2 = Clock::now();
  out.ready_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  out.cycle_ms = std::chrono::duration<double, std::milli>(t2 - t0).count();
  return true;
}

void Run(const torus::client::HeadEndpoint& endpoint, const char* what, bool slice, int clients, int ops) {
  std::vector<Sample> samples;
  std::mutex mu;
  std::atomic<int> failures{0};
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      auto client = torus::client::Client::Connect(endpoint);
      for (int i = 0; i < ops / clients; ++i) {
        Sample s;
        if (!Cycle(**client, slice, s)) {
          ++failures;
          continue;
        }
        std::lock_guard<std::mutex> lock(mu);
        samples.push_back(s);
      }
    });
  }
  for (auto& t : threads) t.join();
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<double> ready, cycle;
  for (const Sample& s : samples) {
    ready.push_back(s.ready_ms);
    cycle.push_back(s.cycle_ms);
  }
  printf("%-28s %8d %8zu %8d %12.0f %14.2f %14.2f %14.2f %14.2f\n", what, clients, samples.size(), failures.load(),
         samples.size() / secs, Percentile(ready, 0.5), Percentile(ready, 0.99), Percentile(cycle, 0.5),
         Percentile(cycle, 0.99));
  fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int ops = 400;
  int clients = 8;
  CLI::App app{"Placement group and slice group create/remove on a local 16-agent cluster"};
  app.add_option("--ops", ops, "Create+remove cycles per run")->capture_default_str();
  app.add_option("--clients", clients, "Concurrent clients for the concurrent runs")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  char tmpl[] = "/tmp/torus_bench_pg_XXXXXX";
  std::string root = mkdtemp(tmpl);
  setenv("TORUS_TEMP_DIR", root.c_str(), 1);
  std::string bin = std::string(TORUS_BIN_DIR) + "/torus";
  std::string spec = std::string(TORUS_SOURCE_DIR) + "/examples/clusters/local.yaml";
  std::string up = bin + " up " + spec + " --port 0 --dashboard-port 0 > " + root + "/up.log 2>&1";
  if (std::system(up.c_str()) != 0) {
    fprintf(stderr, "torus up failed; see %s/up.log\n", root.c_str());
    return 1;
  }
  auto endpoint = torus::client::ResolveHead(std::nullopt, std::nullopt, root);
  if (!endpoint.ok()) {
    fprintf(stderr, "%s\n", std::string(endpoint.status().message()).c_str());
    return 1;
  }
  printf("%-28s %8s %8s %8s %12s %14s %14s %14s %14s\n", "operation", "clients", "ok", "failed", "cycles/s",
         "ready_p50_ms", "ready_p99_ms", "cycle_p50_ms", "cycle_p99_ms");
  Run(*endpoint, "pg 4 bundles PACK", false, 1, ops);
  Run(*endpoint, "pg 4 bundles PACK", false, clients, ops);
  Run(*endpoint, "slice group TPU-V6E 4x4 x1", true, 1, ops);
  Run(*endpoint, "slice group TPU-V6E 4x4 x1", true, clients, ops);
  std::system((bin + " down > /dev/null 2>&1").c_str());
  std::filesystem::remove_all(root);
  return 0;
}
