// End-to-end placement group and slice group latency and throughput on a real local cluster, and job submissions,
// with the head's journal on and off in one run (what the journal costs).
//
// Starts `torus up examples/clusters/local.yaml` (16 agents) in a temporary TORUS_TEMP_DIR, then through the C++
// client: the cheapest call to the head and to an agent (what a cycle's three calls cannot go below), then create a 4-bundle PG (or reserve one TPU-V6E 4x4 slice), wait until CREATED, remove it; sequentially and
// with 8 concurrent clients. Prints ops/s and p50/p99 of create->CREATED and of the whole create+remove. Then 8
// clients submit jobs (`true`, with entrypoint resources {"CPU": 0.01}, so each is a placement group too) over the
// Ray Jobs REST API: submissions acknowledged per second, and the time until every one SUCCEEDED. With
// `--journal both` (the default) all of it runs twice, `torus up` and `torus up --no-journal`, and the table ends with
// the ratio of each throughput, journal on / off.
//
// `--repeats N` alternates the two modes N times and compares the medians. `--journal etcd` compares the journal in
// SQLite (the default) with the journal in etcd (`torus up --state-store`, a one-member etcd on loopback started for
// the run, Debian's etcd-server), each round under a prefix of its own.
//
//   build/bin/bench_pg_e2e [--ops 400] [--clients 8] [--jobs 400] [--journal on|off|both|etcd] [--repeats 1]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "torus/head/state/etcd_test_util.h"
#include "absl/strings/str_cat.h"
#include "torus/client/client.h"
#include "torus/client/http_api_client.h"
#include "torus/node.grpc.pb.h"
#include "torus/rpc/auth.h"

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

// One create -> CREATED -> remove cycle, as `torus pg create --wait` and `torus pg remove` make it (the create
// answers once the group is CREATED); returns false on any error.
bool Cycle(torus::client::Client& client, bool slice, Sample& out) {
  auto t0 = Clock::now();
  torus::rpc::PlacementGroupSpec bundles = FourBundles();
  torus::rpc::SliceGroupSpec slices = OneSlice();
  bundles.set_wait_ready_ms(30'000);
  slices.set_wait_ready_ms(30'000);
  auto ready = slice ? client.ReserveSlices(slices) : client.CreatePlacementGroup(bundles);
  if (!ready.ok() || ready->state() != "CREATED") return false;
  auto t1 = Clock::now();
  if (!client.RemovePlacementGroup(ready->id()).ok()) return false;
  auto t2 = Clock::now();
  out.ready_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  out.cycle_ms = std::chrono::duration<double, std::milli>(t2 - t0).count();
  return true;
}

// Throughputs by operation name, for the journal on/off ratios.
std::map<std::string, double>* g_throughput = nullptr;

void Run(const torus::client::HeadEndpoint& endpoint, const std::string& mode, const std::string& what, bool slice,
         int clients, int ops) {
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
  printf("%-40s %8d %8zu %8d %12.0f %14.2f %14.2f %14.2f %14.2f\n", (mode + what).c_str(), clients, samples.size(),
         failures.load(), samples.size() / secs, Percentile(ready, 0.5), Percentile(ready, 0.99), Percentile(cycle, 0.5),
         Percentile(cycle, 0.99));
  fflush(stdout);
  if (g_throughput != nullptr) (*g_throughput)[what + " x" + std::to_string(clients)] = samples.size() / secs;
}

// What a cycle cannot go below here: its two calls to the head (create, remove) and the head's one call to an agent
// (the group's prepare, committed at once), each as cheap as a call can be — the head answering NOT_FOUND for a group
// that does not exist, an agent answering GetLedger — timed `ops` times each from one client.
void RoundTrips(const torus::client::HeadEndpoint& endpoint, const std::string& mode, int ops) {
  auto client = torus::client::Client::Connect(endpoint);
  auto status = client.ok() ? (*client)->GetClusterStatus(false) : client.status();
  if (!status.ok() || status->nodes().empty()) {
    fprintf(stderr, "round trips: no agent to call (%s)\n", std::string(status.status().message()).c_str());
    return;
  }
  const auto& node = status->nodes(0).info();
  auto agent = torus::rpc::NodeService::NewStub(grpc::CreateChannel(
      absl::StrCat(node.address(), ":", node.agent_port()), grpc::InsecureChannelCredentials()));
  auto time_calls = [&](const std::function<bool()>& call) {
    std::vector<double> ms;
    for (int i = 0; i < ops; ++i) {
      auto t0 = Clock::now();
      if (!call()) return std::vector<double>{};
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    return ms;
  };
  const std::vector<double> head = time_calls([&] {
    return (*client)->GetPlacementGroup("pg-that-does-not-exist").status().code() == absl::StatusCode::kNotFound;
  });
  const std::vector<double> to_agent = time_calls([&] {
    grpc::ClientContext ctx;
    ctx.AddMetadata(torus::rpc::kAuthMetadataKey, absl::StrCat("Bearer ", endpoint.token));
    torus::rpc::LedgerView ledger;
    return agent->GetLedger(&ctx, torus::rpc::GetLedgerRequest(), &ledger).ok();
  });
  if (head.empty() || to_agent.empty()) {
    fprintf(stderr, "round trips: a call failed\n");
    return;
  }
  auto row = [&](const std::string& what, double p50, double p99) {
    printf("%-40s %8d %8d %8d %12.0f %14.2f %14.2f %14s %14s\n", (mode + what).c_str(), 1, ops, 0, 1000 / p50, p50,
           p99, "-", "-");
  };
  row("round trip: head (NOT_FOUND)", Percentile(head, 0.5), Percentile(head, 0.99));
  row("round trip: agent (GetLedger)", Percentile(to_agent, 0.5), Percentile(to_agent, 0.99));
  const double floor_ms = 2 * Percentile(head, 0.5) + Percentile(to_agent, 0.5);
  row("floor of a cycle: 2 head + 1 agent", floor_ms, 2 * Percentile(head, 0.99) + Percentile(to_agent, 0.99));
  fflush(stdout);
}

// `clients` threads submit `jobs` jobs in all over HTTP; prints acknowledged submissions per second, and the seconds
// until every job SUCCEEDED.
void SubmitJobs(const torus::client::HeadEndpoint& http_endpoint, const std::string& mode, const std::string& what,
                int clients, int jobs, bool run) {
  std::vector<std::string> ids;
  std::mutex mu;
  std::atomic<int> failures{0};
  std::vector<double> latencies;
  auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      auto http = torus::client::HttpApiClient::Connect(http_endpoint);
      for (int i = 0; i < jobs / clients; ++i) {
        auto s0 = Clock::now();
        // Jobs that run reserve a little CPU (a placement group each); the others select a node that does not exist
        // and wait, so that only their submission is measured.
        auto id = run ? (*http)->SubmitJob({.entrypoint = "true", .resources = {{"CPU", 0.01}}})
                      : (*http)->SubmitJob({.entrypoint = "true", .label_selector = {{"torus.io/node-id", "none"}}});
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - s0).count();
        std::lock_guard<std::mutex> lock(mu);
        if (!id.ok()) {
          ++failures;
          continue;
        }
        ids.push_back(*id);
        latencies.push_back(ms);
      }
    });
  }
  for (auto& t : threads) t.join();
  const double submit_s = std::chrono::duration<double>(Clock::now() - t0).count();
  auto http = torus::client::HttpApiClient::Connect(http_endpoint);
  size_t done = run ? 0 : ids.size();
  while (done < ids.size() && std::chrono::duration<double>(Clock::now() - t0).count() < 300) {
    auto jobs_now = (*http)->ListJobs();
    done = 0;
    if (jobs_now.ok()) {
      for (const auto& j : *jobs_now) done += j["status"] == "SUCCEEDED" || j["status"] == "FAILED";
    }
    if (done < ids.size()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double all_s = std::chrono::duration<double>(Clock::now() - t0).count();
  printf("%-40s %8d %8zu %8d %12.0f %14.2f %14.2f %14s %14s\n", (mode + what).c_str(), clients, ids.size(),
         failures.load(), ids.size() / submit_s, Percentile(latencies, 0.5), Percentile(latencies, 0.99), "-",
         run ? absl::StrCat(static_cast<int64_t>(all_s * 1000), " (all done)").c_str() : "-");
  fflush(stdout);
  if (g_throughput != nullptr) {
    (*g_throughput)[what + " x" + std::to_string(clients)] = ids.size() / submit_s;
    if (run) (*g_throughput)[what + " x" + std::to_string(clients) + ", run to the end"] = ids.size() / all_s;
  }
}

// One whole round on a fresh local cluster, the head started with `head_flags` (its journal's kind); `mode` labels
// the lines.
bool Round(const std::string& mode, const std::string& head_flags, int ops, int clients, int jobs,
           std::map<std::string, double>* throughput) {
  g_throughput = throughput;
  char tmpl[] = "/tmp/torus_bench_pg_XXXXXX";
  std::string root = mkdtemp(tmpl);
  setenv("TORUS_TEMP_DIR", root.c_str(), 1);
  std::string bin = std::string(TORUS_BIN_DIR) + "/torus";
  std::string spec = std::string(TORUS_SOURCE_DIR) + "/examples/clusters/local.yaml";
  std::string up = bin + " up " + spec + " --port 0 --dashboard-port 0" + head_flags + " > " + root + "/up.log 2>&1";
  if (std::system(up.c_str()) != 0) {
    fprintf(stderr, "torus up failed; see %s/up.log\n", root.c_str());
    return false;
  }
  auto endpoint = torus::client::ResolveHead(std::nullopt, std::nullopt, root);
  auto http_endpoint = torus::client::ResolveHttp(std::nullopt, std::nullopt, root);
  if (!endpoint.ok() || !http_endpoint.ok()) {
    fprintf(stderr, "cannot find the head in %s\n", root.c_str());
    return false;
  }
  if (getenv("TORUS_BENCH_PAUSE") != nullptr) {  // for attaching a profiler to the head
    fprintf(stderr, "cluster up in %s; press enter\n", root.c_str());
    getchar();
  }
  RoundTrips(*endpoint, mode, ops);
  Run(*endpoint, mode, "pg 4 bundles PACK", false, 1, ops);
  Run(*endpoint, mode, "pg 4 bundles PACK", false, clients, ops);
  Run(*endpoint, mode, "slice group TPU-V6E 4x4 x1", true, 1, ops);
  Run(*endpoint, mode, "slice group TPU-V6E 4x4 x1", true, clients, ops);
  SubmitJobs(*http_endpoint, mode, "job submissions (waiting)", clients, jobs, /*run=*/false);
  SubmitJobs(*http_endpoint, mode, "job submissions (CPU 0.01)", clients, jobs, /*run=*/true);
  std::system((bin + " down > /dev/null 2>&1").c_str());
  std::filesystem::remove_all(root);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int ops = 400;
  int clients = 8;
  int jobs = 400;
  std::string journal = "both";
  int repeats = 1;
  CLI::App app{"Placement groups, slice groups and job submissions on a local 16-agent cluster, journal on and off"};
  app.add_option("--ops", ops, "Create+remove cycles per run")->capture_default_str();
  app.add_option("--clients", clients, "Concurrent clients for the concurrent runs")->capture_default_str();
  app.add_option("--jobs", jobs, "Jobs submitted by the clients together")->capture_default_str();
  app.add_option("--journal", journal,
                 "on, off, or both (one cluster each, in this run); etcd: SQLite against etcd, in this run")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off", "both", "etcd"}));
  app.add_option("--repeats", repeats, "Rounds of each mode, alternating; the ratios compare medians")
      ->capture_default_str()
      ->check(CLI::Range(1, 20));
  CLI11_PARSE(app, argc, argv);

  printf("%-40s %8s %8s %8s %12s %14s %14s %14s %14s\n", "operation", "clients", "ok", "failed", "per second",
         "ready_p50_ms", "ready_p99_ms", "cycle_p50_ms", "cycle_p99_ms");
  std::unique_ptr<torus::head::testutil::EtcdServer> etcd;
  if (journal == "etcd") {
    etcd = std::make_unique<torus::head::testutil::EtcdServer>();
    if (!etcd->error().empty()) {
      fprintf(stderr, "%s\n", etcd->error().c_str());
      return 1;
    }
  }
  // a: the journal on (SQLite); b: off, or in etcd.
  std::map<std::string, std::vector<double>> on, off;
  for (int r = 0; r < repeats; ++r) {
    std::map<std::string, double> round_on, round_off;
    if (journal != "off" && !Round("sqlite:     ", "", ops, clients, jobs, &round_on)) return 1;
    if ((journal == "off" || journal == "both") &&
        !Round("no journal: ", " --no-journal", ops, clients, jobs, &round_off)) {
      return 1;
    }
    if (journal == "etcd" &&
        !Round("etcd:       ", " --state-store " + etcd->Url("/bench/round" + std::to_string(r)), ops, clients, jobs,
               &round_off)) {
      return 1;
    }
    for (const auto& [what, rate] : round_on) on[what].push_back(rate);
    for (const auto& [what, rate] : round_off) off[what].push_back(rate);
  }
  if (journal == "both" || journal == "etcd") {
    const bool vs_etcd = journal == "etcd";
    printf("\n%-40s %12s %12s %12s   (medians of %d rounds)\n", "throughput", vs_etcd ? "etcd" : "journal on",
           vs_etcd ? "sqlite" : "journal off", vs_etcd ? "etcd/sqlite" : "on / off", repeats);
    for (const auto& [what, rates] : on) {
      const double a = Percentile(rates, 0.5), b = Percentile(off[what], 0.5);
      if (vs_etcd) {
        printf("%-40s %12.0f %12.0f %12.2f\n", what.c_str(), b, a, a > 0 ? b / a : 0);
      } else {
        printf("%-40s %12.0f %12.0f %12.2f\n", what.c_str(), a, b, b > 0 ? a / b : 0);
      }
    }
  }
  return 0;
}
