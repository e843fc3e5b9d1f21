#include "torus/node/node_identity.h"

#include <sched.h>

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/accel/gpu_detect.h"
#include "torus/common/status.h"
#include "torus/common/well_known_labels.h"

namespace torus::node {

int DetectCpuCount() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

int64_t DetectMemoryBytes(const std::string& meminfo_path) {
  std::ifstream in(meminfo_path);
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemTotal:") return kb * 1024;
  }
  return 0;
}

absl::StatusOr<NodeIdentity> BuildNodeIdentity(const IdentityOptions& options) {
  NodeIdentity id;
  id.node_id = options.node_id;
  id.address = options.address;
  id.hostname = options.hostname;

  // Environment-provided well-known labels; user labels win over them (semantics.md §1).
  const std::pair<std::string_view, std::string_view> kEnvLabels[] = {
      {"TORUS_NODE_MARKET_TYPE", kLabelMarketType},
      {"TORUS_NODE_GROUP", kLabelNodeGroup},
      {"TORUS_NODE_ZONE", kLabelAvailabilityZone},
      {"TORUS_NODE_REGION", kLabelAvailabilityRegion},
  };
  for (auto [var, key] : kEnvLabels) {
    auto it = options.env.find(std::string(var));
    if (it == options.env.end() || it->second.empty()) continue;
    absl::Status valid = ValidateLabelValue(key, it->second);
    if (!valid.ok()) return absl::InvalidArgumentError(absl::StrCat(std::string(var), ": ", valid.message()));
    id.labels[std::string(key)] = it->second;
  }
  for (const auto& [key, value] : options.user_labels) id.labels[key] = value;
  id.labels[std::string(kLabelNodeId)] = options.node_id;

  double cpus = options.num_cpus.value_or(DetectCpuCount());
  id.resources.Set(kResourceCpu, cpus);
  int64_t memory = options.memory_bytes.value_or(DetectMemoryBytes());
  if (memory > 0) id.resources.SetFixed(kResourceMemory, memory * kResourceScale);

  TpuDetectOptions tpu_options;
  tpu_options.root = options.dev_root;
  tpu_options.sys_root = options.sys_root;
  tpu_options.env = options.env;
  tpu_options.metadata = options.metadata;
  tpu_options.chips_per_host = options.chips_per_host;
  tpu_options.slice_name_override = options.slice_name;
  TORUS_ASSIGN_OR_RETURN(TpuHostInfo tpu, DetectTpu(tpu_options));
  id.warnings = tpu.warnings;
  std::vector<std::string> parts;
  if (tpu.chips > 0) {
    id.resources.Set(kResourceTpu, tpu.chips);
    for (const auto& [key, value] : TpuLabels(tpu)) id.labels[key] = value;
    parts.push_back(absl::StrCat(id.labels[std::string(kLabelAcceleratorType)], " ",
                                 tpu.pod_type ? tpu.pod_type->ToString() : "?", " slice ",
                                 tpu.slice_name.empty() ? "(none)" : tpu.slice_name, " worker ",
                                 tpu.worker_id ? absl::StrCat(*tpu.worker_id) : "?", ", ", tpu.chips, " chips"));
  }

  GpuHostInfo gpu = DetectGpus({.root = options.dev_root, .use_nvml = options.use_nvml});
  id.warnings.insert(id.warnings.end(), gpu.warnings.begin(), gpu.warnings.end());
  if (gpu.count > 0) {
    id.resources.Set(kResourceGpu, gpu.count);
    if (!gpu.accelerator_type.empty()) {
      if (tpu.chips > 0) {
        id.warnings.push_back("host has both TPU chips and GPUs; accelerator-type label names the TPU");
      } else {
        id.labels[std::string(kLabelAcceleratorType)] = gpu.accelerator_type;
      }
    }
    parts.push_back(absl::StrCat(gpu.count, " GPU ", gpu.model.empty() ? "(model unknown)" : gpu.model, " via ",
                                 gpu.source));
  }

  for (const auto& [name, amount] : options.custom_resources.amounts()) id.resources.SetFixed(name, amount);
  parts.push_back(absl::StrCat(FormatFixed(id.resources.GetFixed(kResourceCpu)), " CPU"));
  id.summary = absl::StrJoin(parts, ", ");
  return id;
}

}  // namespace torus::node
