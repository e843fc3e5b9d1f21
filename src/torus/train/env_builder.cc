#include "torus/train/env_builder.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/status.h"

namespace torus::train {
namespace {

using Env = std::map<std::string, std::string>;

constexpr const char* kMegascaleKeys[] = {"MEGASCALE_COORDINATOR_ADDRESS", "MEGASCALE_NUM_SLICES", "MEGASCALE_PORT",
                                          "MEGASCALE_SLICE_ID"};
constexpr char kDefaultMegascalePort[] = "8081";
// The port of the TPU runtime's slice builder on each host, as torch_tpu's TORCH_TPU_SLICEBUILDER_ADDRESSES names it.
constexpr int kSliceBuilderPort = 8471;

template <typename... Parts>
absl::Status RankError(size_t rank, const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat("rank ", rank, ": ", parts...));
}

// "host:port", with an IPv6 host in brackets as gRPC (and so JAX's coordinator) expects.
std::string HostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos && !host.starts_with("[")) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::Status CheckPort(std::string_view field, int port) {
  if (port >= 1 && port <= 65535) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), " ", port, " is not a port; use 1-65535"));
}

// Where each rank sits among the run's hosts.
struct HostIndex {
  std::vector<int> node_rank;
  std::vector<int> local_rank;
  std::vector<int> local_world_size;
};

HostIndex IndexHosts(const std::vector<RankPlacement>& ranks) {
  HostIndex out;
  std::map<std::string, int> node_rank_of;
  std::map<std::string, int> count_of;
  for (const RankPlacement& r : ranks) {
    node_rank_of.emplace(r.node_id, static_cast<int>(node_rank_of.size()));
    out.node_rank.push_back(node_rank_of[r.node_id]);
    out.local_rank.push_back(count_of[r.node_id]++);
  }
  for (const RankPlacement& r : ranks) out.local_world_size.push_back(count_of[r.node_id]);
  return out;
}

absl::Status ValidateInput(const GangEnvInput& input) {
  if (input.ranks.empty()) return absl::InvalidArgumentError("a gang run needs at least one rank; ranks is empty");
  if (input.attempt < 1) {
    return absl::InvalidArgumentError(absl::StrCat("attempt ", input.attempt, " is not valid; attempts count from 1"));
  }
  if (input.tpu_generation.has_value() && input.use_gpu) {
    return absl::InvalidArgumentError("a run uses TPU or GPU, not both: tpu_generation and use_gpu are both set");
  }
  if (!input.user_env.contains("MASTER_PORT")) TORUS_RETURN_IF_ERROR(CheckPort("master_port", input.master_port));
  if (!input.user_env.contains("JAX_COORDINATOR_ADDRESS")) TORUS_RETURN_IF_ERROR(CheckPort("jax_port", input.jax_port));
  for (size_t i = 0; i < input.ranks.size(); ++i) {
    const RankPlacement& r = input.ranks[i];
    if (r.node_id.empty()) return RankError(i, "node_id is empty");
    if (r.address.empty()) return RankError(i, "address is empty; every rank needs its host's address");
  }
  if (!input.tpu_generation.has_value()) return absl::OkStatus();

  const size_t num_slices = input.slice_hosts.size();
  if (num_slices == 0) {
    return absl::InvalidArgumentError("slice_hosts is empty; a TPU run lists the hosts of each of its slices");
  }
  // (node, chip) -> the rank holding it: two workers never share a chip.
  std::map<std::pair<std::string, int>, size_t> holder;
  for (size_t i = 0; i < input.ranks.size(); ++i) {
    const RankPlacement& r = input.ranks[i];
    if (r.slice_index < 0 || static_cast<size_t>(r.slice_index) >= num_slices) {
      return RankError(i, "slice_index ", r.slice_index, " is out of range; the run has ", num_slices,
                       num_slices == 1 ? " slice" : " slices");
    }
    if (r.chips.empty()) {
      return RankError(i, "holds no TPU chips; a rank of a TPU run holds 1, 2, 4 or 8 chips, or a whole host");
    }
    for (int chip : r.chips) {
      auto [it, inserted] = holder.emplace(std::make_pair(r.node_id, chip), i);
      if (!inserted && it->second != i) {
        return RankError(i, "chip ", chip, " of node ", r.node_id, " is also held by rank ", it->second,
                         "; two workers never share a chip");
      }
    }
    const bool whole_host = static_cast<int>(r.chips.size()) == r.host_chips;
    const auto& hosts = input.slice_hosts[r.slice_index];
    if (whole_host && (r.tpu_worker_id < 0 || static_cast<size_t>(r.tpu_worker_id) >= hosts.size())) {
      return RankError(i, "tpu_worker_id ", r.tpu_worker_id, " is out of range; slice ", r.slice_index, " has ",
                       hosts.size(), hosts.size() == 1 ? " host" : " hosts");
    }
  }
  return absl::OkStatus();
}

// One rank's environment under construction: `env` is what will be set, `unset` what will be removed.
class RankEnv {
 public:
  explicit RankEnv(const Env& user_env) : env_(user_env) {}

  // Torus's value, unless the user gave one.
  void Default(const std::string& key, std::string value) { env_.emplace(key, std::move(value)); }
  // The placement's value, over the user's.
  void Put(const std::string& key, std::string value) {
    env_[key] = std::move(value);
    unset_.erase(key);
  }
  void Remove(const std::string& key) {
    env_.erase(key);
    unset_.insert(key);
  }
  void Apply(const EnvChange& change) {
    for (const std::string& key : change.unset) Remove(key);
    for (const auto& [key, value] : change.set) Put(key, value);
  }
  EnvChange Finish() && { return EnvChange{std::move(env_), std::vector<std::string>(unset_.begin(), unset_.end())}; }

 private:
  Env env_;
  std::set<std::string> unset_;
};

}  // namespace

absl::StatusOr<std::vector<EnvChange>> BuildGangEnv(const GangEnvInput& input) {
  TORUS_RETURN_IF_ERROR(ValidateInput(input));
  const HostIndex hosts = IndexHosts(input.ranks);
  const std::string world_size = absl::StrCat(input.ranks.size());
  const std::string& master = input.ranks.front().address;
  const bool tpu = input.tpu_generation.has_value();
  const size_t num_slices = input.slice_hosts.size();

  std::vector<EnvChange> out;
  out.reserve(input.ranks.size());
  for (size_t i = 0; i < input.ranks.size(); ++i) {
    const RankPlacement& r = input.ranks[i];
    const std::string rank = absl::StrCat(i);
    RankEnv env(input.user_env);

    env.Default("MASTER_ADDR", master);
    env.Default("MASTER_PORT", absl::StrCat(input.master_port));
    env.Default("JAX_COORDINATOR_ADDRESS", HostPort(master, input.jax_port));
    env.Put("RANK", rank);
    env.Put("WORLD_SIZE", world_size);
    env.Put("LOCAL_RANK", absl::StrCat(hosts.local_rank[i]));
    env.Put("LOCAL_WORLD_SIZE", absl::StrCat(hosts.local_world_size[i]));
    env.Put("NODE_RANK", absl::StrCat(hosts.node_rank[i]));
    env.Put("JAX_NUM_PROCESSES", world_size);
    env.Put("JAX_PROCESS_ID", rank);

    env.Put("TORUS_RUN_ID", input.run_id);
    env.Put("TORUS_RUN_NAME", input.run_name);
    env.Put("TORUS_ATTEMPT", absl::StrCat(input.attempt));
    env.Put("TORUS_RANK", rank);
    env.Put("TORUS_WORLD_SIZE", world_size);
    env.Put("TORUS_LOCAL_RANK", absl::StrCat(hosts.local_rank[i]));
    env.Put("TORUS_STORAGE_PATH", input.storage_path);
    env.Put("TORUS_CHECKPOINT_DIR", input.checkpoint_dir);
    env.Put("TORUS_REPORT_URL", input.report_url);
    env.Put("TORUS_RUN_TOKEN", input.run_token);

    if (tpu) {
      env.Default("JAX_PLATFORMS", "tpu");
      env.Put("TORUS_SLICE_ID", absl::StrCat(r.slice_index));
      // Sub-host ranks get these from isolation below (worker 0 of a one-host slice).
      env.Put("TPU_WORKER_ID", absl::StrCat(r.tpu_worker_id));
      const std::vector<std::string>& hosts_of_slice = input.slice_hosts[r.slice_index];
      env.Put("TPU_WORKER_HOSTNAMES", absl::StrJoin(hosts_of_slice, ","));
      // PyTorch on TPUs (torch_tpu) reads the slice's shape and its hosts' slice builders from these.
      if (static_cast<size_t>(r.slice_index) < input.slice_topologies.size() &&
          !input.slice_topologies[r.slice_index].empty()) {
        env.Put("TORCH_TPU_TOPOLOGY", input.slice_topologies[r.slice_index]);
      }

      if (num_slices > 1) {
        env.Put("MEGASCALE_COORDINATOR_ADDRESS", master);
        env.Default("MEGASCALE_PORT", kDefaultMegascalePort);
        env.Put("MEGASCALE_NUM_SLICES", absl::StrCat(num_slices));
        env.Put("MEGASCALE_SLICE_ID", absl::StrCat(r.slice_index));
      } else {
        for (const char* key : kMegascaleKeys) env.Remove(key);
      }
      absl::StatusOr<EnvChange> isolation =
          TpuIsolationEnv(*input.tpu_generation, r.host_chips, r.chips, input.user_env);
      if (!isolation.ok()) return RankError(i, isolation.status().message());
      env.Apply(*isolation);
      // The slice builders of the slice the rank sees: its slice's hosts, or its own host alone for a sub-host rank
      // (which isolation makes worker 0 of a one-host slice).
      auto seen = isolation->set.find("TPU_WORKER_HOSTNAMES");
      std::vector<std::string> builders;
      for (const std::string& host : seen != isolation->set.end() ? std::vector<std::string>{seen->second}
                                                                  : hosts_of_slice) {
        builders.push_back(HostPort(host, kSliceBuilderPort));
      }
      env.Put("TORCH_TPU_SLICEBUILDER_ADDRESSES", absl::StrJoin(builders, ","));
    } else {
      env.Remove("TORUS_SLICE_ID");
      if (input.use_gpu) env.Apply(GpuIsolationEnv(r.gpus));
    }
    out.push_back(std::move(env).Finish());
  }
  return out;
}

}  // namespace torus::train
