// ChipModel: turns the measured load of a simulated host's workers (LoadSampler) into the values libtpu would
// report for its chips: TensorCore duty cycle per chip, HBM used and total per device. Part of torus-tpu-sim, a
// simulator; the numbers are plausible, not a model of real TPU performance.
//
//   duty cycle (per chip)  = 0 when no process holds the chip; else
//                            clamp(smoothed(min(100, cpu_percent × duty_factor)) + noise, 0, 100), where noise is a
//                            small smooth function of time and chip (± noise_percent) and smoothing is an
//                            exponential moving average (weight `smoothing` for the new value)
//   HBM used (per device)  = 0 when not held; else min(total, total × hbm_base_fraction + rss × hbm_rss_factor),
//                            split evenly over the chip's devices
//   HBM total (per device) = what libtpu reports, below the spec sheet (tpu.md §8.7):
//                            v4 32 GiB, v5e 16 GiB, v5p 95 GiB, v6e 31.25 GiB, TPU7x 96 GiB (two devices a chip)
//
// Thread-safety: not thread-safe; owned by the sampling thread. TpuSnapshot is a plain value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/common/tpu_shape.h"
#include "torus/sim/load_sampler.h"

namespace torus::sim {

// One moment's metric values of a host.
struct TpuSnapshot {
  std::vector<double> duty_cycle_percent;  // per chip
  std::vector<int64_t> hbm_used_bytes;     // per device (device d belongs to chip d / devices_per_chip)
  std::vector<int64_t> hbm_total_bytes;    // per device
  int64_t unix_nanos = 0;                  // when it was taken
};

struct ChipModelOptions {
  TpuGeneration generation = TpuGeneration::kV6e;
  int chips = 4;
  double duty_factor = 0.9;
  double noise_percent = 2.0;
  double smoothing = 0.5;
  double hbm_base_fraction = 1.0 / 16;
  double hbm_rss_factor = 8.0;
};

class ChipModel {
 public:
  explicit ChipModel(ChipModelOptions options);

  // Folds in one sample of `loads` (one per chip) taken at monotonic time `now_seconds`; returns the values.
  // REQUIRES: loads.size() == chips.
  TpuSnapshot Update(const std::vector<ChipLoad>& loads, double now_seconds, int64_t unix_nanos);

  // The values before any load was seen: nothing held.
  TpuSnapshot Idle(int64_t unix_nanos) const;

 private:
  ChipModelOptions options_;
  std::vector<double> smoothed_duty_;  // per chip, before noise
};

// HBM bytes libtpu reports as a device's total, for a generation.
int64_t HbmTotalBytesPerDevice(TpuGeneration generation);

// "v6e", "v5e", "v5litepod", "v5p", "v4", "tpu7x", "v7x", or an accelerator type such as "TPU-V6E"
// (case-insensitive). The error names the accepted forms.
absl::StatusOr<TpuGeneration> ParseGeneration(const std::string& text);

}  // namespace torus::sim
