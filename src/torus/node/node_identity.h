// What an agent tells the head about its host: node id, address, resources and labels, built from accelerator
// detection (TPU, GPU), the host's CPU and memory, the TORUS_NODE_* environment, and the user's flags.
//
// Thread-safety: pure given its inputs (detection reads files under the configured roots).
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "torus/accel/tpu_detect.h"
#include "torus/common/labels.h"
#include "torus/common/resources.h"

namespace torus::node {

struct IdentityOptions {
  std::string node_id;                 // required
  std::string address;                 // what other nodes reach this host at
  std::string hostname;
  std::string dev_root = "/";          // <dev_root>/dev/...
  std::string sys_root = "/";          // <sys_root>/sys/...
  EnvMap env;                          // the agent's environment (a simulated host's, under `torus up`)
  MetadataSource* metadata = nullptr;  // GCE metadata; null = off
  bool use_nvml = true;
  std::optional<int> chips_per_host;
  std::optional<std::string> slice_name;
  std::optional<double> num_cpus;      // default: CPUs this process may run on
  std::optional<int64_t> memory_bytes; // default: MemTotal of <sys_root>/proc/meminfo... of /proc/meminfo
  Labels user_labels;                  // already parsed and canonical
  ResourceSet custom_resources;        // already parsed
};

struct NodeIdentity {
  std::string node_id;
  std::string address;
  std::string hostname;
  ResourceSet resources;
  Labels labels;
  std::vector<std::string> warnings;   // for the agent log
  std::string summary;                 // one line: "TPU-V6E v6e-16 slice-a worker 2, 4 chips"
};

// Detects and assembles the identity. Errors come from malformed TPU inputs (named by variable) or conflicting
// labels.
absl::StatusOr<NodeIdentity> BuildNodeIdentity(const IdentityOptions& options);

// CPUs this process may run on (sched_getaffinity), at least 1.
int DetectCpuCount();
// MemTotal in bytes from a meminfo file; 0 when unreadable.
int64_t DetectMemoryBytes(const std::string& meminfo_path = "/proc/meminfo");

}  // namespace torus::node
