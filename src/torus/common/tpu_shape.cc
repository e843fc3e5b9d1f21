#include "torus/common/tpu_shape.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/strings.h"

namespace torus {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// Indexed by TpuGeneration; tpu.md §1.
constexpr std::array<TpuGenerationInfo, 5> kGenerations = {{
    {TpuGeneration::kV4, "TPU-V4", "v4", "v4", 2, 1, 3, 32 * kGiB, "0x005e"},
    {TpuGeneration::kV5e, "TPU-V5LITEPOD", "v5litepod", "v5litepod", 1, 1, 2, 16 * kGiB, "0x0063"},
    {TpuGeneration::kV5p, "TPU-V5P", "v5p", "v5p", 2, 1, 3, 95 * kGiB, "0x0062"},
    {TpuGeneration::kV6e, "TPU-V6E", "v6e", "v6e", 1, 1, 2, 32 * kGiB, "0x006f"},
    {TpuGeneration::kTpu7x, "TPU-V7X", "tpu7x", "v7x", 2, 2, 3, 192 * kGiB, "0x0076"},
}};

constexpr bool GenerationsInEnumOrder() {
  for (size_t i = 0; i < kGenerations.size(); ++i) {
    if (static_cast<size_t>(kGenerations[i].generation) != i) return false;
  }
  return true;
}
static_assert(GenerationsInEnumOrder(), "GetGenerationInfo indexes kGenerations by TpuGeneration");

// The named topologies of each generation (tpu.md §1). v4 and v5p also take larger shapes by rule.
constexpr std::array<std::string_view, 4> kV4V5pNamed = {"2x2x1", "2x2x2", "2x2x4", "2x4x4"};
constexpr std::array<std::string_view, 9> kV5eV6eNamed = {"1x1", "2x2", "2x4",  "2x8",  "4x4",
                                                          "4x8", "8x8", "8x16", "16x16"};
constexpr std::array<std::string_view, 11> kTpu7xNamed = {"1x1x1", "2x2x1", "2x2x2", "2x2x4",  "2x4x4",  "4x4x4",
                                                          "4x4x8", "4x8x8", "8x8x8", "8x8x16", "8x16x16"};

// Upper bounds of the "every dim a multiple of 4" rule for v4 and v5p.
struct MultipleOfFourBounds {
  int a, b, c;
};

std::optional<MultipleOfFourBounds> LargeShapeBounds(TpuGeneration gen) {
  switch (gen) {
    case TpuGeneration::kV4:
      return MultipleOfFourBounds{12, 12, 16};
    case TpuGeneration::kV5p:
      return MultipleOfFourBounds{16, 16, 24};
    default:
      return std::nullopt;
  }
}

std::vector<std::string_view> NamedTopologies(TpuGeneration gen) {
  switch (gen) {
    case TpuGeneration::kV4:
    case TpuGeneration::kV5p:
      return {kV4V5pNamed.begin(), kV4V5pNamed.end()};
    case TpuGeneration::kV5e:
    case TpuGeneration::kV6e:
      return {kV5eV6eNamed.begin(), kV5eV6eNamed.end()};
    case TpuGeneration::kTpu7x:
      return {kTpu7xNamed.begin(), kTpu7xNamed.end()};
  }
  return {};
}

// absl here predates its std::string_view alias, so the two types are converted by hand.
std::string_view AsStd(absl::string_view s) { return std::string_view(s.data(), s.size()); }

std::string_view Trim(std::string_view s) { return AsStd(absl::StripAsciiWhitespace(AbslView(s))); }

// A positive decimal number of digits only ("+4", "-4", "4.0" and "" are rejected). Nine digits at most, so it
// cannot overflow; no TPU dimension or pod-type suffix comes close.
std::optional<int> ParsePositiveInt(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int value = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  if (value <= 0) return std::nullopt;
  return value;
}

// Splits "4x4x8" / "4X4X8" into dims; nullopt when any part is not a positive number.
std::optional<std::vector<int>> SplitDims(std::string_view text) {
  std::vector<int> dims;
  size_t start = 0;
  while (true) {
    size_t end = text.find_first_of("xX", start);
    std::optional<int> dim =
        ParsePositiveInt(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (!dim) return std::nullopt;
    dims.push_back(*dim);
    if (end == std::string_view::npos) return dims;
    start = end + 1;
  }
}

std::string DimsToString(const std::vector<int>& dims) { return absl::StrJoin(dims, "x"); }

// Every valid topology of a generation, so a pod type's chip count can be checked against them.
std::vector<std::vector<int>> AllValidTopologies(TpuGeneration gen) {
  std::vector<std::vector<int>> all;
  for (std::string_view named : NamedTopologies(gen)) all.push_back(*SplitDims(named));
  if (std::optional<MultipleOfFourBounds> b = LargeShapeBounds(gen)) {
    for (int x = 4; x <= b->a; x += 4) {
      for (int y = 4; y <= b->b; y += 4) {
        for (int z = 4; z <= b->c; z += 4) all.push_back({x, y, z});
      }
    }
  }
  return all;
}

int Product(const std::vector<int>& v) {
  int p = 1;
  for (int d : v) p *= d;
  return p;
}

std::string TopologyError(TpuGeneration gen, std::string_view text) {
  return absl::StrCat("topology \"", std::string(text), "\" is not valid for ",
                      std::string(GetGenerationInfo(gen).accelerator_type), "; valid: ", ValidTopologiesText(gen));
}

constexpr char kPodTypePrefixes[] = "v4, v5litepod (or v5e), v5p, v6e, tpu7x (or v7x)";

absl::Status PodTypeError(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("pod type \"", std::string(text), "\" ", std::string(why)));
}

// Pod-type prefixes after normalisation ("tpu7x" has become "v7x" by then).
std::optional<TpuGeneration> GenerationFromPodPrefix(std::string_view prefix) {
  if (prefix == "v4") return TpuGeneration::kV4;
  if (prefix == "v5litepod" || prefix == "v5e") return TpuGeneration::kV5e;
  if (prefix == "v5p") return TpuGeneration::kV5p;
  if (prefix == "v6e") return TpuGeneration::kV6e;
  if (prefix == "v7x") return TpuGeneration::kTpu7x;
  return std::nullopt;
}

// tpu.md §2 rule 5: the extent of a 1-, 2-, 4- or 8-chip block along x, y, z.
std::optional<std::vector<int>> ChipsPerHostBoundsDims(int chips) {
  switch (chips) {
    case 1:
      return std::vector<int>{1, 1, 1};
    case 2:
      return std::vector<int>{1, 2, 1};
    case 4:
      return std::vector<int>{2, 2, 1};
    case 8:
      return std::vector<int>{2, 4, 1};
  }
  return std::nullopt;
}

}  // namespace

const TpuGenerationInfo& GetGenerationInfo(TpuGeneration gen) { return kGenerations[static_cast<int>(gen)]; }

std::vector<TpuGeneration> AllGenerations() {
  std::vector<TpuGeneration> all;
  for (const TpuGenerationInfo& info : kGenerations) all.push_back(info.generation);
  return all;
}

absl::StatusOr<TpuGeneration> ParseAcceleratorType(std::string_view text) {
  const std::string upper = absl::AsciiStrToUpper(AbslView(Trim(text)));
  for (const TpuGenerationInfo& info : kGenerations) {
    if (upper == info.accelerator_type) return info.generation;
  }
  // Other spellings that name the same generations.
  if (upper == "TPU-V5E") return TpuGeneration::kV5e;
  if (upper == "TPU-TPU7X") return TpuGeneration::kTpu7x;

  std::vector<std::string> valid;
  for (const TpuGenerationInfo& info : kGenerations) valid.emplace_back(info.accelerator_type);
  if (upper == "TPU-V2" || upper == "TPU-V3") {
    return absl::InvalidArgumentError(
        absl::StrCat("accelerator type \"", std::string(text),
                     "\" is not supported: TPU v2 and v3 are too old for torus; valid: ", absl::StrJoin(valid, ", ")));
  }
  return absl::InvalidArgumentError(absl::StrCat("accelerator type \"", std::string(text),
                                                 "\" is not supported; valid: ", absl::StrJoin(valid, ", ")));
}

std::optional<TpuGeneration> GenerationFromPciDeviceId(std::string_view device_id) {
  const std::string id = absl::AsciiStrToLower(AbslView(Trim(device_id)));
  for (const TpuGenerationInfo& info : kGenerations) {
    if (id == info.pci_device_id) return info.generation;
  }
  return std::nullopt;
}

int Topology::Chips() const { return Product(dims); }

std::string Topology::ToString() const { return DimsToString(dims); }

bool IsValidTopology(TpuGeneration gen, const std::vector<int>& dims) {
  if (static_cast<int>(dims.size()) != GetGenerationInfo(gen).topology_dims) return false;
  const std::string text = DimsToString(dims);
  for (std::string_view named : NamedTopologies(gen)) {
    if (text == named) return true;
  }
  if (std::optional<MultipleOfFourBounds> b = LargeShapeBounds(gen)) {
    const bool multiples = std::all_of(dims.begin(), dims.end(), [](int d) { return d > 0 && d % 4 == 0; });
    return multiples && dims[0] <= b->a && dims[1] <= b->b && dims[2] <= b->c;
  }
  return false;
}

std::string ValidTopologiesText(TpuGeneration gen) {
  std::string text = absl::StrJoin(NamedTopologies(gen), ", ",
                                   [](std::string* out, std::string_view s) { out->append(s.data(), s.size()); });
  if (std::optional<MultipleOfFourBounds> b = LargeShapeBounds(gen)) {
    absl::StrAppend(&text, ", or AxBxC with every dim a multiple of 4, A<=", b->a, ", B<=", b->b, ", C<=", b->c);
  }
  return text;
}

absl::StatusOr<Topology> ParseTopology(TpuGeneration gen, std::string_view text) {
  std::optional<std::vector<int>> dims = SplitDims(Trim(text));
  if (!dims || !IsValidTopology(gen, *dims)) return absl::InvalidArgumentError(TopologyError(gen, text));
  return Topology{*std::move(dims)};
}

std::string PodType::ToString() const {
  return absl::StrCat(std::string(GetGenerationInfo(generation).pod_prefix), "-", suffix);
}

std::string PodType::LabelString() const {
  return absl::StrCat(std::string(GetGenerationInfo(generation).label_prefix), "-", suffix);
}

int PodType::Chips() const { return suffix / GetGenerationInfo(generation).cores_per_chip; }

absl::StatusOr<PodType> ParsePodType(std::string_view text) {
  std::string s = absl::AsciiStrToLower(AbslView(Trim(text)));
  // tpu.md §3: "tpu-v6e-16" and "tpu7x-8" become "v6e-16" and "v7x-8".
  for (std::string_view lead : {"tpu-v", "tpu-", "tpu"}) {
    if (s.rfind(lead, 0) == 0) {
      s = absl::StrCat("v", s.substr(lead.size()));
      break;
    }
  }
  const size_t dash = s.find('-');
  const std::string_view prefix = std::string_view(s).substr(0, dash);
  if (prefix == "v2" || prefix == "v3") {
    return PodTypeError(text, absl::StrCat("is not supported: TPU v2 and v3 are too old for torus; valid prefixes: ",
                                           kPodTypePrefixes));
  }
  std::optional<TpuGeneration> gen = GenerationFromPodPrefix(prefix);
  if (dash == std::string::npos || !gen) {
    return PodTypeError(
        text, absl::StrCat("is not valid; expected <prefix>-<number> such as v6e-16, with prefix ", kPodTypePrefixes));
  }
  const TpuGenerationInfo& info = GetGenerationInfo(*gen);
  std::optional<int> suffix = ParsePositiveInt(std::string_view(s).substr(dash + 1));
  if (!suffix) {
    return PodTypeError(text, absl::StrCat("is not valid: the number after \"", std::string(prefix),
                                           "-\" must be a positive whole number"));
  }
  if (*suffix % info.cores_per_chip != 0) {
    return PodTypeError(text,
                        absl::StrCat("is not valid: ", std::string(info.accelerator_type), " pod types count cores, ",
                                     info.cores_per_chip, " per chip, so the number must be even"));
  }
  PodType pod_type{*gen, *suffix};
  // A pod type names a slice, so some valid topology must have its chip count.
  const int chips = pod_type.Chips();
  const std::vector<std::vector<int>> topologies = AllValidTopologies(*gen);
  if (std::none_of(topologies.begin(), topologies.end(),
                   [chips](const std::vector<int>& dims) { return Product(dims) == chips; })) {
    return PodTypeError(text,
                        absl::StrCat("is not valid: no ", std::string(info.accelerator_type), " topology has ", chips,
                                     chips == 1 ? " chip" : " chips", "; valid: ", ValidTopologiesText(*gen)));
  }
  return pod_type;
}

PodType PodTypeFor(TpuGeneration gen, const Topology& topology) {
  return PodType{gen, topology.Chips() * GetGenerationInfo(gen).cores_per_chip};
}

int DefaultChipsPerHost(TpuGeneration gen, const Topology& topology) {
  switch (gen) {
    case TpuGeneration::kV5e:
    case TpuGeneration::kV6e:
      // 2x4 is one 8-chip VM or two 4-chip VMs; one 8-chip host is the default (tpu.md §2 rule 3).
      if (topology.Chips() == 1) return 1;
      if (topology.dims == std::vector<int>{2, 4}) return 8;
      return 4;
    case TpuGeneration::kTpu7x:
      return topology.Chips() == 1 ? 1 : 4;
    case TpuGeneration::kV4:
    case TpuGeneration::kV5p:
      return 4;
  }
  return 4;
}

std::vector<int> ValidChipsPerHost(TpuGeneration gen) {
  switch (gen) {
    case TpuGeneration::kV5e:
    case TpuGeneration::kV6e:
      return {1, 4, 8};
    case TpuGeneration::kTpu7x:
      return {1, 4};
    case TpuGeneration::kV4:
    case TpuGeneration::kV5p:
      return {4};
  }
  return {4};
}

absl::StatusOr<std::string> ChipsPerHostBounds(int chips) {
  std::optional<std::vector<int>> bounds = ChipsPerHostBoundsDims(chips);
  if (!bounds) {
    return absl::InvalidArgumentError(
        absl::StrCat("no chips-per-host bounds for ", chips, " chips; a host or worker has 1, 2, 4 or 8 chips"));
  }
  return JoinInts(*bounds);
}

absl::StatusOr<SliceShape> MakeSliceShape(TpuGeneration gen, const Topology& topology,
                                          std::optional<int> chips_per_host) {
  const TpuGenerationInfo& info = GetGenerationInfo(gen);
  const std::string accel(info.accelerator_type);
  if (!IsValidTopology(gen, topology.dims)) {
    return absl::InvalidArgumentError(TopologyError(gen, topology.ToString()));
  }
  const int cph = chips_per_host.value_or(DefaultChipsPerHost(gen, topology));
  const std::vector<int> valid_cph = ValidChipsPerHost(gen);
  if (std::find(valid_cph.begin(), valid_cph.end(), cph) == valid_cph.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chips per host ", cph, " is not valid for ", accel, "; valid: ", absl::StrJoin(valid_cph, ", ")));
  }
  const int chips = topology.Chips();
  if (chips % cph != 0) {
    return absl::InvalidArgumentError(absl::StrCat(accel, " ", topology.ToString(), " has ", chips,
                                                   chips == 1 ? " chip" : " chips", ", not a whole number of ", cph,
                                                   "-chip hosts"));
  }
  const int hosts = chips / cph;
  if (hosts > 1 && cph != 4) {
    return absl::InvalidArgumentError(absl::StrCat(accel, " ", topology.ToString(), " on ", cph,
                                                   "-chip hosts would span ", hosts,
                                                   " hosts; multi-host slices use 4-chip hosts"));
  }
  // tpu.md §2 rule 6: pad 2D shapes with z=1, divide each axis by the host's extent along it.
  std::vector<int> padded = topology.dims;
  padded.resize(3, 1);
  // Every valid chips-per-host value has bounds.
  const std::vector<int> cph_bounds = *ChipsPerHostBoundsDims(cph);
  std::vector<int> host_bounds(3);
  for (int i = 0; i < 3; ++i) {
    if (padded[i] % cph_bounds[i] != 0) {
      return absl::InvalidArgumentError(absl::StrCat(accel, " ", topology.ToString(), " cannot be tiled by hosts of ",
                                                     cph, " chips (", JoinInts(cph_bounds), ")"));
    }
    host_bounds[i] = padded[i] / cph_bounds[i];
  }

  // tpu.md §2 rule 7: the 3D generations wrap on every axis once the slice is a full torus (every dim >= 4);
  // v5e/v6e wrap an axis only at the full pod's 16.
  std::vector<bool> wrap(3, false);
  if (info.topology_dims == 3) {
    const bool all_wrap = std::all_of(padded.begin(), padded.end(), [](int d) { return d >= 4; });
    wrap.assign(3, all_wrap);
  } else {
    for (int i = 0; i < 2; ++i) wrap[i] = padded[i] == 16;
  }

  return SliceShape{
      gen, topology, cph, chips, hosts, std::move(host_bounds), std::move(wrap), PodTypeFor(gen, topology)};
}

std::string JoinInts(const std::vector<int>& v) { return absl::StrJoin(v, ","); }

std::string JoinBools(const std::vector<bool>& v) {
  return absl::StrJoin(v, ",", [](std::string* out, bool b) { out->append(b ? "true" : "false"); });
}

}  // namespace torus
