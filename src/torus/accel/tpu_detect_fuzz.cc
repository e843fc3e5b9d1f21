// libFuzzer target for TPU detection from what GKE and GCE say (docs/fuzzing.md): the environment
// (TPU_ACCELERATOR_TYPE, TPU_TOPOLOGY, TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, TPU_NAME, TPU_SKIP_MDS_QUERY, ...) and the
// metadata server's attributes (accelerator-type, tpu-env, worker-network-endpoints, agent-worker-number,
// instance-id).
//
// Input: the first byte picks a device root laid out at start-up (no chips, or chips of one generation) and the
// second the chips-per-host setting; then lines, "KEY=VALUE" for the environment and "@key=value" for a metadata
// attribute, where "\n" in a value stands for a newline (tpu-env is several lines).
// DetectTpu may fail, with InvalidArgument; it must never crash, and what it detects is consistent: the root's chip
// count, a pod type and topology that print and parse back, a worker id within the hostnames, and labels that are
// valid label keys and values.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "torus/accel/fake_host.h"
#include "torus/accel/tpu_detect.h"
#include "torus/common/labels.h"

namespace {

// Aborts, so that libFuzzer records the input, when a property that detection promises does not hold.
void Require(bool condition) {
  if (!condition) std::abort();
}

struct DeviceRoot {
  std::string path;
  int chips = 0;
};

// Laid out once per process, in a directory of its own (two fuzzers may run at once).
std::vector<DeviceRoot>* roots = nullptr;

class FakeMetadata : public torus::MetadataSource {
 public:
  explicit FakeMetadata(std::map<std::string, std::string> attributes) : attributes_(std::move(attributes)) {}
  std::optional<std::string> GetAttribute(const std::string& key) override {
    auto it = attributes_.find(key);
    if (it == attributes_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::map<std::string, std::string> attributes_;
};

void CheckInfo(const torus::TpuHostInfo& info, int root_chips) {
  Require(info.chips == root_chips);
  if (info.pod_type) {
    Require(info.generation && info.pod_type->generation == *info.generation);
    absl::StatusOr<torus::PodType> again = torus::ParsePodType(info.pod_type->ToString());
    Require(again.ok() && *again == *info.pod_type);
  }
  if (info.topology) {
    Require(info.generation && info.pod_type);
    Require(torus::PodTypeFor(*info.generation, *info.topology) == *info.pod_type);
    absl::StatusOr<torus::Topology> again = torus::ParseTopology(*info.generation, info.topology->ToString());
    Require(again.ok() && *again == *info.topology);
  }
  for (const std::string& host : info.worker_hostnames) Require(!host.empty());
  if (info.worker_id) {
    Require(*info.worker_id >= 0);
    if (!info.worker_hostnames.empty()) Require(*info.worker_id < static_cast<int>(info.worker_hostnames.size()));
  }
  for (const auto& [key, value] : torus::TpuLabels(info)) {
    Require(torus::ValidateLabelKey(key).ok());
    Require(torus::ValidateLabelValue(key, value).ok());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  namespace fs = std::filesystem;
  const fs::path base = fs::temp_directory_path() / absl::StrCat("tpu_detect_fuzz.", getpid());
  roots = new std::vector<DeviceRoot>;
  const std::vector<std::pair<std::optional<torus::TpuGeneration>, int>> layouts = {
      {std::nullopt, 0},
      {torus::TpuGeneration::kV4, 4},
      {torus::TpuGeneration::kV5e, 1},
      {torus::TpuGeneration::kV6e, 4},
      {torus::TpuGeneration::kV6e, 8},
      {torus::TpuGeneration::kV5p, 4},
      {torus::TpuGeneration::kTpu7x, 4},
  };
  for (size_t i = 0; i < layouts.size(); ++i) {
    const std::string path = (base / absl::StrCat("root", i)).string();
    fs::create_directories(path);
    if (layouts[i].first) {
      if (!torus::WriteFakeTpuDevices(path, *layouts[i].first, layouts[i].second).ok()) std::abort();
    }
    roots->push_back({path, layouts[i].second});
  }
  // The roots are only read; they are removed when the process exits normally.
  std::atexit([] { std::filesystem::remove_all(std::filesystem::temp_directory_path() /
                                               absl::StrCat("tpu_detect_fuzz.", getpid())); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const DeviceRoot& root = (*roots)[data[0] % roots->size()];
  torus::TpuDetectOptions options;
  options.root = root.path;
  if (data[1] % 10 != 0) options.chips_per_host = data[1] % 10 - 1;  // 0..8, or unset

  std::map<std::string, std::string> attributes;
  const absl::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const bool metadata = !line.empty() && line.front() == '@';
    if (metadata) line.remove_prefix(1);
    const size_t equals = line.find('=');
    if (equals == absl::string_view::npos) continue;
    std::string key(line.substr(0, equals));
    std::string value(line.substr(equals + 1));
    if (metadata) {
      attributes[key] = absl::StrReplaceAll(value, {{"\\n", "\n"}});
    } else {
      options.env[key] = value;
    }
  }
  FakeMetadata source(attributes);
  options.metadata = &source;

  absl::StatusOr<torus::TpuHostInfo> info = torus::DetectTpu(options);
  if (!info.ok()) {
    Require(info.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  CheckInfo(*info, root.chips);
  return 0;
}
