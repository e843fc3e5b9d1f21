// Lays out the device files of a simulated accelerator host under a device root, in the shape DetectTpu and
// DetectGpus read (reference/tpu.md §3). Used by tests and by the CLI's simulated hosts, so that simulated
// hosts go through real detection rather than around it.
//
// Thread-safety: thread-safe; concurrent calls must use distinct roots.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "torus/common/tpu_shape.h"

namespace torus {

// Writes `chips` TPU chips of `gen` under `root` (created as needed):
//   v4:               dev/accel<i>, plus sys/class/accel/accel<i>/device/{vendor,device}
//   v5e, v5p, v6e:    dev/vfio/<i> and sys/kernel/iommu_groups/<i>/devices/0000:00:<i>.0/{vendor,device}
//   TPU7x:            two groups per chip, 2i and 2i+1, the PCI functions .0 and .1 of slot 0000:00:<i>
// vendor = "0x1ae0\n", device = the generation's PCI device id (tpu.md §1). Also writes dev/vfio/vfio, the
// container device every vfio host has and detection must skip. Files already under root are left in place.
// REQUIRES: 0 <= chips <= 32.
absl::Status WriteFakeTpuDevices(const std::string& root, TpuGeneration gen, int chips);

// Writes `count` NVIDIA GPUs under `root`: dev/nvidia<i>, dev/nvidiactl, and
// proc/driver/nvidia/gpus/0000:<i>:00.0/information holding "Model: \t <model>" as the driver prints it.
// REQUIRES: 0 <= count <= 256.
absl::Status WriteFakeGpuDevices(const std::string& root, int count, const std::string& model);

}  // namespace torus
