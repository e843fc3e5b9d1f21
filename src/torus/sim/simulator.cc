#include "torus/sim/simulator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace torus::sim {

Simulator::Simulator(LoadSamplerOptions sampler, ChipModelOptions model, SimulatedMetricService* service,
                     TpuLog* log)
    : sampler_(std::move(sampler)), model_(model), service_(service), log_(log) {}

void Simulator::Tick(double now_seconds, int64_t unix_nanos) {
  std::vector<ChipLoad> loads = sampler_.Sample(now_seconds);
  service_->Publish(model_.Update(loads, now_seconds, unix_nanos));
  if (log_ != nullptr) {
    for (const std::string& line : HolderChanges(last_loads_, loads)) log_->Info(line);
  }
  last_loads_ = std::move(loads);
}

std::vector<std::string> HolderChanges(const std::vector<ChipLoad>& before, const std::vector<ChipLoad>& after) {
  std::vector<std::string> lines;
  static const std::vector<pid_t> kNone;
  for (size_t chip = 0; chip < after.size(); ++chip) {
    const std::vector<pid_t>& old_holders = chip < before.size() ? before[chip].holders : kNone;
    const std::vector<pid_t>& new_holders = after[chip].holders;
    for (pid_t pid : new_holders) {
      if (!std::binary_search(old_holders.begin(), old_holders.end(), pid)) {
        lines.push_back(absl::StrCat("TPU chip ", chip, " opened by pid ", pid));
      }
    }
    for (pid_t pid : old_holders) {
      if (!std::binary_search(new_holders.begin(), new_holders.end(), pid)) {
        lines.push_back(absl::StrCat("TPU chip ", chip, " released by pid ", pid));
      }
    }
  }
  return lines;
}

std::vector<std::string> StartupLines(TpuGeneration generation, int chips, const std::string& address) {
  const TpuGenerationInfo& info = GetGenerationInfo(generation);
  const int64_t total = HbmTotalBytesPerDevice(generation);
  std::vector<std::string> lines = {
      "torus-tpu-sim: SIMULATED libtpu for a torus local cluster; no TPU hardware is present and no values below "
      "are measured on a TPU",
      absl::StrCat("RuntimeMetricService serving on ", address, " (local credentials)"),
      absl::StrCat("Found ", chips, " TPU ", std::string(info.pod_prefix), " chip(s) (",
                   std::string(info.accelerator_type), ", ",
                   info.devices_per_chip, " device(s) per chip)")};
  for (int chip = 0; chip < chips; ++chip) {
    lines.push_back(absl::StrFormat("TPU chip %d: %s, HBM %.2f GiB per device", chip,
                                    std::string(info.accelerator_type), static_cast<double>(total) / (1 << 30)));
  }
  return lines;
}

}  // namespace torus::sim
