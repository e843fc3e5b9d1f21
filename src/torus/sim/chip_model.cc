#include "torus/sim/chip_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace torus::sim {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

int DevicesPerChip(TpuGeneration generation) { return GetGenerationInfo(generation).devices_per_chip; }

// Smooth, deterministic wobble in [-1, 1]: two incommensurate sines, phase-shifted per chip.
double Wobble(double t, int chip) {
  return 0.6 * std::sin(0.9 * t + 1.7 * chip) + 0.4 * std::sin(2.3 * t + 0.5 * chip);
}

}  // namespace

int64_t HbmTotalBytesPerDevice(TpuGeneration generation) {
  switch (generation) {
    case TpuGeneration::kV4:
      return 32 * kGiB;
    case TpuGeneration::kV5e:
      return 16 * kGiB;
    case TpuGeneration::kV5p:
      return 95 * kGiB;
    case TpuGeneration::kV6e:
      return 31 * kGiB + kGiB / 4;  // 33554432000: v6e reads below its 32 GiB spec
    case TpuGeneration::kTpu7x:
      return 96 * kGiB;  // 192 GiB a chip, two devices
  }
  return 16 * kGiB;
}

absl::StatusOr<TpuGeneration> ParseGeneration(const std::string& text) {
  std::string upper = absl::AsciiStrToUpper(absl::StripAsciiWhitespace(text));
  if (upper.rfind("TPU-", 0) != 0) upper = "TPU-" + upper;
  auto parsed = ParseAcceleratorType(upper);
  if (parsed.ok()) return parsed;
  return absl::InvalidArgumentError(absl::StrCat("generation \"", text,
                                                 "\" is not known; use v4, v5e (v5litepod), v5p, v6e or tpu7x"));
}

ChipModel::ChipModel(ChipModelOptions options)
    : options_(options), smoothed_duty_(std::max(options.chips, 0), 0.0) {}

TpuSnapshot ChipModel::Idle(int64_t unix_nanos) const {
  const int devices = std::max(options_.chips, 0) * DevicesPerChip(options_.generation);
  TpuSnapshot snapshot;
  snapshot.duty_cycle_percent.assign(std::max(options_.chips, 0), 0.0);
  snapshot.hbm_used_bytes.assign(devices, 0);
  snapshot.hbm_total_bytes.assign(devices, HbmTotalBytesPerDevice(options_.generation));
  snapshot.unix_nanos = unix_nanos;
  return snapshot;
}

TpuSnapshot ChipModel::Update(const std::vector<ChipLoad>& loads, double now_seconds, int64_t unix_nanos) {
  TpuSnapshot snapshot = Idle(unix_nanos);
  const int per_chip = DevicesPerChip(options_.generation);
  const int64_t device_total = HbmTotalBytesPerDevice(options_.generation);
  for (int chip = 0; chip < options_.chips && chip < static_cast<int>(loads.size()); ++chip) {
    const ChipLoad& load = loads[chip];
    if (!load.held()) {
      smoothed_duty_[chip] = 0;  // libtpu's counters restart with the next holder
      continue;
    }
    const double target = std::min(100.0, load.cpu_percent * options_.duty_factor);
    smoothed_duty_[chip] += options_.smoothing * (target - smoothed_duty_[chip]);
    const double noise = options_.noise_percent * Wobble(now_seconds, chip);
    snapshot.duty_cycle_percent[chip] = std::clamp(smoothed_duty_[chip] + noise, 0.0, 100.0);

    const double chip_total = static_cast<double>(device_total) * per_chip;
    const double used = std::min(chip_total, chip_total * options_.hbm_base_fraction +
                                                 static_cast<double>(load.rss_bytes) * options_.hbm_rss_factor);
    for (int d = 0; d < per_chip; ++d) {
      snapshot.hbm_used_bytes[chip * per_chip + d] = std::min(device_total, static_cast<int64_t>(used / per_chip));
    }
  }
  return snapshot;
}

}  // namespace torus::sim
