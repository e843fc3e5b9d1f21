#include "torus/accel/fake_host.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "torus/accel/tpu_detect.h"

namespace torus {
namespace {

namespace fs = std::filesystem;


absl::Status MakeDirs(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create directory ", dir.string(), ": ", ec.message()));
  return absl::OkStatus();
}

// Creates parent directories as needed and replaces any existing file.
absl::Status WriteFile(const fs::path& path, const std::string& contents) {
  if (absl::Status s = MakeDirs(path.parent_path()); !s.ok()) return s;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

absl::Status WritePciDevice(const fs::path& dir, absl::string_view device_id) {
  if (absl::Status s = WriteFile(dir / "vendor", absl::StrCat(kGoogleVendorId, "\n")); !s.ok()) return s;
  return WriteFile(dir / "device", absl::StrCat(device_id, "\n"));
}

// One vfio group holding one PCI function.
absl::Status WriteVfioGroup(const fs::path& root, int group, const std::string& pci_address,
                            absl::string_view device_id) {
  if (absl::Status s = WriteFile(root / "dev/vfio" / std::to_string(group), ""); !s.ok()) return s;
  return WritePciDevice(root / "sys/kernel/iommu_groups" / std::to_string(group) / "devices" / pci_address, device_id);
}

}  // namespace

absl::Status WriteFakeTpuDevices(const std::string& root, TpuGeneration gen, int chips) {
  if (chips < 0 || chips > 32) {
    return absl::InvalidArgumentError(absl::StrCat("fake TPU chip count ", chips, " is out of range; use 0..32"));
  }
  const fs::path base(root);
  const std::string device_id(GetGenerationInfo(gen).pci_device_id);
  if (absl::Status s = MakeDirs(base / "dev"); !s.ok()) return s;
  if (gen == TpuGeneration::kV4) {
    for (int i = 0; i < chips; ++i) {
      const std::string name = absl::StrCat("accel", i);
      if (absl::Status s = WriteFile(base / "dev" / name, ""); !s.ok()) return s;
      if (absl::Status s = WritePciDevice(base / "sys/class/accel" / name / "device", device_id); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (absl::Status s = WriteFile(base / "dev/vfio/vfio", ""); !s.ok()) return s;
  const int functions = gen == TpuGeneration::kTpu7x ? 2 : 1;
  for (int chip = 0; chip < chips; ++chip) {
    for (int fn = 0; fn < functions; ++fn) {
      const std::string address = absl::StrFormat("0000:00:%02x.%d", chip, fn);
      if (absl::Status s = WriteVfioGroup(base, chip * functions + fn, address, device_id); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status WriteFakeGpuDevices(const std::string& root, int count, const std::string& model) {
  if (count < 0 || count > 256) {
    return absl::InvalidArgumentError(absl::StrCat("fake GPU count ", count, " is out of range; use 0..256"));
  }
  const fs::path base(root);
  if (absl::Status s = MakeDirs(base / "dev"); !s.ok()) return s;
  if (count == 0) return absl::OkStatus();
  if (absl::Status s = WriteFile(base / "dev/nvidiactl", ""); !s.ok()) return s;
  for (int i = 0; i < count; ++i) {
    if (absl::Status s = WriteFile(base / "dev" / absl::StrCat("nvidia", i), ""); !s.ok()) return s;
    const std::string bus = absl::StrFormat("0000:%02x:00.0", i);
    const std::string information =
        absl::StrCat("Model: \t\t ", model, "\nIRQ:   \t\t 0\nBus Location: \t ", bus, "\n");
    if (absl::Status s = WriteFile(base / "proc/driver/nvidia/gpus" / bus / "information", information); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace torus
