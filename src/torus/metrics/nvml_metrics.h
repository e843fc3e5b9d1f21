// NVIDIA GPU metrics through NVML, loaded at run time (dlopen of libnvidia-ml.so.1) so that torus builds and runs
// on hosts without the NVIDIA driver: per GPU index, utilisation, memory used and total, power and temperature.
//
// Thread-compatible: one caller at a time (the agent's metrics sampler).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace torus::metrics {

inline constexpr char kNvmlLibrary[] = "libnvidia-ml.so.1";

// One GPU's readings; a field is unset when NVML could not read it (e.g. power on GPUs without a sensor).
struct GpuStats {
  int index = 0;
  std::optional<double> utilization_percent;
  std::optional<double> memory_used_bytes;
  std::optional<double> memory_total_bytes;
  std::optional<double> power_watts;
  std::optional<double> temperature_celsius;
};

class NvmlMetrics {
 public:
  // Loads and initialises NVML from `library`. Unavailable when it cannot be loaded, lacks a function torus uses,
  // or does not initialise (the message says which).
  static absl::StatusOr<std::unique_ptr<NvmlMetrics>> Open(const std::string& library = kNvmlLibrary);
  // Shuts NVML down and unloads it.
  ~NvmlMetrics();

  NvmlMetrics(const NvmlMetrics&) = delete;
  NvmlMetrics& operator=(const NvmlMetrics&) = delete;

  // Every GPU's readings, by index. Unavailable when NVML cannot count the GPUs (e.g. the driver went away).
  absl::StatusOr<std::vector<GpuStats>> Sample();

 private:
  struct Api;
  NvmlMetrics(void* handle, std::unique_ptr<Api> api);

  void* handle_;
  std::unique_ptr<Api> api_;
};

}  // namespace torus::metrics
