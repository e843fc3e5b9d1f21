// TPU shapes: generations, accelerator types, pod types, topologies and the arithmetic between them
// (reference/tpu.md §§1–2). Pure functions; no I/O.
//
// Worked examples (tpu.md §2):
//   v6e 4x4      -> pod type v6e-16, 16 chips, 4 chips/host, 4 hosts, host bounds 2,2,1, wrap false,false,false
//   v4 2x2x2     -> pod type v4-16, 8 chips, 2 hosts, host bounds 1,1,2
//   v6e 2x4      -> v6e-8, 8 chips; one 8-chip host by default (host bounds 1,1,1), or 2 hosts with cph 4 (1,2,1)
//   v6e 16x16    -> v6e-256, 64 hosts, host bounds 8,8,1, wrap true,true,false
//   v5p 4x4x8    -> v5p-256, 128 chips, 32 hosts, host bounds 2,2,8, wrap true,true,true
//   tpu7x 2x2x1  -> tpu7x-8, 4 chips, 1 host
//
// Thread-safety: all functions are pure and thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace torus {

enum class TpuGeneration { kV4, kV5e, kV5p, kV6e, kTpu7x };

// Static facts of one generation (tpu.md §1).
struct TpuGenerationInfo {
  TpuGeneration generation;
  std::string_view accelerator_type;  // "TPU-V6E", "TPU-V5LITEPOD", "TPU-V7X"
  std::string_view pod_prefix;        // "v6e", "v5litepod", "tpu7x"
  std::string_view label_prefix;      // as in torus.io/tpu-pod-type: "v6e", "v5litepod", "v7x"
  int cores_per_chip;                 // pod-type suffix unit: 1 (v5e, v6e) or 2
  int devices_per_chip;               // libtpu devices per chip: 2 on TPU7x, else 1
  int topology_dims;                  // 2 (v5e, v6e) or 3
  int64_t hbm_bytes_per_chip;
  std::string_view pci_device_id;  // "0x006f"
};

const TpuGenerationInfo& GetGenerationInfo(TpuGeneration gen);
std::vector<TpuGeneration> AllGenerations();

// "TPU-V6E" (case-insensitive; "TPU-V5E" accepted for TPU-V5LITEPOD, "TPU-TPU7X" for TPU-V7X).
// Error names the accepted forms: `accelerator type "TPU-V9" is not supported; valid: TPU-V4, ...`.
// v2/v3 are rejected as unsupported.
absl::StatusOr<TpuGeneration> ParseAcceleratorType(std::string_view text);

// Generation from a PCI device id such as "0x006f" (as read from sysfs, with or without trailing newline).
std::optional<TpuGeneration> GenerationFromPciDeviceId(std::string_view device_id);

// A validated topology: 2 dims for v5e/v6e, 3 for the others.
struct Topology {
  std::vector<int> dims;
  int Chips() const;
  std::string ToString() const;  // "4x4", "2x2x2"
  bool operator==(const Topology&) const = default;
};

// Parses and validates a topology for a generation (tpu.md §1 valid lists; lower/upper case x, surrounding
// whitespace ignored). The error quotes the text as given and names every accepted form:
//   topology "3x3" is not valid for TPU-V6E; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16
//   topology "4x4x6" is not valid for TPU-V4; valid: 2x2x1, 2x2x2, 2x2x4, 2x4x4, or AxBxC with every dim a
//   multiple of 4, A<=12, B<=12, C<=16
absl::StatusOr<Topology> ParseTopology(TpuGeneration gen, std::string_view text);

// Whether `dims` is one of the generation's valid topologies (the rule behind ParseTopology).
bool IsValidTopology(TpuGeneration gen, const std::vector<int>& dims);

// The accepted topologies of a generation as error messages name them (the text after "valid: " above).
std::string ValidTopologiesText(TpuGeneration gen);

// A normalised pod type: "v6e-16", "v5litepod-8", "v4-16", "tpu7x-8".
struct PodType {
  TpuGeneration generation;
  int suffix;                       // cores (v4, v5p, TPU7x) or chips (v5e, v6e)
  std::string ToString() const;     // "v6e-16", "tpu7x-8"
  std::string LabelString() const;  // as torus.io/tpu-pod-type: "v6e-16", "v7x-8"
  int Chips() const;                // suffix / cores_per_chip
  bool operator==(const PodType&) const = default;
};

// Parses TPU_ACCELERATOR_TYPE / metadata `accelerator-type` forms: trims, lower-cases, maps a leading
// "tpu-v"/"tpu-"/"tpu" to "v"; "v5e-8" is read as v5litepod-8, "v7x-8"/"tpu7x-8" as TPU7x.
// Errors: an unknown or unsupported (v2, v3) prefix; a suffix that is not a positive whole number; an odd
// suffix where it counts cores (v4-15); a chip count no valid topology of the generation has (v6e-3).
absl::StatusOr<PodType> ParsePodType(std::string_view text);

// The pod type of a topology: prefix-(chips x cores_per_chip).
PodType PodTypeFor(TpuGeneration gen, const Topology& topology);

// Default chips per host for a topology when no host or setting says otherwise (tpu.md §2 rule 3).
int DefaultChipsPerHost(TpuGeneration gen, const Topology& topology);

// The chips a host of the generation can have (tpu.md §1): v5e, v6e 1, 4, 8; TPU7x 1, 4; v4, v5p 4.
std::vector<int> ValidChipsPerHost(TpuGeneration gen);

// Everything about a slice of one shape.
struct SliceShape {
  TpuGeneration generation;
  Topology topology;
  int chips_per_host;
  int chips;
  int hosts;
  std::vector<int> host_bounds;  // 3 values
  std::vector<bool> wrap;        // 3 values
  PodType pod_type;
};

// Builds a shape; chips_per_host defaults to DefaultChipsPerHost. Errors when the topology is not valid for the
// generation, when chips_per_host is not in ValidChipsPerHost, or when it does not divide the topology
// (hosts = chips / cph exact; a multi-host slice needs 4).
absl::StatusOr<SliceShape> MakeSliceShape(TpuGeneration gen, const Topology& topology,
                                          std::optional<int> chips_per_host = std::nullopt);

// "1,1,1" / "1,2,1" / "2,2,1" / "2,4,1" for 1, 2, 4, 8 chips (tpu.md §2 rule 5); error otherwise.
absl::StatusOr<std::string> ChipsPerHostBounds(int chips);

// "a,b,c" and "true,false,true" renderings.
std::string JoinInts(const std::vector<int>& v);
std::string JoinBools(const std::vector<bool>& v);

}  // namespace torus
