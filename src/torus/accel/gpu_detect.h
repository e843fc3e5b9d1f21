// GPU detection: NVML through dlopen("libnvidia-ml.so.1") when loadable, else /dev/nvidia[0-9]+ under a device root
// with the model read from <root>/proc/driver/nvidia/gpus/*/information ("Model: NVIDIA L4").
//
// Thread-safety: thread-safe.
#pragma once

#include <string>
#include <vector>

namespace torus {

struct GpuHostInfo {
  int count = 0;
  std::string model;             // "NVIDIA H100 80GB HBM3"; empty when unknown
  std::string accelerator_type;  // Ray's names: "H100", "A100", "L4", "T4", "V100", "A10G", ...; empty if unknown
  std::string source;            // "nvml", "devfs" or "" (none found)
  std::vector<std::string> warnings;
};

struct GpuDetectOptions {
  std::string root = "/";
  bool use_nvml = true;  // tests and simulated hosts turn NVML off so only the device root counts
};

// Never fails: what cannot be read is absent, with a warning. NVML that does not load, does not initialise or sees
// no GPU falls back to the device root. With mixed models the first GPU's is used, with a warning.
GpuHostInfo DetectGpus(const GpuDetectOptions& options);

// Ray-style accelerator type from an NVML / driver model name: "NVIDIA H100 80GB HBM3" -> "H100",
// "Tesla T4" -> "T4", "NVIDIA A100-SXM4-40GB" -> "A100", "NVIDIA L4" -> "L4"; "" when not recognised, which
// includes consumer cards ("NVIDIA GeForce RTX 4090"): only data-centre names (K80 ... B200) are returned.
std::string GpuAcceleratorTypeFromModel(const std::string& model);

}  // namespace torus
