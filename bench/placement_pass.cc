// The head's placement pass on a 10,000-host cluster: for each slice group that comes, what the scheduler does —
// read the pass input from the state, get the scheduling index, decide — with the index built for every pass
// (`build`) and with the last pass's input and index brought up to date (`reuse`: BuildPassInput with the previous
// input, which takes its labels and updates its index — that upkeep is in "reading the pass input"). Each decision is recorded in
// the state as the agents' reservation would (GroupPlaced), and the group placed 8 passes before ends
// (GroupEnded), so that the cluster stays as full.
//
// The cluster is the one of bench_sched_core: 2,048 v6e-16 slices (8,192 hosts of 4 chips) and 1,808 CPU nodes.
//
//   build/bin/bench_placement_pass [--passes N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "torus/common/well_known_labels.h"
#include "torus/head/placement/decide.h"
#include "torus/head/state/cluster_state.h"
#include "torus/head/state/records.h"

namespace torus::head {
namespace {

using Clock = std::chrono::steady_clock;

ResourceSet Res(std::initializer_list<std::pair<std::string, double>> amounts) {
  ResourceSet r;
  for (const auto& [name, amount] : amounts) r.Set(name, amount);
  return r;
}

void MustApply(ClusterState& state, const Record& record) {
  if (absl::Status s = state.Apply(record); !s.ok()) {
    std::fprintf(stderr, "record refused: %s\n", std::string(s.message()).c_str());
    std::exit(1);
  }
}

NodeRegistration Host(std::string id, ResourceSet total, Labels labels) {
  NodeRegistration r;
  r.node_id = std::move(id);
  r.address = r.node_id + ".bench";
  r.hostname = r.node_id;
  r.total = std::move(total);
  r.labels = std::move(labels);
  r.labels[std::string(kLabelNodeId)] = r.node_id;
  r.pid = 100;
  r.start_time_ms = 1;
  r.agent_port = 7000;
  return r;
}

ClusterState Cluster() {
  const char* const zones[] = {"us-central2-a", "us-central2-b", "us-central2-c"};
  ClusterState state;
  MustApply(state, HeadStarted{1, 900});
  uint64_t incarnation = 1;
  char name[32];
  for (int s = 0; s < 2048; ++s) {
    std::snprintf(name, sizeof(name), "v6e-16-%04d", s);
    const std::string slice = name;
    for (int w = 0; w < 4; ++w) {
      std::snprintf(name, sizeof(name), "t%04d-w%d", s, w);
      Labels labels = {{std::string(kLabelAcceleratorType), "TPU-V6E"},
                       {std::string(kLabelTpuSliceName), slice},
                       {std::string(kLabelTpuWorkerId), std::to_string(w)},
                       {std::string(kLabelTpuTopology), "4x4"},
                       {std::string(kLabelTpuPodType), "v6e-16"},
                       {std::string(kLabelTpuChipsPerHost), "4"},
                       {std::string(kLabelMarketType), s % 8 == 0 ? "reserved" : (s % 8 <= 3 ? "on-demand" : "spot")},
                       {std::string(kLabelAvailabilityZone), zones[s % 3]},
                       {std::string(kLabelNodeGroup), "tpu-pool-" + std::to_string(s % 4)}};
      MustApply(state, NodeRegistered{Host(name, Res({{"CPU", 180}, {"TPU", 4}, {"memory", 720.0 * (1 << 30)}}),
                                           std::move(labels)),
                                      incarnation++, 1000});
    }
  }
  for (int i = 0; i < 1808; ++i) {
    std::snprintf(name, sizeof(name), "c%04d", i);
    MustApply(state, NodeRegistered{Host(name, Res({{"CPU", 32}, {"memory", 128.0 * (1 << 30)}}),
                                         {{std::string(kLabelAvailabilityZone), zones[(i / 2) % 3]}}),
                                    incarnation++, 1000});
  }
  return state;
}

Group SliceGroup(int n) {
  Group g;
  g.id = GroupId(absl::StrCat("pg-", n));
  g.kind = PgKind::kSlices;
  g.slice_request.primary.generation = TpuGeneration::kV6e;
  g.slice_request.primary.topology = Topology{{4, 4}};
  g.slice_request.primary.num_slices = 1;
  g.seq = static_cast<uint64_t>(n) + 1;
  g.created_wall_ms = 2000;
  return g;
}

struct Timing {
  std::vector<double> input_ms, index_ms, decide_ms, pass_ms;
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

Timing RunPasses(int passes, bool reuse) {
  ClusterState state = Cluster();
  std::optional<PassInput> last;
  Timing t;
  for (int n = 0; n < passes; ++n) {
    const Group g = SliceGroup(n);
    MustApply(state, GroupSubmitted{g});
    const Clock::time_point start = Clock::now();
    auto all = [](const sched::NodeSnapshot&) { return true; };
    PassInput input = reuse && last ? BuildPassInput(state, all, {}, &*last) : BuildPassInput(state, all);
    const Clock::time_point read = Clock::now();
    input.Index();
    const Clock::time_point indexed = Clock::now();
    DecideOutcome outcome = Decide(*state.FindGroup(g.id), input);
    const Clock::time_point decided = Clock::now();
    const auto* d = std::get_if<Decision>(&outcome);
    if (d == nullptr) {
      std::fprintf(stderr, "pass %d: not placed: %s\n", n, std::get<NotPlaced>(outcome).reason.c_str());
      std::exit(1);
    }
    MustApply(state, GroupPlaced{.group = g.id, .bundles = d->bundles, .slices = d->slices, .message = d->message,
                                 .wall_ms = 3000});
    if (n >= 8) MustApply(state, GroupEnded{.group = SliceGroup(n - 8).id, .message = "removed", .wall_ms = 3000});
    last = std::move(input);
    if (n == 0) continue;  // the first pass builds in both modes
    t.input_ms.push_back(Ms(read - start));
    t.index_ms.push_back(Ms(indexed - read));
    t.decide_ms.push_back(Ms(decided - indexed));
    t.pass_ms.push_back(Ms(decided - start));
  }
  return t;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace
}  // namespace torus::head

int main(int argc, char** argv) {
  int passes = 40;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--passes") == 0 && i + 1 < argc) {
      passes = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--passes N]\n", argv[0]);
      return 2;
    }
  }
  if (passes < 2) passes = 2;
  std::printf("| index | passes | pass p50 ms | pass p99 ms | read input p50 ms | index build p50 ms | decide p50 ms |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  for (bool reuse : {false, true}) {
    const torus::head::Timing t = torus::head::RunPasses(passes, reuse);
    using torus::head::Percentile;
    std::printf("| %s | %zu | %.2f | %.2f | %.2f | %.3f | %.3f |\n", reuse ? "reuse (kept up to date)" : "build per pass",
                t.pass_ms.size(), Percentile(t.pass_ms, 0.5), Percentile(t.pass_ms, 0.99),
                Percentile(t.input_ms, 0.5), Percentile(t.index_ms, 0.5), Percentile(t.decide_ms, 0.5));
    std::fflush(stdout);
  }
  return 0;
}
