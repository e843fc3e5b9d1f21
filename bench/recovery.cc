// Head restart to serving with a large journal.
//
// Writes, with the head's own state library, the journal a busy head would leave: N registered nodes (v6e hosts of 4
// chips in 4-host slices, with their labels), G placement groups of 4 bundles placed on them, J finished jobs (each
// with its worker's start and exit) — in a temporary state directory; then starts torus-head on that directory and
// times what a user waits for: from starting the head until it serves (its gRPC and HTTP addresses written), and
// until its first cluster status lists every node. Each shape runs with the journal as records, and compacted into a
// snapshot; an empty state directory is the baseline, in the same run.
//
//   build/bin/bench_recovery [--nodes 10000] [--groups 1000] [--jobs 10000] [--repeats 3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "bench_head.h"
#include "grpcpp/grpcpp.h"
#include "torus/head.grpc.pb.h"
#include "torus/head/state/state_store.h"
#include "torus/rpc/auth.h"

namespace {

using namespace torus;
using namespace torus::head;
using Clock = std::chrono::steady_clock;

constexpr int64_t kWall = 1'733'050'000'000;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

NodeRegistered Host(int i) {
  NodeRegistered r;
  r.info.node_id = absl::StrCat("bench-", i);
  r.info.address = absl::StrCat("10.", (i >> 16) & 255, ".", (i >> 8) & 255, ".", i & 255);
  r.info.hostname = r.info.node_id;
  r.info.agent_port = 7000;
  r.info.pid = 1000 + i;
  r.info.start_time_ms = kWall;
  r.info.total.Set("CPU", 8);
  r.info.total.Set("TPU", 4);
  r.info.total.Set("memory", 64.0 * (1 << 30));
  r.info.labels = {{"torus.io/node-id", r.info.node_id},
                   {"torus.io/accelerator-type", "TPU-V6E"},
                   {"torus.io/tpu-slice-name", absl::StrCat("slice-", i / 4)},
                   {"torus.io/tpu-worker-id", absl::StrCat(i % 4)},
                   {"torus.io/tpu-topology", "4x4"},
                   {"torus.io/tpu-pod-type", "v6e-16"},
                   {"torus.io/market-type", "on-demand"},
                   {"torus.io/node-group", "tpu"}};
  r.incarnation = 1000 + static_cast<uint64_t>(i);
  r.wall_ms = kWall;
  return r;
}

// Writes the journal of a busy head into `dir`; with `snapshot`, compacts it afterwards. Returns records written.
size_t WriteJournal(const std::string& dir, int nodes, int groups, int jobs, bool snapshot) {
  size_t records = 0;
  {
    auto journal = OpenSqliteJournal(dir, JournalSync::kNormal);
    if (!journal.ok()) {
      fprintf(stderr, "bench_recovery: %s\n", std::string(journal.status().message()).c_str());
      exit(1);
    }
    StateStore store(*std::move(journal), kWall, {.compact_after = UINT64_MAX});
    if (!store.Open().ok()) exit(1);
    auto batch = [&](auto fill) {
      store.Update([&](Txn& txn) {
        fill(txn);
        records += txn.records().size();
      });
    };
    for (int i = 0; i < nodes; i += 500) {
      batch([&](Txn& txn) {
        for (int j = i; j < std::min(nodes, i + 500); ++j) txn.Apply(Host(j)).IgnoreError();
      });
    }
    for (int g = 0; g < groups; ++g) {
      batch([&](Txn& txn) {
        Group group;
        group.id = GroupId(absl::StrCat("pg-", g));
        group.name = absl::StrCat("group-", g);
        group.bundle_request.primary.bundles.assign(4, [] {
          ResourceSet r;
          r.Set("CPU", 1);
          return r;
        }());
        group.request_text = "PACK, 4 bundles {\"CPU\": 1}";
        group.seq = static_cast<uint64_t>(g) + 1;
        group.created_wall_ms = kWall;
        group.history = {{kWall, "PENDING", "submitted: " + group.request_text}};
        txn.Apply(GroupSubmitted{group}).IgnoreError();
        std::vector<HeldBundle> bundles;
        for (int b = 0; b < 4; ++b) {
          HeldBundle held;
          held.index = b;
          held.ledger_index = b;
          held.node = NodeId(absl::StrCat("bench-", (g * 4 + b) % std::max(nodes, 1)));
          held.ledger_group = group.id.str();
          held.attempt = (1ull << 32) | static_cast<uint64_t>(g + 1);
          held.resources.Set("CPU", 1);
          bundles.push_back(std::move(held));
        }
        txn.Apply(GroupPlaced{group.id, 0, bundles, {}, "placed 4 bundles", kWall}).IgnoreError();
      });
    }
    for (int j = 0; j < jobs; ++j) {
      batch([&](Txn& txn) {
        Job job;
        job.id = JobId(absl::StrCat("raysubmit_", j));
        job.request.entrypoint = "python3 train.py --epochs 3";
        job.request.submission_id = job.id.str();
        job.request.metadata = {{"owner", "bench"}};
        job.submit_time_ms = kWall;
        txn.Apply(JobSubmitted{job}).IgnoreError();
        Worker w;
        w.id = WorkerId("job-" + job.id.str());
        w.owner = Owner::Job(job.id);
        w.node = NodeId(absl::StrCat("bench-", j % std::max(nodes, 1)));
        txn.Apply(WorkerStarting{w}).IgnoreError();
        txn.Apply(WorkerStarted{w.id, 5000 + j, kWall + 1}).IgnoreError();
        txn.Apply(JobUpdated{job.id, JobStatus::kRunning, "Job is currently running.", "", std::nullopt, kWall + 1})
            .IgnoreError();
        txn.Apply(WorkerExited{w.id, WorkerExit{.exit_code = 0, .wall_ms = kWall + 2}}).IgnoreError();
        txn.Apply(JobUpdated{job.id, JobStatus::kSucceeded, "Job finished successfully.", "", 0, kWall + 2})
            .IgnoreError();
      });
    }
  }
  if (snapshot) {
    // Reopened with a threshold of one record: its HeadStarted compacts everything into a snapshot.
    auto journal = OpenSqliteJournal(dir, JournalSync::kNormal);
    StateStore store(*std::move(journal), kWall, {.compact_after = 1});
    if (!store.Open().ok()) exit(1);
  }
  return records;
}

struct Sample {
  double serving_ms = 0;
  double status_ms = 0;
  double replay_ms = 0;  // as the head logs it
  int nodes_seen = 0;
};

double ReplayMsFromLog(const std::string& log_tail) {
  static const std::regex kReplay("replayed in ([0-9.]+) ms");
  std::smatch m;
  return std::regex_search(log_tail, m, kReplay) ? std::stod(m[1]) : -1;
}

Sample StartOn(const std::string& state_dir) {
  Sample s;
  const auto t0 = Clock::now();
  auto started = bench::StartHead("/tmp/torus_bench_recovery_session_",
                                  {"--state-dir", state_dir, "--node-timeout-ms", "600000", "--compact-after", "100000000"});
  if (!started.ok()) {
    fprintf(stderr, "bench_recovery: %s\n", std::string(started.status().message()).c_str());
    exit(1);
  }
  bench::HeadProcess head = *std::move(started);
  s.serving_ms = Ms(Clock::now() - t0);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(512 << 20);  // the status of 10,000 nodes is several MB
  auto stub = rpc::HeadService::NewStub(
      grpc::CreateCustomChannel(head.address, grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  ctx.AddMetadata(rpc::kAuthMetadataKey, "Bearer " + head.token);
  rpc::GetClusterStatusRequest request;
  rpc::ClusterStatus status;
  grpc::Status answered = stub->GetClusterStatus(&ctx, request, &status);
  s.status_ms = Ms(Clock::now() - t0);
  if (!answered.ok()) fprintf(stderr, "bench_recovery: GetClusterStatus: %s\n", answered.error_message().c_str());
  s.nodes_seen = status.nodes_size();
  s.replay_ms = ReplayMsFromLog(bench::HeadLogTail(head, 50));
  bench::StopHead(head);
  return s;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int nodes = 10'000, groups = 1'000, jobs = 10'000, repeats = 3;
  CLI::App app{"bench_recovery: head restart to serving with a large journal"};
  app.add_option("--nodes", nodes)->capture_default_str();
  app.add_option("--groups", groups)->capture_default_str();
  app.add_option("--jobs", jobs)->capture_default_str();
  app.add_option("--repeats", repeats)->capture_default_str();
  std::string write_only;
  app.add_option("--write-only", write_only, "Only write the journal (as a snapshot) into this state directory, to "
                                             "start a head on it by hand or under a profiler");
  CLI11_PARSE(app, argc, argv);
  if (!write_only.empty()) {
    printf("%zu records written into %s\n", WriteJournal(write_only, nodes, groups, jobs, true), write_only.c_str());
    return 0;
  }

  printf("| journal | records | size (MB) | replay in the head (ms) | start -> serving (ms) | start -> first status (ms) |"
         " nodes listed |\n|---|---:|---:|---:|---:|---:|---:|\n");
  struct Shape {
    const char* name;
    int nodes, groups, jobs;
    bool snapshot;
  };
  for (const Shape& shape : {Shape{"empty", 0, 0, 0, false}, Shape{"records", nodes, groups, jobs, false},
                             Shape{"snapshot", nodes, groups, jobs, true}}) {
    std::string tmpl = "/tmp/torus_bench_recovery_XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) return 1;
    const std::string state_dir = tmpl + "/state";
    const size_t records = WriteJournal(state_dir, shape.nodes, shape.groups, shape.jobs, shape.snapshot);
    std::error_code ec;
    double mb = 0;
    for (const auto& f : std::filesystem::directory_iterator(state_dir, ec)) {
      mb += static_cast<double>(std::filesystem::file_size(f.path(), ec)) / (1 << 20);
    }
    std::vector<double> replay, serving, status;
    int seen = 0;
    for (int r = 0; r < repeats; ++r) {
      Sample s = StartOn(state_dir);
      replay.push_back(s.replay_ms);
      serving.push_back(s.serving_ms);
      status.push_back(s.status_ms);
      seen = s.nodes_seen;
    }
    printf("| %s (%d nodes, %d groups, %d jobs) | %zu | %.1f | %.0f | %.0f | %.0f | %d |\n", shape.name, shape.nodes,
           shape.groups, shape.jobs, records, mb, Median(replay), Median(serving), Median(status), seen);
    fflush(stdout);
    std::filesystem::remove_all(tmpl, ec);
  }
  return 0;
}
