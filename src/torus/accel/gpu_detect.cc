#include "torus/accel/gpu_detect.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace torus {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------------------
// NVML, loaded at run time so that torus builds and runs on hosts without the NVIDIA driver. The few declarations
// below match nvml.h (return codes are an int-sized enum; 0 is NVML_SUCCESS).

using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
using NvmlInitFn = NvmlReturn (*)();
using NvmlShutdownFn = NvmlReturn (*)();
using NvmlDeviceGetCountFn = NvmlReturn (*)(unsigned int*);
using NvmlDeviceGetHandleByIndexFn = NvmlReturn (*)(unsigned int, NvmlDevice*);
using NvmlDeviceGetNameFn = NvmlReturn (*)(NvmlDevice, char*, unsigned int);

constexpr NvmlReturn kNvmlSuccess = 0;
constexpr unsigned int kNvmlNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE

// Sets `model` from the GPUs' names, warning when a host mixes models (the first one is used).
void SetModel(const std::vector<std::string>& models, GpuHostInfo& info) {
  if (models.empty()) return;
  info.model = models.front();
  for (const std::string& model : models) {
    if (model != info.model) {
      info.warnings.push_back(
          absl::StrCat("GPUs of different models on one host (", info.model, ", ", model, "); using ", info.model));
      break;
    }
  }
}

// The GPUs NVML sees; nullopt when NVML is not loadable, does not initialise, or sees no GPU.
std::optional<GpuHostInfo> DetectWithNvml(std::vector<std::string>& warnings) {
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return std::nullopt;  // no NVIDIA driver: the usual case on TPU and CPU hosts
  auto init = reinterpret_cast<NvmlInitFn>(dlsym(library, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<NvmlShutdownFn>(dlsym(library, "nvmlShutdown"));
  auto get_count = reinterpret_cast<NvmlDeviceGetCountFn>(dlsym(library, "nvmlDeviceGetCount_v2"));
  auto get_handle = reinterpret_cast<NvmlDeviceGetHandleByIndexFn>(dlsym(library, "nvmlDeviceGetHandleByIndex_v2"));
  auto get_name = reinterpret_cast<NvmlDeviceGetNameFn>(dlsym(library, "nvmlDeviceGetName"));
  if (init == nullptr || shutdown == nullptr || get_count == nullptr || get_handle == nullptr || get_name == nullptr) {
    warnings.push_back("libnvidia-ml.so.1 lacks the NVML functions torus uses; counting /dev/nvidia* instead");
    dlclose(library);
    return std::nullopt;
  }
  if (NvmlReturn rc = init(); rc != kNvmlSuccess) {
    warnings.push_back(absl::StrCat("nvmlInit_v2 failed (NVML error ", rc, "); counting /dev/nvidia* instead"));
    dlclose(library);
    return std::nullopt;
  }
  std::optional<GpuHostInfo> result;
  unsigned int count = 0;
  if (NvmlReturn rc = get_count(&count); rc != kNvmlSuccess) {
    warnings.push_back(
        absl::StrCat("nvmlDeviceGetCount_v2 failed (NVML error ", rc, "); counting /dev/nvidia* instead"));
  } else if (count > 0) {
    result.emplace();
    result->count = static_cast<int>(count);
    result->source = "nvml";
    std::vector<std::string> models;
    for (unsigned int i = 0; i < count; ++i) {
      NvmlDevice device = nullptr;
      std::array<char, kNvmlNameBufferSize> name{};
      if (get_handle(i, &device) == kNvmlSuccess && get_name(device, name.data(), name.size()) == kNvmlSuccess) {
        name.back() = '\0';
        models.emplace_back(absl::StripAsciiWhitespace(name.data()));
      }
    }
    SetModel(models, *result);
  }
  shutdown();
  dlclose(library);
  return result;
}

// ---------------------------------------------------------------------------------------------------------------
// The device root: /dev/nvidia<N> per GPU, the model from the driver's proc files.

bool IsGpuDeviceNode(absl::string_view name) {
  // nvidiactl, nvidia-uvm and nvidia-modeset are driver nodes, not GPUs.
  if (!absl::ConsumePrefix(&name, "nvidia") || name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isdigit(c); });
}

std::vector<fs::path> SortedChildren(const fs::path& dir) {
  std::vector<fs::path> children;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) children.push_back(it->path());
  std::sort(children.begin(), children.end());
  return children;
}

// The "Model:" line of a driver information file, e.g. "Model: \t\t NVIDIA L4".
std::optional<std::string> ReadModel(const fs::path& information) {
  std::ifstream in(information);
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "Model:")) {
      rest = absl::StripAsciiWhitespace(rest);
      if (!rest.empty()) return std::string(rest);
    }
  }
  return std::nullopt;
}

GpuHostInfo DetectWithDevfs(const fs::path& root) {
  GpuHostInfo info;
  for (const fs::path& child : SortedChildren(root / "dev")) {
    if (IsGpuDeviceNode(child.filename().string())) ++info.count;
  }
  if (info.count == 0) return info;
  info.source = "devfs";
  std::vector<std::string> models;
  for (const fs::path& gpu : SortedChildren(root / "proc/driver/nvidia/gpus")) {
    if (std::optional<std::string> model = ReadModel(gpu / "information")) models.push_back(*model);
  }
  SetModel(models, info);
  return info;
}

// Data-centre GPUs Ray names (python/ray/util/accelerators/accelerators.py). Anything else, consumer cards
// included, gets no accelerator type rather than a misleading fragment such as "G" from "GeForce".
constexpr std::array<absl::string_view, 26> kKnownGpuTypes = {
    "K80",  "M60", "P4",  "P40", "P100", "V100", "T4",   "A10",  "A10G", "A16",   "A30",  "A40",  "A100",
    "A800", "L4",  "L20", "L40", "L40S", "H20",  "H100", "H200", "H800", "GH200", "B100", "B200", "GB200"};

}  // namespace

GpuHostInfo DetectGpus(const GpuDetectOptions& options) {
  std::vector<std::string> warnings;
  GpuHostInfo info;
  if (std::optional<GpuHostInfo> nvml = options.use_nvml ? DetectWithNvml(warnings) : std::nullopt) {
    info = *std::move(nvml);
  } else {
    info = DetectWithDevfs(fs::path(options.root));
  }
  info.warnings.insert(info.warnings.begin(), warnings.begin(), warnings.end());
  info.accelerator_type = GpuAcceleratorTypeFromModel(info.model);
  if (info.count > 0 && info.accelerator_type.empty()) {
    info.warnings.push_back(
        info.model.empty()
            ? absl::StrCat(info.count, " GPUs found but their model is unknown; no accelerator-type label")
            : absl::StrCat("GPU model \"", info.model, "\" has no known accelerator type; no accelerator-type label"));
  }
  return info;
}

std::string GpuAcceleratorTypeFromModel(const std::string& model) {
  // As Ray does, the type is the run of upper-case letters and digits opening the word after the vendor:
  // "NVIDIA A100-SXM4-40GB" -> "A100". Old drivers say "Tesla T4"; some say "NVIDIA Tesla V100".
  std::vector<absl::string_view> words = absl::StrSplit(model, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  size_t i = 0;
  while (i < words.size() &&
         (absl::EqualsIgnoreCase(words[i], "nvidia") || absl::EqualsIgnoreCase(words[i], "tesla"))) {
    ++i;
  }
  if (i == 0 || i == words.size()) return "";
  absl::string_view word = words[i];
  const size_t end = std::find_if(word.begin(), word.end(),
                                  [](char c) { return !absl::ascii_isupper(c) && !absl::ascii_isdigit(c); }) -
                     word.begin();
  const absl::string_view type = word.substr(0, end);
  for (absl::string_view known : kKnownGpuTypes) {
    if (type == known) return std::string(type);
  }
  return "";
}

}  // namespace torus
