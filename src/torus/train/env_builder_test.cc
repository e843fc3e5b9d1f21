#include "torus/train/env_builder.h"

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torus::train {
namespace env_builder_test {

using Env = std::map<std::string, std::string>;
using Unset = std::vector<std::string>;

const Unset kMegascale = {"MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES", "MEGASCALE_PORT",
                          "MEGASCALE_SLICE_ID"};
// What a whole-host rank of a single-slice run removes.
const Unset kSingleSliceWholeHostUnset = {"MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES", "MEGASCALE_PORT",
                                          "MEGASCALE_SLICE_ID", "TPU_VISIBLE_CHIPS"};
// What a sub-host rank's isolation removes.
const Unset kSubHostUnset = {"MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES", "MEGASCALE_PORT",
                             "MEGASCALE_SLICE_ID", "TPU_PROCESS_ADDRESSES", "TPU_PROCESS_PORT"};

std::string Describe(const EnvChange& change) {
  return absl::StrCat("set {\n  ", absl::StrJoin(change.set, "\n  ", absl::PairFormatter("=")), "\n} unset {",
                      absl::StrJoin(change.unset, ", "), "}");
}

// The run every test starts from; ranks and devices are filled in per test.
GangEnvInput BaseInput() {
  GangEnvInput in;
  in.run_id = "r-1a2b";
  in.run_name = "train";
  in.attempt = 2;
  in.storage_path = "/tmp/torus/runs/train";
  in.checkpoint_dir = "/tmp/torus/runs/train/checkpoint_100";
  in.report_url = "http://10.0.0.100:8265/api/v0/runs/r-1a2b/report";
  in.run_token = "tok";
  in.master_port = 29500;
  in.jax_port = 29501;
  return in;
}

// The variables every rank of BaseInput gets: identity, coordinators (rank 0 at `master`) and TORUS_*.
Env Common(int rank, int world, int node_rank, int local_rank, int local_world, const std::string& master) {
  return {
      {"RANK", absl::StrCat(rank)},
      {"WORLD_SIZE", absl::StrCat(world)},
      {"LOCAL_RANK", absl::StrCat(local_rank)},
      {"LOCAL_WORLD_SIZE", absl::StrCat(local_world)},
      {"NODE_RANK", absl::StrCat(node_rank)},
      {"MASTER_ADDR", master},
      {"MASTER_PORT", "29500"},
      {"JAX_COORDINATOR_ADDRESS", master + ":29501"},
      {"JAX_NUM_PROCESSES", absl::StrCat(world)},
      {"JAX_PROCESS_ID", absl::StrCat(rank)},
      {"TORUS_RUN_ID", "r-1a2b"},
      {"TORUS_RUN_NAME", "train"},
      {"TORUS_ATTEMPT", "2"},
      {"TORUS_RANK", absl::StrCat(rank)},
      {"TORUS_WORLD_SIZE", absl::StrCat(world)},
      {"TORUS_LOCAL_RANK", absl::StrCat(local_rank)},
      {"TORUS_STORAGE_PATH", "/tmp/torus/runs/train"},
      {"TORUS_CHECKPOINT_DIR", "/tmp/torus/runs/train/checkpoint_100"},
      {"TORUS_REPORT_URL", "http://10.0.0.100:8265/api/v0/runs/r-1a2b/report"},
      {"TORUS_RUN_TOKEN", "tok"},
  };
}

Env Merge(Env base, const Env& more) {
  for (const auto& [k, v] : more) base[k] = v;
  return base;
}

RankPlacement OnHost(const std::string& node_id, const std::string& address) {
  RankPlacement r;
  r.node_id = node_id;
  r.address = address;
  return r;
}

std::string Addr(int host) { return absl::StrCat("10.0.0.", host + 1); }

// TORCH_TPU_SLICEBUILDER_ADDRESSES of a slice whose hosts are `hosts` (comma-separated): each host's port 8471.
std::string Builders(const std::string& hosts) {
  std::vector<std::string> out;
  for (absl::string_view host : absl::StrSplit(hosts, ',')) out.push_back(absl::StrCat(host, ":8471"));
  return absl::StrJoin(out, ",");
}

// Whole-host ranks of `slices` slices of `hosts` hosts each with `chips` chips, one rank per host, slice-major.
GangEnvInput WholeHostRun(TpuGeneration gen, int slices, int hosts, int chips) {
  GangEnvInput in = BaseInput();
  in.tpu_generation = gen;
  for (int s = 0; s < slices; ++s) {
    in.slice_hosts.emplace_back();
    for (int w = 0; w < hosts; ++w) {
      const int host = s * hosts + w;
      RankPlacement r;
      r.node_id = absl::StrCat("node-", host);
      r.address = Addr(host);
      r.slice_name = absl::StrCat("slice-", s);
      r.slice_index = s;
      r.tpu_worker_id = w;
      r.host_chips = chips;
      for (int c = 0; c < chips; ++c) r.chips.push_back(c);
      in.ranks.push_back(r);
      in.slice_hosts.back().push_back(r.address);
    }
  }
  return in;
}

void ExpectChanges(const absl::StatusOr<std::vector<EnvChange>>& got, const std::vector<EnvChange>& want) {
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*got)[i], want[i]) << "rank " << i << "\ngot:  " << Describe((*got)[i]) << "\nwant: "
                                  << Describe(want[i]);
  }
}

TEST(BuildGangEnvTest, SingleSliceOneRankPerHost) {
  // TPU-V6E 4x4: 4 hosts of 4 chips, one whole-host rank each.
  const GangEnvInput in = WholeHostRun(TpuGeneration::kV6e, 1, 4, 4);
  const std::string hosts = "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4";
  std::vector<EnvChange> want;
  for (int rank = 0; rank < 4; ++rank) {
    want.push_back(EnvChange{Merge(Common(rank, 4, rank, 0, 1, "10.0.0.1"),
                                   {{"JAX_PLATFORMS", "tpu"},
                                    {"TORUS_SLICE_ID", "0"},
                                    {"TPU_WORKER_ID", absl::StrCat(rank)},
                                    {"TPU_WORKER_HOSTNAMES", hosts},
                                    {"TORCH_TPU_SLICEBUILDER_ADDRESSES", Builders(hosts)}}),
                             kSingleSliceWholeHostUnset});
  }
  ExpectChanges(BuildGangEnv(in), want);
}

TEST(BuildGangEnvTest, MultisliceOverwritesStaleMegascale) {
  // TPU-V6E 4x4 x2: 8 whole-host ranks; the inherited MEGASCALE_* of some earlier job are overwritten.
  GangEnvInput in = WholeHostRun(TpuGeneration::kV6e, 2, 4, 4);
  in.user_env = {{"MEGASCALE_COORDINATOR_ADDRESS", "stale:1"},
                 {"MEGASCALE_NUM_SLICES", "4"},
                 {"MEGASCALE_SLICE_ID", "3"}};
  const std::vector<std::string> slice_hosts = {"10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4",
                                                "10.0.0.5,10.0.0.6,10.0.0.7,10.0.0.8"};
  struct Row {
    int rank, slice, worker;
  };
  const std::vector<Row> rows = {{0, 0, 0}, {1, 0, 1}, {2, 0, 2}, {3, 0, 3},
                                 {4, 1, 0}, {5, 1, 1}, {6, 1, 2}, {7, 1, 3}};
  std::vector<EnvChange> want;
  for (const Row& row : rows) {
    want.push_back(EnvChange{Merge(Common(row.rank, 8, row.rank, 0, 1, "10.0.0.1"),
                                   {{"JAX_PLATFORMS", "tpu"},
                                    {"TORUS_SLICE_ID", absl::StrCat(row.slice)},
                                    {"TPU_WORKER_ID", absl::StrCat(row.worker)},
                                    {"TPU_WORKER_HOSTNAMES", slice_hosts[row.slice]},
                                    {"TORCH_TPU_SLICEBUILDER_ADDRESSES", Builders(slice_hosts[row.slice])},
                                    {"MEGASCALE_COORDINATOR_ADDRESS", "10.0.0.1"},
                                    {"MEGASCALE_PORT", "8081"},
                                    {"MEGASCALE_NUM_SLICES", "2"},
                                    {"MEGASCALE_SLICE_ID", absl::StrCat(row.slice)}}),
                             {"TPU_VISIBLE_CHIPS"}});
  }
  ExpectChanges(BuildGangEnv(in), want);
}

TEST(BuildGangEnvTest, TorchTpuNamesEachRanksSliceTopologyAndBuilders) {
  GangEnvInput in = WholeHostRun(TpuGeneration::kV6e, 2, 4, 4);
  in.slice_topologies = {"4x4", "4x4"};
  absl::StatusOr<std::vector<EnvChange>> got = BuildGangEnv(in);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].set.at("TORCH_TPU_TOPOLOGY"), "4x4");
  EXPECT_EQ((*got)[0].set.at("TORCH_TPU_SLICEBUILDER_ADDRESSES"),
            "10.0.0.1:8471,10.0.0.2:8471,10.0.0.3:8471,10.0.0.4:8471");
  EXPECT_EQ((*got)[6].set.at("TORCH_TPU_SLICEBUILDER_ADDRESSES"),
            "10.0.0.5:8471,10.0.0.6:8471,10.0.0.7:8471,10.0.0.8:8471");
  // A slice whose topology is unknown gets no TORCH_TPU_TOPOLOGY rather than a wrong one.
  in.slice_topologies = {"4x4", ""};
  got = BuildGangEnv(in);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[3].set.count("TORCH_TPU_TOPOLOGY"), 1u);
  EXPECT_EQ((*got)[4].set.count("TORCH_TPU_TOPOLOGY"), 0u);
}

TEST(BuildGangEnvTest, HeaderExampleRank5) {
  GangEnvInput in = WholeHostRun(TpuGeneration::kV6e, 2, 4, 4);
  absl::StatusOr<std::vector<EnvChange>> got = BuildGangEnv(in);
  ASSERT_TRUE(got.ok()) << got.status();
  const Env& env = (*got)[5].set;
  const Env want = {{"RANK", "5"},           {"WORLD_SIZE", "8"},         {"LOCAL_RANK", "0"},
                    {"LOCAL_WORLD_SIZE", "1"}, {"NODE_RANK", "5"},        {"TPU_WORKER_ID", "1"},
                    {"MEGASCALE_SLICE_ID", "1"}, {"TORUS_SLICE_ID", "1"}, {"JAX_PROCESS_ID", "5"},
                    {"TPU_WORKER_HOSTNAMES", "10.0.0.5,10.0.0.6,10.0.0.7,10.0.0.8"}};
  for (const auto& [key, value] : want) EXPECT_EQ(env.at(key), value) << key;
}

// 16 one-chip ranks on one v6e 4x4 slice: 4 per host, chip blocks lowest first (the slice-group bundle order).
GangEnvInput PerChipRun() {
  GangEnvInput in = BaseInput();
  in.tpu_generation = TpuGeneration::kV6e;
  in.slice_hosts = {{Addr(0), Addr(1), Addr(2), Addr(3)}};
  for (int w = 0; w < 4; ++w) {
    for (int c = 0; c < 4; ++c) {
      RankPlacement r;
      r.node_id = absl::StrCat("node-", w);
      r.address = Addr(w);
      r.slice_name = "slice-0";
      r.tpu_worker_id = w;
      r.host_chips = 4;
      r.chips = {c};
      in.ranks.push_back(r);
    }
  }
  return in;
}

TEST(BuildGangEnvTest, PerChipRanksAreIsolated) {
  const GangEnvInput in = PerChipRun();
  std::vector<EnvChange> want;
  for (int rank = 0; rank < 16; ++rank) {
    const int host = rank / 4, chip = rank % 4;
    want.push_back(EnvChange{Merge(Common(rank, 16, host, chip, 4, "10.0.0.1"),
                                   {{"JAX_PLATFORMS", "tpu"},
                                    {"TORUS_SLICE_ID", "0"},
                                    {"TPU_VISIBLE_CHIPS", absl::StrCat(chip)},
                                    {"TPU_CHIPS_PER_HOST_BOUNDS", "1,1,1"},
                                    {"TPU_HOST_BOUNDS", "1,1,1"},
                                    {"TPU_WORKER_ID", "0"},
                                    {"TPU_WORKER_HOSTNAMES", "localhost"},
                                    {"TORCH_TPU_SLICEBUILDER_ADDRESSES", "localhost:8471"}}),
                             kSubHostUnset});
  }
  absl::StatusOr<std::vector<EnvChange>> got = BuildGangEnv(in);
  ExpectChanges(got, want);
  ASSERT_TRUE(got.ok());
  // Every rank holds a distinct (host, chip).
  std::set<std::pair<std::string, std::string>> held;
  for (const EnvChange& c : *got) held.insert({c.set.at("NODE_RANK"), c.set.at("TPU_VISIBLE_CHIPS")});
  EXPECT_EQ(held.size(), 16u);
}

TEST(BuildGangEnvTest, SubHostRanksOfAMultisliceRunDropMegascale) {
  // Two single-host v6e 2x2 slices, two 2-chip ranks per host: isolation makes each rank a slice of its own, so
  // the multislice variables a whole-host rank would get are removed, stale ones included.
  GangEnvInput in = BaseInput();
  in.tpu_generation = TpuGeneration::kV6e;
  in.slice_hosts = {{Addr(0)}, {Addr(1)}};
  in.user_env = {{"MEGASCALE_NUM_SLICES", "2"}, {"MEGASCALE_PORT", "9000"}};
  for (int s = 0; s < 2; ++s) {
    for (int b = 0; b < 2; ++b) {
      RankPlacement r;
      r.node_id = absl::StrCat("node-", s);
      r.address = Addr(s);
      r.slice_index = s;
      r.tpu_worker_id = 0;
      r.host_chips = 4;
      r.chips = {2 * b, 2 * b + 1};
      in.ranks.push_back(r);
    }
  }
  struct Row {
    int rank, node_rank, local_rank, slice;
    std::string chips;
  };
  const std::vector<Row> rows = {{0, 0, 0, 0, "0,1"}, {1, 0, 1, 0, "2,3"}, {2, 1, 0, 1, "0,1"}, {3, 1, 1, 1, "2,3"}};
  std::vector<EnvChange> want;
  for (const Row& row : rows) {
    want.push_back(EnvChange{Merge(Common(row.rank, 4, row.node_rank, row.local_rank, 2, "10.0.0.1"),
                                   {{"JAX_PLATFORMS", "tpu"},
                                    {"TORUS_SLICE_ID", absl::StrCat(row.slice)},
                                    {"TPU_VISIBLE_CHIPS", row.chips},
                                    {"TPU_CHIPS_PER_HOST_BOUNDS", "1,2,1"},
                                    {"TPU_HOST_BOUNDS", "1,1,1"},
                                    {"TPU_WORKER_ID", "0"},
                                    {"TPU_WORKER_HOSTNAMES", "localhost"},
                                    {"TORCH_TPU_SLICEBUILDER_ADDRESSES", "localhost:8471"}}),
                             kSubHostUnset});
  }
  ExpectChanges(BuildGangEnv(in), want);
}

TEST(BuildGangEnvTest, FallbackShapeOnOneEightChipHost) {
  // A run that fell back to TPU-V5LITEPOD 2x4 on one 8-chip host: one whole-host rank, its slice's only worker.
  const GangEnvInput in = WholeHostRun(TpuGeneration::kV5e, 1, 1, 8);
  ExpectChanges(BuildGangEnv(in), {EnvChange{Merge(Common(0, 1, 0, 0, 1, "10.0.0.1"),
                                                   {{"JAX_PLATFORMS", "tpu"},
                                                    {"TORUS_SLICE_ID", "0"},
                                                    {"TPU_WORKER_ID", "0"},
                                                    {"TPU_WORKER_HOSTNAMES", "10.0.0.1"},
                                                    {"TORCH_TPU_SLICEBUILDER_ADDRESSES", "10.0.0.1:8471"}}),
                                             kSingleSliceWholeHostUnset}});
}

TEST(BuildGangEnvTest, GpuRanks) {
  // Two hosts with two GPUs each, one GPU per rank.
  GangEnvInput in = BaseInput();
  in.use_gpu = true;
  for (int rank = 0; rank < 4; ++rank) {
    RankPlacement r;
    r.node_id = absl::StrCat("gpu-", rank / 2);
    r.address = Addr(rank / 2);
    r.gpus = {rank % 2};
    in.ranks.push_back(r);
  }
  std::vector<EnvChange> want;
  for (int rank = 0; rank < 4; ++rank) {
    want.push_back(EnvChange{Merge(Common(rank, 4, rank / 2, rank % 2, 2, "10.0.0.1"),
                                   {{"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
                                    {"CUDA_VISIBLE_DEVICES", absl::StrCat(rank % 2)}}),
                             {"TORUS_SLICE_ID"}});
  }
  ExpectChanges(BuildGangEnv(in), want);
}

TEST(BuildGangEnvTest, CpuRanksInterleavedOnHosts) {
  // Ranks need not be grouped by host: NODE_RANK follows first appearance, LOCAL_RANK counts earlier ranks.
  GangEnvInput in = BaseInput();
  in.checkpoint_dir = "";  // a fresh start
  in.attempt = 1;
  const std::vector<int> host_of = {1, 0, 1, 2};
  for (int h : host_of) in.ranks.push_back(OnHost(absl::StrCat("n", h), Addr(h)));
  struct Row {
    int rank, node_rank, local_rank, local_world;
  };
  const std::vector<Row> rows = {{0, 0, 0, 2}, {1, 1, 0, 1}, {2, 0, 1, 2}, {3, 2, 0, 1}};
  std::vector<EnvChange> want;
  for (const Row& row : rows) {
    want.push_back(EnvChange{Merge(Common(row.rank, 4, row.node_rank, row.local_rank, row.local_world, "10.0.0.2"),
                                   {{"TORUS_CHECKPOINT_DIR", ""}, {"TORUS_ATTEMPT", "1"}}),
                             {"TORUS_SLICE_ID"}});
  }
  ExpectChanges(BuildGangEnv(in), want);
}

TEST(BuildGangEnvTest, UserEnvPrecedence) {
  // Whole-host TPU-V6E 4x4 x2 rank 1 (slice 0, worker 1); the user sets a bit of everything.
  GangEnvInput in = WholeHostRun(TpuGeneration::kV6e, 2, 4, 4);
  in.user_env = {
      {"FOO", "bar"},                           // kept
      {"MASTER_ADDR", "coord.internal"},        // user wins
      {"MASTER_PORT", "1234"},                  // user wins
      {"JAX_COORDINATOR_ADDRESS", "coord:99"},  // user wins
      {"JAX_PLATFORMS", "tpu,cpu"},             // user wins
      {"MEGASCALE_PORT", "9000"},               // user wins
      {"RANK", "99"},                           // identity: placement wins
      {"WORLD_SIZE", "99"},
      {"JAX_PROCESS_ID", "99"},
      {"TORUS_RUN_ID", "mine"},
      {"TPU_WORKER_ID", "7"},                   // topology: placement wins
      {"MEGASCALE_SLICE_ID", "7"},
      {"TPU_VISIBLE_CHIPS", "0"},               // isolation: a whole host removes it
      {"TPU_CHIPS_PER_HOST_BOUNDS", "1,1,1"},   // stale sub-host bounds: removed with the host bounds
      {"TPU_HOST_BOUNDS", "1,1,1"},
  };
  // Neither port is used when the user gave both addresses: 0 is fine.
  in.master_port = 0;
  in.jax_port = 0;
  absl::StatusOr<std::vector<EnvChange>> got = BuildGangEnv(in);
  ASSERT_TRUE(got.ok()) << got.status();
  Env want = Merge(Common(1, 8, 1, 0, 1, "coord.internal"),
                   {{"FOO", "bar"},
                    {"MASTER_PORT", "1234"},
                    {"JAX_COORDINATOR_ADDRESS", "coord:99"},
                    {"JAX_PLATFORMS", "tpu,cpu"},
                    {"TORUS_SLICE_ID", "0"},
                    {"TPU_WORKER_ID", "1"},
                    {"TPU_WORKER_HOSTNAMES", "10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4"},
                    {"TORCH_TPU_SLICEBUILDER_ADDRESSES", Builders("10.0.0.1,10.0.0.2,10.0.0.3,10.0.0.4")},
                    {"MEGASCALE_COORDINATOR_ADDRESS", "10.0.0.1"},
                    {"MEGASCALE_PORT", "9000"},
                    {"MEGASCALE_NUM_SLICES", "2"},
                    {"MEGASCALE_SLICE_ID", "0"}});
  const EnvChange expected{want, {"TPU_CHIPS_PER_HOST_BOUNDS", "TPU_HOST_BOUNDS", "TPU_VISIBLE_CHIPS"}};
  EXPECT_EQ((*got)[1], expected) << Describe((*got)[1]);
}

TEST(BuildGangEnvTest, UserEnvCannotOverrideGpuIsolation) {
  GangEnvInput in = BaseInput();
  in.use_gpu = true;
  in.user_env = {{"CUDA_VISIBLE_DEVICES", "0,1,2,3"}, {"TORUS_SLICE_ID", "3"}};
  in.ranks = {OnHost("g", "10.0.0.9")};
  in.ranks[0].gpus = {3, 2};
  absl::StatusOr<std::vector<EnvChange>> got = BuildGangEnv(in);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].set.at("CUDA_VISIBLE_DEVICES"), "2,3");
  EXPECT_FALSE((*got)[0].set.contains("TORUS_SLICE_ID"));
  EXPECT_THAT((*got)[0].unset, ::testing::ElementsAre("TORUS_SLICE_ID"));
}

TEST(BuildGangEnvTest, SingleSliceRemovesAUsersMegascale) {
  GangEnvInput in = WholeHostRun(TpuGeneration::kV6e, 1, 1, 4);
  in.user_env = {{"MEGASCALE_PORT", "9000"}, {"MEGASCALE_NUM_SLICES", "2"}};
  absl::StatusOr<std::vector<EnvChange>> got = BuildGangEnv(in);
  ASSERT_TRUE(got.ok()) << got.status();
  for (const std::string& key : kMegascale) EXPECT_FALSE((*got)[0].set.contains(key)) << key;
  EXPECT_EQ((*got)[0].unset, kSingleSliceWholeHostUnset);
}

TEST(BuildGangEnvTest, Ipv6CoordinatorIsBracketed) {
  GangEnvInput in = BaseInput();
  in.ranks = {OnHost("a", "fd00::1")};
  absl::StatusOr<std::vector<EnvChange>> got = BuildGangEnv(in);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0].set.at("JAX_COORDINATOR_ADDRESS"), "[fd00::1]:29501");
  EXPECT_EQ((*got)[0].set.at("MASTER_ADDR"), "fd00::1");
}

TEST(BuildGangEnvTest, Errors) {
  struct Case {
    std::string name;
    std::function<void(GangEnvInput&)> edit;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"no ranks", [](GangEnvInput& in) { in.ranks.clear(); }, "a gang run needs at least one rank; ranks is empty"},
      {"no address", [](GangEnvInput& in) { in.ranks[2].address.clear(); },
       "rank 2: address is empty; every rank needs its host's address"},
      {"no node id", [](GangEnvInput& in) { in.ranks[1].node_id.clear(); }, "rank 1: node_id is empty"},
      {"attempt 0", [](GangEnvInput& in) { in.attempt = 0; }, "attempt 0 is not valid; attempts count from 1"},
      {"master port", [](GangEnvInput& in) { in.master_port = 0; }, "master_port 0 is not a port; use 1-65535"},
      {"jax port", [](GangEnvInput& in) { in.jax_port = 70000; }, "jax_port 70000 is not a port; use 1-65535"},
      {"tpu and gpu", [](GangEnvInput& in) { in.use_gpu = true; },
       "a run uses TPU or GPU, not both: tpu_generation and use_gpu are both set"},
      {"no slice hosts", [](GangEnvInput& in) { in.slice_hosts.clear(); },
       "slice_hosts is empty; a TPU run lists the hosts of each of its slices"},
      {"slice index", [](GangEnvInput& in) { in.ranks[3].slice_index = 1; },
       "rank 3: slice_index 1 is out of range; the run has 1 slice"},
      {"worker id", [](GangEnvInput& in) { in.ranks[0].tpu_worker_id = 4; },
       "rank 0: tpu_worker_id 4 is out of range; slice 0 has 4 hosts"},
      {"no chips", [](GangEnvInput& in) { in.ranks[1].chips.clear(); },
       "rank 1: holds no TPU chips; a rank of a TPU run holds 1, 2, 4 or 8 chips, or a whole host"},
      {"3 chips", [](GangEnvInput& in) { in.ranks[1].chips = {0, 1, 2}; },
       "rank 1: a worker cannot hold 3 of a host's 4 chips; use 1, 2, 4 or 8 chips, or the whole host"},
      {"chip out of range", [](GangEnvInput& in) { in.ranks[1].chips = {4}; },
       "rank 1: TPU chip 4 is out of range; the host has 4 chips (0..3)"},
      {"unaligned", [](GangEnvInput& in) { in.ranks[1].chips = {1, 2}; },
       "rank 1: TPU chips 1,2 are not an aligned block; a worker of 2 chips holds chips 2*j..2*j+1"},
      {"bad host", [](GangEnvInput& in) { in.ranks[1].host_chips = 3; in.ranks[1].chips = {0}; },
       "rank 1: a TPU-V6E host cannot have 3 chips; valid: 1, 4, 8"},
      {"shared chip",
       [](GangEnvInput& in) {
         in.ranks[1].node_id = in.ranks[0].node_id;
       },
       "rank 1: chip 0 of node node-0 is also held by rank 0; two workers never share a chip"},
  };
  for (const Case& c : cases) {
    GangEnvInput in = WholeHostRun(TpuGeneration::kV6e, 1, 4, 4);
    c.edit(in);
    absl::StatusOr<std::vector<EnvChange>> got = BuildGangEnv(in);
    ASSERT_FALSE(got.ok()) << c.name;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_EQ(std::string(got.status().message()), c.want) << c.name;
  }
}

}  // namespace env_builder_test
}  // namespace torus::train
