// Builders shared by the tests of placement and membership: node registrations (CPU hosts, GPU hosts, TPU hosts and
// the four hosts of a v6e 4x4 slice, labelled as agents label them), the records that register them, requests in
// one line, held bundles as readable strings, and fake agents with hooks into a reservation in flight.
//
// Thread-safety: free functions over value types; HookedAgentPool is as thread-safe as its hooks.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <initializer_list>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/tpu_shape.h"
#include "torus/common/well_known_labels.h"
#include "torus/head/agents/fake_agent_pool.h"
#include "torus/head/state/cluster_state.h"
#include "torus/head/state/codec.h"
#include "torus/head/state/records.h"

namespace torus::head {

// Readable values in test failures.
inline void PrintTo(PgState s, std::ostream* os) { *os << PgStateName(s); }
inline void PrintTo(WorkerPhase p, std::ostream* os) { *os << WorkerPhaseName(p); }

namespace test_util {

inline ResourceSet Res(std::initializer_list<std::pair<std::string, double>> amounts) {
  ResourceSet r;
  for (const auto& [name, amount] : amounts) r.Set(name, amount);
  return r;
}

// A host at "<id>.test:7000" (its agent's target), pid 100, started at 1.
inline NodeRegistration Host(const std::string& id, ResourceSet total, Labels labels = {}) {
  NodeRegistration r;
  r.node_id = id;
  r.address = id + ".test";
  r.hostname = id;
  r.total = std::move(total);
  r.labels = std::move(labels);
  r.labels[std::string(kLabelNodeId)] = id;
  r.pid = 100;
  r.start_time_ms = 1;
  r.agent_port = 7000;
  return r;
}

inline NodeRegistration CpuHost(const std::string& id, double cpus = 8) { return Host(id, Res({{"CPU", cpus}})); }

inline NodeRegistration GpuHost(const std::string& id, int gpus, double cpus = 8) {
  return Host(id, Res({{"CPU", cpus}, {"GPU", static_cast<double>(gpus)}}));
}

// A TPU host that is no slice's host (no slice labels).
inline NodeRegistration TpuHost(const std::string& id, int chips = 4, double cpus = 8) {
  return Host(id, Res({{"CPU", cpus}, {"TPU", static_cast<double>(chips)}}),
              {{std::string(kLabelAcceleratorType), "TPU-V6E"}});
}

// The four hosts of a v6e 4x4 slice (4 chips each), node ids "<name>-w<worker>" unless `node_ids` names them (one
// per worker id, in worker order).
inline std::vector<NodeRegistration> V6eSlice(const std::string& name, std::vector<std::string> node_ids = {}) {
  std::vector<NodeRegistration> hosts;
  for (int w = 0; w < 4; ++w) {
    const std::string id = node_ids.empty() ? absl::StrCat(name, "-w", w) : node_ids[static_cast<size_t>(w)];
    hosts.push_back(Host(id, Res({{"CPU", 8}, {"TPU", 4}}),
                         {{std::string(kLabelAcceleratorType), "TPU-V6E"},
                          {std::string(kLabelTpuSliceName), name},
                          {std::string(kLabelTpuWorkerId), std::to_string(w)},
                          {std::string(kLabelTpuTopology), "4x4"},
                          {std::string(kLabelTpuPodType), "v6e-16"},
                          {std::string(kLabelTpuChipsPerHost), "4"}}));
  }
  return hosts;
}

// A v6e 2x4 slice of one host with 8 chips ("<name>-w0").
inline std::vector<NodeRegistration> V6e8Slice(const std::string& name) {
  const std::string id = name + "-w0";
  return {Host(id, Res({{"CPU", 8}, {"TPU", 8}}),
               {{std::string(kLabelAcceleratorType), "TPU-V6E"},
                {std::string(kLabelTpuSliceName), name},
                {std::string(kLabelTpuWorkerId), "0"},
                {std::string(kLabelTpuTopology), "2x4"},
                {std::string(kLabelTpuPodType), "v6e-8"},
                {std::string(kLabelTpuChipsPerHost), "8"}})};
}

inline void Append(std::vector<NodeRegistration>& to, const std::vector<NodeRegistration>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

inline std::string TargetOf(const NodeRegistration& r) { return absl::StrCat(r.address, ":", r.agent_port); }
inline std::string TargetOf(const std::string& node_id) { return node_id + ".test:7000"; }

// NodeRegistered records for `hosts`, incarnations first, first + 1, ...
inline std::vector<Record> Registrations(const std::vector<NodeRegistration>& hosts, uint64_t first_incarnation = 1,
                                         int64_t wall_ms = 1000) {
  std::vector<Record> out;
  for (const NodeRegistration& h : hosts) out.push_back(NodeRegistered{h, first_incarnation++, wall_ms});
  return out;
}

// Applies records that must fit; a refusal fails the test and names the record.
inline void ApplyAll(ClusterState& state, const std::vector<Record>& records) {
  for (const Record& r : records) {
    const absl::Status s = state.Apply(r);
    ASSERT_TRUE(s.ok()) << StateCodec::EncodeRecord(r) << ": " << s;
  }
}

inline sched::BundleRequest BundleReq(sched::Strategy strategy, std::vector<ResourceSet> bundles) {
  sched::BundleRequest r;
  r.strategy = strategy;
  r.primary.bundles = std::move(bundles);
  return r;
}

inline sched::SliceShapeRequest V6eShape(const std::string& topology = "4x4", int num_slices = 1) {
  sched::SliceShapeRequest s;
  s.generation = TpuGeneration::kV6e;
  auto t = ParseTopology(TpuGeneration::kV6e, topology);
  EXPECT_TRUE(t.ok()) << t.status();
  if (t.ok()) s.topology = *t;
  s.num_slices = num_slices;
  return s;
}

inline sched::SliceGroupRequest SliceReq(const std::string& topology = "4x4", int num_slices = 1) {
  sched::SliceGroupRequest r;
  r.primary = V6eShape(topology, num_slices);
  return r;
}

// A group as GroupSubmitted carries it (PENDING, seq `seq`).
inline Group NewBundleGroup(const std::string& id, sched::BundleRequest request, uint64_t seq = 1) {
  Group g;
  g.id = GroupId(id);
  g.kind = PgKind::kBundles;
  g.bundle_request = std::move(request);
  g.seq = seq;
  g.created_wall_ms = 500;
  return g;
}

inline Group NewSliceGroup(const std::string& id, sched::SliceGroupRequest request, uint64_t seq = 1) {
  Group g;
  g.id = GroupId(id);
  g.kind = PgKind::kSlices;
  g.slice_request = std::move(request);
  g.seq = seq;
  g.created_wall_ms = 500;
  return g;
}

// A bundle of a bundle group (ledger group = the group id, ledger index = index).
inline HeldBundle Bundle(const std::string& group, int index, const std::string& node, ResourceSet resources,
                         std::vector<int> chips = {}, std::vector<int> gpus = {}, uint64_t attempt = 1) {
  HeldBundle b;
  b.index = index;
  b.ledger_index = index;
  b.node = NodeId(node);
  b.ledger_group = group;
  b.attempt = attempt;
  b.chips = std::move(chips);
  b.gpus = std::move(gpus);
  b.resources = std::move(resources);
  return b;
}

// The bundles of one whole v6e 4x4 slice `slice` (hosts "<slice>-w<i>") for `group`, indices from `first_index`.
inline std::vector<HeldBundle> SliceBundles(const std::string& group, const std::string& slice, int first_index,
                                            uint64_t attempt = 1) {
  std::vector<HeldBundle> out;
  for (int w = 0; w < 4; ++w) {
    HeldBundle b = Bundle(absl::StrCat(group, "/", slice), w, absl::StrCat(slice, "-w", w),
                          Res({{"CPU", 1}, {"TPU", 4}}), {0, 1, 2, 3}, {}, attempt);
    b.index = first_index + w;
    b.slice_name = slice;
    b.worker_id = w;
    out.push_back(std::move(b));
  }
  return out;
}

// "<index> <node> <ledger group>:<ledger index> chips[..] gpus[..]", then " w<worker>" for slice bundles,
// " a<attempt>" once numbered, " lost" when lost.
inline std::string Describe(const HeldBundle& b) {
  std::string s = absl::StrCat(b.index, " ", b.node.str(), " ", b.ledger_group, ":", b.ledger_index, " chips[",
                               absl::StrJoin(b.chips, ","), "] gpus[", absl::StrJoin(b.gpus, ","), "]");
  if (b.worker_id >= 0) absl::StrAppend(&s, " w", b.worker_id);
  if (b.attempt != 0) absl::StrAppend(&s, " a", b.attempt);
  if (b.lost) absl::StrAppend(&s, " lost");
  return s;
}

inline std::vector<std::string> Layout(const std::vector<HeldBundle>& bundles) {
  std::vector<std::string> out;
  for (const HeldBundle& b : bundles) out.push_back(Describe(b));
  return out;
}

// "<time> <STATE> <message>" per history entry.
inline std::vector<std::string> History(const Group& g) {
  std::vector<std::string> out;
  for (const PgEvent& e : g.history) out.push_back(absl::StrCat(e.time_ms, " ", e.state, " ", e.message));
  return out;
}

// The fake agents behind hooks that run on the scheduler's thread (before each round of prepares, after each
// round of commits), with counts of the entries committed and released. Set the hooks before the scheduler starts.
class HookedAgentPool final : public AgentPool {
 public:
  explicit HookedAgentPool(FakeAgentPool* inner) : inner_(inner) {}
  std::function<void()> before_prepare;
  std::function<void(const std::vector<AgentBundles>&)> after_commit;
  std::atomic<int> commits{0};
  std::atomic<int> releases{0};

  // A prepare that commits at once (commit_at_once) counts as a commit, and calls after_commit with those it held.
  std::vector<absl::Status> Prepare(const std::vector<AgentBundles>& e, int64_t ttl_ms) override {
    if (before_prepare) before_prepare();
    std::vector<absl::Status> out = inner_->Prepare(e, ttl_ms);
    std::vector<AgentBundles> held;
    for (size_t i = 0; i < e.size(); ++i) {
      if (e[i].commit_at_once && out[i].ok()) held.push_back(e[i]);
    }
    if (!held.empty()) {
      commits += static_cast<int>(held.size());
      if (after_commit) after_commit(held);
    }
    return out;
  }
  std::vector<absl::Status> Commit(const std::vector<AgentBundles>& e) override {
    std::vector<absl::Status> out = inner_->Commit(e);
    commits += static_cast<int>(e.size());
    if (after_commit) after_commit(e);
    return out;
  }
  void Cancel(const std::vector<AgentBundles>& e) override { inner_->Cancel(e); }
  void Release(const std::vector<AgentBundles>& e) override {
    inner_->Release(e);
    releases += static_cast<int>(e.size());
  }
  std::vector<absl::StatusOr<int64_t>> StartWorkers(
      const std::vector<std::pair<std::string, StartSpec>>& specs) override {
    return inner_->StartWorkers(specs);
  }
  void StopWorkers(const std::vector<std::pair<std::string, WorkerId>>& w, int64_t grace_ms) override {
    inner_->StopWorkers(w, grace_ms);
  }
  std::vector<absl::StatusOr<LogChunk>> ReadWorkerLogs(const std::vector<LogRead>& reads) override {
    return inner_->ReadWorkerLogs(reads);
  }
  absl::StatusOr<int> FreePort(const std::string& t) override { return inner_->FreePort(t); }
  absl::StatusOr<rpc::ListLogsReply> ListLogs(const std::string& t) override { return inner_->ListLogs(t); }
  absl::StatusOr<rpc::ReadLogReply> ReadLog(const std::string& t, const rpc::ReadLogRequest& r) override {
    return inner_->ReadLog(t, r);
  }

 private:
  FakeAgentPool* inner_;
};

}  // namespace test_util
}  // namespace torus::head
