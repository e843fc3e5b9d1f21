// The local simulated cluster spec read by `torus up SPEC.yaml`, and its expansion into simulated hosts.
//
// Example (examples/clusters/local.yaml):
//   head: {num_cpus: 2}
//   node_groups:
//     - name: v6e
//       tpu: {pod_type: v6e-16, topology: 4x4}    # or accelerator_type: TPU-V6E
//       slices: 2
//     - name: cpu
//       count: 2
//       num_cpus: 4
//     - name: gpu
//       gpu: {count: 2, model: NVIDIA L4}
//
// Each TPU host becomes an agent started with the environment GKE injects (TPU_ACCELERATOR_TYPE, TPU_TOPOLOGY,
// TPU_NAME, TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, TPU_SKIP_MDS_QUERY) and a private device root; the agent detects
// it with the same code as a real TPU VM.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/autoscale/config.h"
#include "torus/common/labels.h"
#include "torus/common/tpu_shape.h"
#include "torus/common/yaml_fields.h"

namespace torus::cli {

struct TpuGroupSpec {
  SliceShape shape;
  int slices = 1;
};

struct GpuGroupSpec {
  int count = 1;  // GPUs per host
  std::string model = "NVIDIA L4";
};

struct NodeGroupSpec {
  std::string name;              // [a-z0-9-], 1-40 characters, unique
  int count = 1;                 // hosts (CPU and GPU groups)
  std::optional<double> num_cpus;
  std::optional<int64_t> memory_bytes;
  std::optional<int64_t> object_store_bytes;  // object_store_memory: the agents' --object-store-memory
  Labels labels;                 // user labels, canonical
  std::string market_type;       // sets TORUS_NODE_MARKET_TYPE
  std::optional<TpuGroupSpec> tpu;
  std::optional<GpuGroupSpec> gpu;
};

struct ClusterSpec {
  // Autoscaled slices (`node_types`, optional `autoscaler: {failure_backoff_s}`): validated here and handed to the
  // head as its autoscaler config (autoscale/config.h); empty when the spec has none.
  std::vector<autoscale::NodeType> node_types;
  std::string autoscaler_yaml;  // the spec's node_types (and failure_backoff_s), as YAML
  std::optional<double> head_num_cpus;
  std::optional<int64_t> head_memory_bytes;
  std::optional<int64_t> head_object_store_bytes;
  Labels head_labels;
  std::vector<NodeGroupSpec> groups;
};

// The autoscaler config of a `torus up` session: the spec's node types, launched by the local provider into
// `session`.
std::string AutoscalerConfigFor(const ClusterSpec& spec, const std::string& session);

// Parses YAML. Errors name the field path and the accepted forms, e.g.
// `node_groups[1].tpu.topology: topology "3x3" is not valid for TPU-V6E; valid: ...`, and unknown keys
// (`node_groups[0]: unknown key "slice"; accepted: name, count, ...`).
absl::StatusOr<ClusterSpec> ParseClusterSpec(const std::string& yaml_text);

using torus::ParseByteSize;

// One simulated host of a spec.
struct SimulatedHost {
  std::string name;              // "head", "cpu-0", "v6e-1-w2"
  std::string group;             // "" for the head
  std::string node_ip;           // distinct per host: see HostAddresses
  std::optional<double> num_cpus;
  std::optional<int64_t> memory_bytes;
  std::optional<int64_t> object_store_bytes;
  Labels labels;
  std::map<std::string, std::string> env;  // what GKE (or the operator) would inject
  std::optional<TpuGeneration> tpu_generation;
  int tpu_chips = 0;
  int gpu_count = 0;
  std::string gpu_model;
};

// Where the simulated hosts' addresses come from: the head host's, then `prefix` followed by first, first + 1, ...
// By default loopback addresses (the head host 127.0.0.1, the others 127.0.1.1, 127.0.1.2, ...); with network
// namespaces, a subnet of their own.
struct HostAddresses {
  std::string head = "127.0.0.1";
  std::string prefix = "127.0.1.";
  int first = 1;
};

// Expands the spec into hosts: the head host first, then each group in order; TPU slices are named
// `<group>-<i>` and their hosts `<group>-<i>-w<worker>`.
std::vector<SimulatedHost> ExpandClusterSpec(const ClusterSpec& spec, const HostAddresses& addresses = {});

}  // namespace torus::cli
