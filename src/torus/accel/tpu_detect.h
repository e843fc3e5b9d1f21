// TPU detection on a host, exactly as a TPU VM on GKE presents itself (reference/tpu.md §3, §5):
// environment first, then GCE metadata, chips counted from device files under a device root.
// Simulated hosts go through this same code; they differ only in the environment map and the device root.
//
// Thread-safety: DetectTpu is thread-safe given a thread-safe MetadataSource.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/common/labels.h"
#include "torus/common/tpu_shape.h"

namespace torus {

// The PCI vendor id of Google's TPU devices (/sys/bus/pci/devices/*/vendor; tpu.md §1).
inline constexpr char kGoogleVendorId[] = "0x1ae0";

using EnvMap = std::map<std::string, std::string>;

// GCE metadata `instance/attributes/<key>` values. Absent (nullopt) on any error, non-200 or empty body.
// Implementations used by DetectTpu from several threads must be thread-safe.
class MetadataSource {
 public:
  virtual ~MetadataSource() = default;
  virtual std::optional<std::string> GetAttribute(const std::string& key) = 0;
};

// Talks to http://metadata.google.internal (or `base_url`, e.g. "http://127.0.0.1:8099") with header
// `Metadata-Flavor: Google` and a 1 s timeout; GET <base_url>/computeMetadata/v1/instance/attributes/<key>.
// An empty base_url means the GCE server. Redirects are not followed. Thread-safe.
std::unique_ptr<MetadataSource> MakeHttpMetadataSource(const std::string& base_url);

struct TpuDetectOptions {
  std::string root = "/";                 // device root: <root>/dev/accel*, <root>/dev/vfio, <root>/sys/kernel/...
  std::string sys_root;                   // holds sys/ (iommu groups, accel class); empty = same as root
  EnvMap env;                             // the process environment (or a simulated host's)
  MetadataSource* metadata = nullptr;     // nullptr = metadata off; also skipped when TPU_SKIP_MDS_QUERY is true
  std::optional<int> chips_per_host;      // setting; the detected chip count still wins
  std::optional<std::string> slice_name_override;
};

struct TpuHostInfo {
  int chips = 0;                          // detected chips (0 = not a TPU host, or no devices)
  std::optional<TpuGeneration> generation;
  std::optional<PodType> pod_type;
  std::optional<Topology> topology;
  std::string slice_name;                 // empty when unknown
  std::optional<int> worker_id;
  std::vector<std::string> worker_hostnames;  // worker-id order
  std::vector<std::string> warnings;      // one sentence each, for the agent log
};

// Detects the TPU facts of a host. Returns a TpuHostInfo with chips = 0 and no generation on a host with neither
// TPU env/metadata nor TPU devices. Errors (InvalidArgument, naming the variable and accepted forms) for present but
// malformed inputs: an unparseable TPU_ACCELERATOR_TYPE, a topology invalid for the generation, a non-integer
// TPU_WORKER_ID, a worker id >= hosts, TPU_WORKER_HOSTNAMES count != hosts of the shape.
// Also rejected: a pod type and topology of different sizes, a host chip count the shape cannot be built from
// (MakeSliceShape), a slice name that is not a label value, a malformed `worker-network-endpoints`.
//
// Choices where tpu.md leaves room:
//   - generation: the declared pod type (env, else metadata) wins over the PCI device ids, with a warning;
//   - a pod type without a topology leaves the topology unset, with a warning (v6e-16 is 4x4 or 2x8); the host
//     count then comes from the pod type's chips / chips per host;
//   - chips per host: the detected chip count, else options.chips_per_host, else the topology's default;
//   - metadata is asked only for facts the env lacks, and beyond `accelerator-type` only on a host that shows a
//     TPU (devices or an accelerator type), so a CPU VM on GCE costs one request;
//   - with TPU env but no devices: chips = 0, the facts still parsed and validated, and a warning.
absl::StatusOr<TpuHostInfo> DetectTpu(const TpuDetectOptions& options);

// The well-known labels of a detected TPU host (semantics.md §1): accelerator-type, tpu-slice-name,
// tpu-worker-id, tpu-topology, tpu-pod-type, tpu-chips-per-host. Empty for chips = 0.
Labels TpuLabels(const TpuHostInfo& info);

}  // namespace torus
