// Scheduling-core decisions on a synthetic 10,000-host cluster: slice groups, single placements and placement
// groups against one ClusterIndex, plus the time to build that index.
//
// The cluster: 2,048 v6e-16 slices (8,192 hosts of 4 chips) and 1,808 CPU nodes, labelled with market type, zone,
// node group and team. 768 slices are held by slice groups (all 256 of the "reserved" market's — every eighth slice —
// and the 512 whose index is 2 mod 4), 16 are degraded (a dead host), 32 have a busy chip, some hosts have CPU in use.
//
// Each latency benchmark times every decision (steady clock) and reports p50/p99 as counters; a summary table in
// Markdown is printed at the end.
//
//   build/bin/bench_sched_core                       # all
//   build/bin/bench_sched_core --benchmark_filter=SliceGroup
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "torus/common/well_known_labels.h"
#include "torus/sched/placement.h"

namespace torus::sched {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kSlices = 2048;
constexpr int kHostsPerSlice = 4;
constexpr int kCpuNodes = 1808;
const char* const kZones[] = {"us-central2-a", "us-central2-b", "us-central2-c"};
const char* const kTeams[] = {"ml", "web", "data", "infra"};

ResourceSet Res(std::initializer_list<std::pair<std::string, double>> amounts) {
  ResourceSet r;
  for (const auto& [name, amount] : amounts) r.Set(name, amount);
  return r;
}

LabelSelector Sel(const std::map<std::string, std::string>& selector) {
  auto parsed = LabelSelector::Parse(selector);
  if (!parsed.ok()) {
    std::fprintf(stderr, "bad selector: %s\n", std::string(parsed.status().message()).c_str());
    std::abort();
  }
  return *parsed;
}

std::string Market(int slice) {
  if (slice % 8 == 0) return "reserved";
  return slice % 8 <= 3 ? "on-demand" : "spot";
}

IndexInput SyntheticCluster() {
  IndexInput input;
  char name[32];
  for (int s = 0; s < kSlices; ++s) {
    std::snprintf(name, sizeof(name), "v6e-16-%04d", s);
    const std::string slice = name;
    const bool held = s % 8 == 0 || s % 4 == 2;
    if (held) input.slice_holders[slice] = "pg " + std::to_string(1000 + s);
    for (int w = 0; w < kHostsPerSlice; ++w) {
      NodeSnapshot n;
      std::snprintf(name, sizeof(name), "t%04d-w%d", s, w);
      n.node_id = name;
      n.address = "10.0." + std::to_string(s / 64) + "." + std::to_string((s % 64) * 4 + w);
      n.alive = !(s % 128 == 5 && w == 1);
      n.labels = {{std::string(kLabelNodeId), n.node_id},
                  {std::string(kLabelAcceleratorType), "TPU-V6E"},
                  {std::string(kLabelTpuSliceName), slice},
                  {std::string(kLabelTpuWorkerId), std::to_string(w)},
                  {std::string(kLabelTpuTopology), "4x4"},
                  {std::string(kLabelTpuPodType), "v6e-16"},
                  {std::string(kLabelTpuChipsPerHost), "4"},
                  {std::string(kLabelMarketType), Market(s)},
                  {std::string(kLabelAvailabilityZone), kZones[s % 3]},
                  {std::string(kLabelNodeGroup), "tpu-pool-" + std::to_string(s % 4)}};
      n.total = Res({{"CPU", 180}, {"TPU", 4}, {"memory", 720.0 * (1 << 30)}});
      n.available = n.total;
      if (held) n.available = Res({{"CPU", 179}, {"memory", 720.0 * (1 << 30)}});
      if (s % 16 == 3 && w == 2) n.available.Set("CPU", 170);
      if (s % 64 == 7 && w == 0 && !held) {
        input.busy_chips[n.node_id] = {0};
        n.available.Set("TPU", 3);
      }
      input.nodes.push_back(std::move(n));
    }
  }
  for (int i = 0; i < kCpuNodes; ++i) {
    NodeSnapshot n;
    std::snprintf(name, sizeof(name), "c%04d", i);
    n.node_id = name;
    n.address = "10.9." + std::to_string(i / 256) + "." + std::to_string(i % 256);
    n.alive = i % 97 != 11;
    n.labels = {{std::string(kLabelNodeId), n.node_id},
                {std::string(kLabelMarketType), i % 2 ? "spot" : "on-demand"},
                {std::string(kLabelAvailabilityZone), kZones[(i / 2) % 3]},
                {"team", kTeams[(i / 6) % 4]}};
    n.total = Res({{"CPU", 32}, {"memory", 128.0 * (1 << 30)}});
    n.available = Res({{"CPU", 32.0 - (i * 7) % 24}, {"memory", (128.0 - (i * 5) % 96) * (1 << 30)}});
    input.nodes.push_back(std::move(n));
  }
  return input;
}

const ClusterIndex& Cluster() {
  static const ClusterIndex* const index = new ClusterIndex(ClusterIndex::Build(SyntheticCluster()));
  return *index;
}

struct Row {
  double p50_us = 0, p99_us = 0, mean_us = 0, per_second = 0;
  int64_t decisions = 0;
};
std::map<std::string, Row>& Rows() {
  static auto* rows = new std::map<std::string, Row>();
  return *rows;
}

// Times each call of `decide` and records p50/p99 (the framework calls this several times; the last run, the
// longest, is the one kept).
// p50, p99, mean and rate of times in nanoseconds.
Row Summarize(std::vector<double> ns) {
  std::sort(ns.begin(), ns.end());
  double sum = 0;
  for (double v : ns) sum += v;
  Row r;
  r.p50_us = ns[ns.size() / 2] / 1000;
  r.p99_us = ns[std::min(ns.size() - 1, ns.size() * 99 / 100)] / 1000;
  r.mean_us = sum / static_cast<double>(ns.size()) / 1000;
  r.per_second = 1e6 / r.mean_us;
  r.decisions = static_cast<int64_t>(ns.size());
  return r;
}

// `undo` (not timed) runs after each timed call.
template <typename Decide, typename Undo>
void Measure(benchmark::State& state, const std::string& row, Decide decide, Undo undo) {
  std::vector<double> ns;
  ns.reserve(static_cast<size_t>(state.max_iterations));
  for (auto _ : state) {
    Clock::time_point start = Clock::now();
    auto outcome = decide();
    benchmark::DoNotOptimize(outcome);
    ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count());
    undo();
  }
  if (ns.empty()) return;
  const Row r = Summarize(std::move(ns));
  Rows()[row] = r;
  state.counters["p50_us"] = r.p50_us;
  state.counters["p99_us"] = r.p99_us;
  state.SetItemsProcessed(state.iterations());
}

template <typename Decide>
void Measure(benchmark::State& state, const std::string& row, Decide decide) {
  Measure(state, row, decide, [] {});
}

void BM_IndexBuild(benchmark::State& state) {
  const IndexInput input = SyntheticCluster();
  std::vector<double> ms;
  for (auto _ : state) {
    state.PauseTiming();
    IndexInput copy = input;
    state.ResumeTiming();
    Clock::time_point start = Clock::now();
    ClusterIndex index = ClusterIndex::Build(std::move(copy));
    benchmark::DoNotOptimize(index);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  Row r;
  r.p50_us = ms[ms.size() / 2] * 1000;
  r.p99_us = ms.back() * 1000;
  double sum = 0;
  for (double v : ms) sum += v;
  r.mean_us = sum / static_cast<double>(ms.size()) * 1000;
  r.per_second = 1e6 / r.mean_us;
  r.decisions = static_cast<int64_t>(ms.size());
  Rows()["index build (10,000 hosts)"] = r;
}
BENCHMARK(BM_IndexBuild)->Unit(benchmark::kMillisecond)->MinTime(2);

// `slices` v6e 4x4 slices; with `fallback`, preferring the reserved market (all held: pending), then any market.
SliceGroupRequest V6eSlices(int slices, bool fallback) {
  SliceGroupRequest request;
  SliceShapeRequest shape;
  shape.generation = TpuGeneration::kV6e;
  shape.topology = Topology{{4, 4}};
  shape.num_slices = slices;
  request.primary = shape;
  if (fallback) {
    request.primary.selector = Sel({{std::string(kLabelMarketType), "reserved"}});
    request.fallbacks = {shape};
  }
  return request;
}

void BM_SliceGroup(benchmark::State& state) {
  const int slices = static_cast<int>(state.range(0));
  const bool fallback = state.range(1) != 0;
  const SliceGroupRequest request = V6eSlices(slices, fallback);
  const ClusterIndex& index = Cluster();
  SliceGroupOutcome check = PlaceSliceGroup(index, request);
  const auto* placed = std::get_if<SliceGroupPlacement>(&check);
  if (placed == nullptr || placed->alternative != (fallback ? 1 : 0) ||
      static_cast<int>(placed->slice_names.size()) != slices) {
    state.SkipWithError("unexpected outcome");
    return;
  }
  Measure(state, "slice group x" + std::to_string(slices) + (fallback ? ", primary pending -> fallback" : ""),
          [&] { return PlaceSliceGroup(index, request); });
}
BENCHMARK(BM_SliceGroup)->ArgsProduct({{1, 2, 8}, {0, 1}})->ArgNames({"slices", "fallback"});

void BM_SliceGroupPerChip(benchmark::State& state) {
  SliceGroupRequest request;
  request.primary.generation = TpuGeneration::kV6e;
  request.primary.topology = Topology{{4, 4}};
  request.primary.num_slices = 8;
  request.unit = BundleUnit::kChip;
  const ClusterIndex& index = Cluster();
  SliceGroupOutcome check = PlaceSliceGroup(index, request);
  const auto* placed = std::get_if<SliceGroupPlacement>(&check);
  if (placed == nullptr || placed->bundles.size() != 8 * 16) {
    state.SkipWithError("unexpected outcome");
    return;
  }
  Measure(state, "slice group x8, one bundle per chip (128 bundles)", [&] { return PlaceSliceGroup(index, request); });
}
BENCHMARK(BM_SliceGroupPerChip);

void BM_Single(benchmark::State& state) {
  SingleRequest request;
  request.resources = Res({{"CPU", 1}});
  request.selector = Sel({{std::string(kLabelMarketType), "spot"}, {std::string(kLabelAvailabilityZone), "us-central2-b"}});
  const ClusterIndex& index = Cluster();
  if (!std::holds_alternative<SinglePlacement>(PlaceSingle(index, request))) {
    state.SkipWithError("unexpected outcome");
    return;
  }
  Measure(state, "single, CPU 1, 2-key selector", [&] { return PlaceSingle(index, request); });
}
BENCHMARK(BM_Single);

void BM_SingleTpu(benchmark::State& state) {
  SingleRequest request;
  request.resources = Res({{"CPU", 1}, {"TPU", 1}});
  request.selector = Sel({{std::string(kLabelMarketType), "spot"}, {std::string(kLabelAvailabilityZone), "us-central2-b"}});
  const ClusterIndex& index = Cluster();
  if (!std::holds_alternative<SinglePlacement>(PlaceSingle(index, request))) {
    state.SkipWithError("unexpected outcome");
    return;
  }
  Measure(state, "single, TPU 1, 2-key selector", [&] { return PlaceSingle(index, request); });
}
BENCHMARK(BM_SingleTpu);

// ---- decisions with index upkeep: what a placement pass does (decide, then count the group as held) ----

// What holding a slice group's bundles changed in the index, to give it back.
struct Held {
  std::vector<std::string> slices;
  std::vector<std::pair<std::string, ResourceSet>> nodes;  // node, its available before
};

// Counts a slice group's placement as held in `index`: its slices held, each bundle's resources and chips taken.
Held HoldSlices(ClusterIndex& index, const SliceGroupPlacement& placed) {
  Held held;
  for (const std::string& s : placed.slice_names) {
    index.SetSliceHolder(s, "pg bench");
    held.slices.push_back(s);
  }
  for (const SliceBundle& b : placed.bundles) {
    const NodeSnapshot* n = index.FindNode(b.node_id);
    ResourceSet available = n->available;
    held.nodes.emplace_back(b.node_id, available);
    available.Subtract(b.resources);
    index.UpdateHoldings(b.node_id, available, b.chips);
  }
  return held;
}

void GiveBack(ClusterIndex& index, const Held& held) {
  for (const auto& [node, available] : held.nodes) index.UpdateHoldings(node, available, {});
  for (const std::string& s : held.slices) index.SetSliceHolder(s, "");
}

// The shared index's own copy, changed by the benchmarks with upkeep (copied once, before any timing).
ClusterIndex& MutableCluster() {
  static ClusterIndex* const index = [] {
    auto* copy = new ClusterIndex(Cluster());
    copy->SetSliceHolder("v6e-16-0000", "pg 1000");  // already held: makes the copy its own
    return copy;
  }();
  return *index;
}

void BM_SliceGroupWithUpkeep(benchmark::State& state) {
  const int slices = static_cast<int>(state.range(0));
  const bool fallback = state.range(1) != 0;
  const SliceGroupRequest request = V6eSlices(slices, fallback);
  ClusterIndex& index = MutableCluster();
  Held held;
  Measure(
      state,
      "slice group x" + std::to_string(slices) + (fallback ? ", primary pending -> fallback" : "") +
          " + hold in the index",
      [&] {
        SliceGroupOutcome outcome = PlaceSliceGroup(index, request);
        if (const auto* placed = std::get_if<SliceGroupPlacement>(&outcome)) held = HoldSlices(index, *placed);
        return outcome.index();
      },
      [&] { GiveBack(index, held); });
}
BENCHMARK(BM_SliceGroupWithUpkeep)->ArgsProduct({{1, 8}, {0, 1}})->ArgNames({"slices", "fallback"});

void BM_SliceGroupGiveBack(benchmark::State& state) {
  const SliceGroupRequest request = V6eSlices(8, false);
  ClusterIndex& index = MutableCluster();
  Held held;
  std::vector<double> ns;
  for (auto _ : state) {
    state.PauseTiming();
    held = HoldSlices(index, std::get<SliceGroupPlacement>(PlaceSliceGroup(index, request)));
    state.ResumeTiming();
    Clock::time_point start = Clock::now();
    GiveBack(index, held);
    ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count());
  }
  Rows()["give back x8 slices (index upkeep alone)"] = Summarize(std::move(ns));
}
BENCHMARK(BM_SliceGroupGiveBack);

BundleRequest EightBundles(Strategy strategy, double cpus, const std::map<std::string, std::string>& selector) {
  BundleRequest request;
  request.strategy = strategy;
  for (int i = 0; i < 8; ++i) {
    request.primary.bundles.push_back(Res({{"CPU", cpus}}));
    if (!selector.empty()) request.primary.bundle_selectors.push_back(Sel(selector));
  }
  return request;
}

void BM_Bundles(benchmark::State& state, Strategy strategy, double cpus, std::map<std::string, std::string> selector,
                std::string row) {
  const BundleRequest request = EightBundles(strategy, cpus, selector);
  const ClusterIndex& index = Cluster();
  if (!std::holds_alternative<BundlePlacement>(PlaceBundles(index, request))) {
    state.SkipWithError("unexpected outcome");
    return;
  }
  Measure(state, row, [&] { return PlaceBundles(index, request); });
}
BENCHMARK_CAPTURE(BM_Bundles, strict_spread, Strategy::kStrictSpread, 1.0, {}, "8 bundles STRICT_SPREAD, CPU 1");
BENCHMARK_CAPTURE(BM_Bundles, strict_spread_selector, Strategy::kStrictSpread, 1.0, {{"team", "ml"}},
                  "8 bundles STRICT_SPREAD, CPU 1, team=ml");
BENCHMARK_CAPTURE(BM_Bundles, pack, Strategy::kPack, 4.0, {}, "8 bundles PACK, CPU 4 (best fit within a tier)");

void BM_BundlesWithUpkeep(benchmark::State& state) {
  const BundleRequest request = EightBundles(Strategy::kPack, 4.0, {});
  ClusterIndex& index = MutableCluster();
  std::vector<std::pair<std::string, ResourceSet>> before;
  Measure(
      state, "8 bundles PACK, CPU 4 + hold in the index",
      [&] {
        BundleOutcome outcome = PlaceBundles(index, request);
        if (const auto* placed = std::get_if<BundlePlacement>(&outcome)) {
          std::map<std::string, ResourceSet> take;
          for (size_t i = 0; i < placed->node_ids.size(); ++i) take[placed->node_ids[i]].Add(request.primary.bundles[i]);
          for (const auto& [node, resources] : take) {
            const NodeSnapshot* n = index.FindNode(node);
            before.emplace_back(node, n->available);
            ResourceSet available = n->available;
            available.Subtract(resources);
            index.UpdateHoldings(node, available, index.node_facts(index.NodeIndex(node)).busy_chips);
          }
        }
        return outcome.index();
      },
      [&] {
        for (const auto& [node, available] : before) {
          index.UpdateHoldings(node, available, index.node_facts(index.NodeIndex(node)).busy_chips);
        }
        before.clear();
      });
}
BENCHMARK(BM_BundlesWithUpkeep);

void PrintTable() {
  std::printf("\n| decision | p50 µs | p99 µs | mean µs | per second (one core) | timed |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (const auto& [name, r] : Rows()) {
    std::printf("| %s | %.2f | %.2f | %.2f | %.0f | %lld |\n", name.c_str(), r.p50_us, r.p99_us, r.mean_us,
                r.per_second, static_cast<long long>(r.decisions));
  }
  std::printf("\n(index build row: p50 / max / mean over its runs)\n");
}

}  // namespace
}  // namespace torus::sched

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  torus::sched::PrintTable();
  return 0;
}
