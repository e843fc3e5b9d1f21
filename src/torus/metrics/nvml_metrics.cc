#include "torus/metrics/nvml_metrics.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace torus::metrics {
namespace {

// The few declarations below match nvml.h: return codes are an int-sized enum (0 is NVML_SUCCESS), devices are
// opaque handles, and the two structs are laid out as nvmlUtilization_t and nvmlMemory_t (v1).
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU

}  // namespace

struct NvmlMetrics::Api {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*get_count)(unsigned int*) = nullptr;
  NvmlReturn (*get_handle)(unsigned int, NvmlDevice*) = nullptr;
  NvmlReturn (*get_utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*get_memory)(NvmlDevice, NvmlMemory*) = nullptr;
  NvmlReturn (*get_power)(NvmlDevice, unsigned int*) = nullptr;             // milliwatts
  NvmlReturn (*get_temperature)(NvmlDevice, int, unsigned int*) = nullptr;  // degrees C
};

absl::StatusOr<std::unique_ptr<NvmlMetrics>> NvmlMetrics::Open(const std::string& library) {
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return absl::UnavailableError(absl::StrCat("cannot load ", library, ": ", error != nullptr ? error : "unknown"));
  }
  auto api = std::make_unique<Api>();
  std::string missing;
  auto bind = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, name));
    if (fn == nullptr) absl::StrAppend(&missing, missing.empty() ? "" : ", ", name);
  };
  bind(api->init, "nvmlInit_v2");
  bind(api->shutdown, "nvmlShutdown");
  bind(api->get_count, "nvmlDeviceGetCount_v2");
  bind(api->get_handle, "nvmlDeviceGetHandleByIndex_v2");
  bind(api->get_utilization, "nvmlDeviceGetUtilizationRates");
  bind(api->get_memory, "nvmlDeviceGetMemoryInfo");
  bind(api->get_power, "nvmlDeviceGetPowerUsage");
  bind(api->get_temperature, "nvmlDeviceGetTemperature");
  if (!missing.empty()) {
    dlclose(handle);
    return absl::UnavailableError(absl::StrCat(library, " lacks ", missing));
  }
  if (NvmlReturn rc = api->init(); rc != kNvmlSuccess) {
    dlclose(handle);
    return absl::UnavailableError(absl::StrCat("nvmlInit_v2 failed (NVML error ", rc, ")"));
  }
  return std::unique_ptr<NvmlMetrics>(new NvmlMetrics(handle, std::move(api)));
}

NvmlMetrics::NvmlMetrics(void* handle, std::unique_ptr<Api> api) : handle_(handle), api_(std::move(api)) {}

NvmlMetrics::~NvmlMetrics() {
  api_->shutdown();
  dlclose(handle_);
}

absl::StatusOr<std::vector<GpuStats>> NvmlMetrics::Sample() {
  unsigned int count = 0;
  if (NvmlReturn rc = api_->get_count(&count); rc != kNvmlSuccess) {
    return absl::UnavailableError(absl::StrCat("nvmlDeviceGetCount_v2 failed (NVML error ", rc, ")"));
  }
  std::vector<GpuStats> out;
  out.reserve(count);
  for (unsigned int i = 0; i < count; ++i) {
    NvmlDevice device = nullptr;
    if (api_->get_handle(i, &device) != kNvmlSuccess) continue;  // e.g. a GPU that fell off the bus
    GpuStats& stats = out.emplace_back();
    stats.index = static_cast<int>(i);
    NvmlUtilization utilization{};
    if (api_->get_utilization(device, &utilization) == kNvmlSuccess) stats.utilization_percent = utilization.gpu;
    NvmlMemory memory{};
    if (api_->get_memory(device, &memory) == kNvmlSuccess) {
      stats.memory_used_bytes = static_cast<double>(memory.used);
      stats.memory_total_bytes = static_cast<double>(memory.total);
    }
    unsigned int milliwatts = 0;
    if (api_->get_power(device, &milliwatts) == kNvmlSuccess) stats.power_watts = milliwatts / 1000.0;
    unsigned int celsius = 0;
    if (api_->get_temperature(device, kNvmlTemperatureGpu, &celsius) == kNvmlSuccess) {
      stats.temperature_celsius = celsius;
    }
  }
  return out;
}

}  // namespace torus::metrics
