#include "torus/accel/tpu_detect.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "torus/common/status.h"
#include "torus/common/well_known_labels.h"

namespace torus {
namespace {

namespace fs = std::filesystem;


// ---------------------------------------------------------------------------------------------------------------
// Device files.

std::optional<std::string> ReadTrimmedFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream contents;
  contents << in.rdbuf();
  return absl::AsciiStrToLower(absl::StripAsciiWhitespace(contents.str()));
}

// Entries of `dir` in name order (chip index = ascending name order, tpu.md §3); empty when it is missing.
std::vector<fs::directory_entry> SortedEntries(const fs::path& dir) {
  std::vector<fs::directory_entry> entries;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) entries.push_back(*it);
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.path().filename() < b.path().filename(); });
  return entries;
}

bool IsDirectory(const fs::directory_entry& entry) {
  std::error_code ec;
  return entry.is_directory(ec);  // follows symlinks, as a glob-then-isdir would
}

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(c); });
}

// What the device root says about the TPU chips of this host.
struct DeviceScan {
  int chips = 0;
  // PCI device id -> a device file that reported it, for generation and for the warning that names it.
  std::map<std::string, std::string> device_ids;
  std::vector<std::string> warnings;
};

// Records the PCI device id of a Google device when sysfs shows one.
void NoteDeviceId(const fs::path& pci_dir, DeviceScan& scan) {
  std::optional<std::string> id = ReadTrimmedFile(pci_dir / "device");
  if (id && !id->empty()) scan.device_ids.emplace(*id, (pci_dir / "device").string());
}

// v4 style: one /dev/accelN per chip. NVIDIA drivers >= 570 create a /dev/accel/ directory, which is skipped.
// The generation comes from sysfs' accel class when it is there.
void ScanAccelDevices(const fs::path& root, const fs::path& sys_root, DeviceScan& scan) {
  for (const fs::directory_entry& entry : SortedEntries(root / "dev")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("accel", 0) != 0 || IsDirectory(entry)) continue;
    ++scan.chips;
    const fs::path pci_dir = sys_root / "sys/class/accel" / name / "device";
    if (ReadTrimmedFile(pci_dir / "vendor") == kGoogleVendorId) NoteDeviceId(pci_dir, scan);
  }
}

// v5e and later: numeric /dev/vfio/<group>, kept when a device of the group is Google's. A chip is a PCI slot
// (domain:bus:device), so TPU7x's two functions per chip, each in its own group, count once.
void ScanVfioDevices(const fs::path& root, const fs::path& sys_root, DeviceScan& scan) {
  std::set<std::string> slots;
  for (const fs::directory_entry& group : SortedEntries(root / "dev/vfio")) {
    const std::string name = group.path().filename().string();
    if (!AllDigits(name)) continue;  // dev/vfio/vfio is the container device
    const fs::path devices = sys_root / "sys/kernel/iommu_groups" / name / "devices";
    for (const fs::directory_entry& device : SortedEntries(devices)) {
      if (ReadTrimmedFile(device.path() / "vendor") != kGoogleVendorId) continue;
      const std::string address = device.path().filename().string();  // "0000:00:04.0"
      slots.insert(address.substr(0, address.rfind('.')));
      NoteDeviceId(device.path(), scan);
    }
  }
  scan.chips = static_cast<int>(slots.size());
}

DeviceScan ScanTpuDevices(const fs::path& root, const fs::path& sys_root) {
  DeviceScan scan;
  ScanAccelDevices(root, sys_root, scan);
  if (scan.chips == 0) {
    scan.device_ids.clear();
    ScanVfioDevices(root, sys_root, scan);
  }
  return scan;
}

// The generation the device ids agree on; warnings for ids torus does not know and for mixed generations.
std::optional<TpuGeneration> DeviceGeneration(DeviceScan& scan) {
  std::set<TpuGeneration> generations;
  for (const auto& [id, file] : scan.device_ids) {
    std::optional<TpuGeneration> gen = GenerationFromPciDeviceId(id);
    if (gen) {
      generations.insert(*gen);
    } else {
      scan.warnings.push_back(absl::StrCat(file, " reports PCI device id ", id,
                                           ", which is not a supported TPU (v4, v5e, v5p, v6e, TPU7x)"));
    }
  }
  if (generations.empty()) return std::nullopt;
  if (generations.size() > 1) {
    std::vector<std::string> types;
    for (TpuGeneration gen : generations) types.emplace_back(GetGenerationInfo(gen).accelerator_type);
    scan.warnings.push_back(absl::StrCat("TPU devices of several generations on one host (", absl::StrJoin(types, ", "),
                                         "); using ", types.front()));
  }
  return *generations.begin();
}

// ---------------------------------------------------------------------------------------------------------------
// Environment and metadata.

// One fact and where it came from, so that errors name the variable the user has to fix.
struct Fact {
  std::string value;
  std::string source;  // "TPU_NAME" or "metadata attribute instance-id"
};

std::string Quote(absl::string_view s) { return absl::StrCat("\"", s, "\""); }

std::string Hosts(size_t n) { return absl::StrCat(n, n == 1 ? " host" : " hosts"); }

std::optional<std::string> EnvValue(const EnvMap& env, const std::string& key) {
  auto it = env.find(key);
  if (it == env.end()) return std::nullopt;
  std::string value(absl::StripAsciiWhitespace(it->second));
  if (value.empty()) return std::nullopt;
  return value;
}

std::optional<Fact> MetadataFact(MetadataSource* metadata, const std::string& key) {
  if (metadata == nullptr) return std::nullopt;
  std::optional<std::string> value = metadata->GetAttribute(key);
  if (!value) return std::nullopt;
  std::string trimmed(absl::StripAsciiWhitespace(*value));
  if (trimmed.empty()) return std::nullopt;
  return Fact{std::move(trimmed), absl::StrCat("metadata attribute ", key)};
}

// Env first, then metadata (tpu.md §3). Metadata is only asked when the env lacks the fact, since each lookup
// may cost a timeout.
std::optional<Fact> LookupFact(const EnvMap& env, MetadataSource* metadata, const std::string& env_key,
                               const std::string& metadata_key) {
  if (std::optional<std::string> value = EnvValue(env, env_key)) return Fact{*value, env_key};
  return MetadataFact(metadata, metadata_key);
}

bool SkipMetadataQuery(const EnvMap& env) {
  std::optional<std::string> value = EnvValue(env, "TPU_SKIP_MDS_QUERY");
  if (!value) return false;
  const std::string lower = absl::AsciiStrToLower(*value);
  return lower == "true" || lower == "1";
}

// `tpu-env` is a YAML-like block of `KEY: 'value'` lines; only TOPOLOGY matters here.
std::optional<Fact> TopologyFact(const EnvMap& env, MetadataSource* metadata) {
  if (std::optional<std::string> value = EnvValue(env, "TPU_TOPOLOGY")) return Fact{*value, "TPU_TOPOLOGY"};
  std::optional<Fact> tpu_env = MetadataFact(metadata, "tpu-env");
  if (!tpu_env) return std::nullopt;
  for (absl::string_view line : absl::StrSplit(tpu_env->value, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "TOPOLOGY:")) continue;
    line = absl::StripAsciiWhitespace(line);
    if (line.size() >= 2 && (line.front() == '\'' || line.front() == '"') && line.back() == line.front()) {
      line = line.substr(1, line.size() - 2);
    }
    if (line.empty()) return std::nullopt;
    return Fact{std::string(line), "metadata attribute tpu-env (TOPOLOGY)"};
  }
  return std::nullopt;
}

// Worker hostnames in worker-id order: TPU_WORKER_HOSTNAMES "h0,h1", else the IPs of metadata
// `worker-network-endpoints` "<a>:<b>:<ip>,..." (the third ':' field of each entry).
absl::StatusOr<std::optional<Fact>> HostnamesFact(const EnvMap& env, MetadataSource* metadata,
                                                  std::vector<std::string>& hostnames) {
  if (std::optional<std::string> value = EnvValue(env, "TPU_WORKER_HOSTNAMES")) {
    for (absl::string_view name : absl::StrSplit(*value, ',')) {
      name = absl::StripAsciiWhitespace(name);
      if (name.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("TPU_WORKER_HOSTNAMES ", Quote(*value),
                                                       " has an empty entry; accepted: comma-separated hostnames "
                                                       "in worker-id order, e.g. h0,h1,h2,h3"));
      }
      hostnames.emplace_back(name);
    }
    return std::optional<Fact>(Fact{*value, "TPU_WORKER_HOSTNAMES"});
  }
  std::optional<Fact> endpoints = MetadataFact(metadata, "worker-network-endpoints");
  if (!endpoints) return std::optional<Fact>();
  for (absl::string_view entry : absl::StrSplit(endpoints->value, ',')) {
    std::vector<absl::string_view> fields = absl::StrSplit(absl::StripAsciiWhitespace(entry), ':');
    if (fields.size() < 3 || absl::StripAsciiWhitespace(fields[2]).empty()) {
      return absl::InvalidArgumentError(absl::StrCat(endpoints->source, " entry ", Quote(entry),
                                                     " is invalid; accepted: comma-separated <id>:<name>:<ip> "
                                                     "entries in worker-id order"));
    }
    hostnames.emplace_back(absl::StripAsciiWhitespace(fields[2]));
  }
  return endpoints;
}

}  // namespace

absl::StatusOr<TpuHostInfo> DetectTpu(const TpuDetectOptions& options) {
  TpuHostInfo info;
  DeviceScan scan =
      ScanTpuDevices(fs::path(options.root), fs::path(options.sys_root.empty() ? options.root : options.sys_root));
  const std::optional<TpuGeneration> device_generation = DeviceGeneration(scan);
  info.chips = scan.chips;
  info.warnings = std::move(scan.warnings);

  MetadataSource* metadata = SkipMetadataQuery(options.env) ? nullptr : options.metadata;
  std::optional<Fact> pod_fact = LookupFact(options.env, metadata, "TPU_ACCELERATOR_TYPE", "accelerator-type");
  // A host with no TPU devices and no accelerator type is not a TPU host; asking the metadata server about the
  // remaining facts would only cost time (and on GCE give a slice name to a CPU VM).
  if (info.chips == 0 && !pod_fact) metadata = nullptr;

  // Pod type and generation. The declared type wins over the devices: on GKE the env is authoritative.
  std::optional<PodType> pod_type;
  if (pod_fact) {
    absl::StatusOr<PodType> parsed = ParsePodType(pod_fact->value);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(pod_fact->source, " ", Quote(pod_fact->value), " is invalid: ", parsed.status().message()));
    }
    pod_type = *parsed;
    info.generation = pod_type->generation;
    if (device_generation && *device_generation != pod_type->generation) {
      info.warnings.push_back(absl::StrCat(
          pod_fact->source, " ", Quote(pod_fact->value), " is ",
          std::string(GetGenerationInfo(pod_type->generation).accelerator_type), " but the TPU devices report ",
          std::string(GetGenerationInfo(*device_generation).accelerator_type), "; trusting ", pod_fact->source));
    }
  } else {
    info.generation = device_generation;
  }

  // Topology, validated for the generation; a missing pod type is computed from it.
  std::optional<Fact> topology_fact = TopologyFact(options.env, metadata);
  if (topology_fact && !info.generation) {
    info.warnings.push_back(absl::StrCat(topology_fact->source, " is ", Quote(topology_fact->value),
                                         " but the TPU generation is unknown (no accelerator type and no TPU "
                                         "device ids); the topology is ignored"));
  } else if (topology_fact) {
    absl::StatusOr<Topology> topology = ParseTopology(*info.generation, absl::AsciiStrToLower(topology_fact->value));
    if (!topology.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(topology_fact->source, " ", Quote(topology_fact->value),
                                                     " is invalid: ", topology.status().message()));
    }
    info.topology = *topology;
    const PodType computed = PodTypeFor(*info.generation, *topology);
    if (!pod_type) {
      pod_type = computed;
    } else if (computed.suffix != pod_type->suffix) {
      return absl::InvalidArgumentError(
          absl::StrCat(pod_fact->source, " ", Quote(pod_fact->value), " and ", topology_fact->source, " ",
                       Quote(topology_fact->value), " disagree: topology ", topology->ToString(), " is ",
                       computed.ToString(), "; accepted: a topology with as many chips as the pod type"));
    }
  } else if (pod_type) {
    // Several topologies share a pod type (v4-16 is 2x2x2; v6e-16 is 4x4 or 2x8), so none is guessed.
    info.warnings.push_back(absl::StrCat(pod_fact->source, " is ", Quote(pod_fact->value),
                                         " but no topology is known (TPU_TOPOLOGY, metadata tpu-env); the "
                                         "topology label is left unset"));
  }
  info.pod_type = pod_type;

  // Chips per host: the host's own count wins over the setting (tpu.md §2 rule 3). Hosts of the slice follow.
  std::optional<int> chips_per_host = options.chips_per_host;
  if (info.chips > 0) {
    if (chips_per_host && *chips_per_host != info.chips) {
      info.warnings.push_back(absl::StrCat("chips-per-host setting ", *chips_per_host, " ignored: this host has ",
                                           info.chips, " TPU chips"));
    }
    chips_per_host = info.chips;
  }
  std::optional<int> hosts;
  std::string shape_text;  // for messages: "v6e 4x4 with 4 chips per host"
  if (info.topology) {
    absl::StatusOr<SliceShape> shape = MakeSliceShape(*info.generation, *info.topology, chips_per_host);
    if (!shape.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TPU topology ", info.topology->ToString(), " of ", pod_type->ToString(), " does not fit this host",
          info.chips > 0 ? absl::StrCat(" with ", info.chips, " chips") : "", ": ", shape.status().message()));
    }
    hosts = shape->hosts;
    shape_text = absl::StrCat(pod_type->ToString(), " (", info.topology->ToString(), ") with ", shape->chips_per_host,
                              " chips per host");
  } else if (pod_type && chips_per_host && *chips_per_host > 0) {
    if (pod_type->Chips() % *chips_per_host != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          pod_fact->source, " ", Quote(pod_fact->value), " has ", pod_type->Chips(), " chips, which hosts of ",
          *chips_per_host, " chips cannot make up; accepted: a pod type of whole ", *chips_per_host, "-chip hosts"));
    }
    hosts = pod_type->Chips() / *chips_per_host;
    shape_text = absl::StrCat(pod_type->ToString(), " with ", *chips_per_host, " chips per host");
  }

  // Hostnames, then the worker id, which must index them.
  TORUS_ASSIGN_OR_RETURN(std::optional<Fact> hostnames_fact,
                         HostnamesFact(options.env, metadata, info.worker_hostnames));
  if (hostnames_fact && hosts && static_cast<int>(info.worker_hostnames.size()) != *hosts) {
    return absl::InvalidArgumentError(
        absl::StrCat(hostnames_fact->source, " lists ", Hosts(info.worker_hostnames.size()), " but ", shape_text,
                     " has ", *hosts, "; accepted: exactly ", *hosts, " comma-separated hostnames in worker-id order"));
  }
  if (!hosts && !info.worker_hostnames.empty()) hosts = static_cast<int>(info.worker_hostnames.size());

  if (std::optional<Fact> id_fact = LookupFact(options.env, metadata, "TPU_WORKER_ID", "agent-worker-number")) {
    int id = -1;
    if (!absl::SimpleAtoi(id_fact->value, &id) || id < 0 || (hosts && id >= *hosts)) {
      const std::string accepted =
          hosts ? absl::StrCat("an integer from 0 to ", *hosts - 1, " (the slice has ", Hosts(*hosts), ")")
                : std::string("a non-negative integer");
      return absl::InvalidArgumentError(
          absl::StrCat(id_fact->source, " ", Quote(id_fact->value), " is invalid; accepted: ", accepted));
    }
    info.worker_id = id;
  }

  // Slice name: the override, else TPU_NAME, else instance-id. It becomes a label value, so it must be one.
  std::optional<Fact> name_fact;
  if (options.slice_name_override && !options.slice_name_override->empty()) {
    name_fact = Fact{*options.slice_name_override, "slice name override"};
  } else {
    name_fact = LookupFact(options.env, metadata, "TPU_NAME", "instance-id");
  }
  if (name_fact) {
    if (absl::Status valid = ValidateLabelValue(kLabelTpuSliceName, name_fact->value); !valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_fact->source, " ", Quote(name_fact->value), " cannot name a slice: ", valid.message()));
    }
    info.slice_name = name_fact->value;
  }

  if (info.chips == 0 && (pod_fact || topology_fact)) {
    info.warnings.push_back(absl::StrCat(pod_fact ? pod_fact->source : topology_fact->source,
                                         " is set but no TPU devices were found under ", options.root,
                                         " (dev/accel*, dev/vfio); this host offers no TPU chips"));
  } else if (info.chips > 0 && !info.generation) {
    info.warnings.push_back(absl::StrCat(info.chips,
                                         " TPU chips found but their generation is unknown; set "
                                         "TPU_ACCELERATOR_TYPE"));
  }
  return info;
}

Labels TpuLabels(const TpuHostInfo& info) {
  Labels labels;
  if (info.chips <= 0) return labels;
  if (info.generation) {
    labels.emplace(kLabelAcceleratorType, std::string(GetGenerationInfo(*info.generation).accelerator_type));
  }
  if (!info.slice_name.empty()) labels.emplace(kLabelTpuSliceName, info.slice_name);
  if (info.worker_id) labels.emplace(kLabelTpuWorkerId, std::to_string(*info.worker_id));
  if (info.topology) labels.emplace(kLabelTpuTopology, absl::AsciiStrToLower(info.topology->ToString()));
  if (info.pod_type) labels.emplace(kLabelTpuPodType, info.pod_type->LabelString());
  labels.emplace(kLabelTpuChipsPerHost, std::to_string(info.chips));
  return labels;
}

}  // namespace torus
