// libFuzzer target for GPU detection from the NVIDIA driver's files (docs/fuzzing.md): the "Model:" line of
// proc/driver/nvidia/gpus/*/information and the accelerator type read from the model name.
//
// Input: the first byte is the GPU count (1 to 4); the rest, split at NUL bytes, are the GPUs' information files
// (a GPU without a piece has none). They are written under a device root of the process's own, read back by
// DetectGpus (NVML off), and the whole input is also given to GpuAcceleratorTypeFromModel. Detection never fails; it
// must never crash, count the GPUs of the root, keep a model as one trimmed line, and give an accelerator type that
// is "" or a run of upper-case letters and digits (a valid label value), the one the model names.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "torus/accel/gpu_detect.h"

namespace {

namespace fs = std::filesystem;

constexpr int kMaxGpus = 4;

// Aborts, so that libFuzzer records the input, when a property that detection promises does not hold.
void Require(bool condition) {
  if (!condition) std::abort();
}

void CheckType(const std::string& type) {
  for (char c : type) Require(absl::ascii_isupper(c) || absl::ascii_isdigit(c));
}

fs::path* root = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  root = new fs::path(fs::temp_directory_path() / absl::StrCat("gpu_detect_fuzz.", getpid()));
  fs::create_directories(*root / "dev");
  for (int i = 0; i < kMaxGpus; ++i) {
    fs::create_directories(*root / "proc/driver/nvidia/gpus" / absl::StrCat("0000:0", i, ":00.0"));
  }
  std::atexit([] { fs::remove_all(*root); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const absl::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  CheckType(torus::GpuAcceleratorTypeFromModel(std::string(text)));

  const int count = data[0] % kMaxGpus + 1;
  std::vector<absl::string_view> files = absl::StrSplit(text, '\0');
  for (int i = 0; i < kMaxGpus; ++i) {
    const fs::path node = *root / "dev" / absl::StrCat("nvidia", i);
    const fs::path information = *root / "proc/driver/nvidia/gpus" / absl::StrCat("0000:0", i, ":00.0") / "information";
    std::error_code ec;
    fs::remove(node, ec);
    fs::remove(information, ec);
    if (i >= count) continue;
    std::ofstream(node).close();
    if (i < static_cast<int>(files.size())) std::ofstream(information, std::ios::binary) << files[i];
  }

  torus::GpuDetectOptions options;
  options.root = root->string();
  options.use_nvml = false;
  const torus::GpuHostInfo info = torus::DetectGpus(options);
  Require(info.count == count && info.source == "devfs");
  Require(info.model.find('\n') == std::string::npos);
  Require(info.model == std::string(absl::StripAsciiWhitespace(info.model)));
  CheckType(info.accelerator_type);
  Require(info.accelerator_type == torus::GpuAcceleratorTypeFromModel(info.model));
  return 0;
}
