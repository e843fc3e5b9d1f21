// libFuzzer target for TPU shape text (docs/fuzzing.md): TPU_ACCELERATOR_TYPE / metadata `accelerator-type` forms,
// pod types and topologies, as GKE and users write them. The whole input is tried as each. Parsing may fail; it
// must never crash, and what parses prints (ToString, LabelString) and parses back equal, and the slices built from
// a parsed topology add up (hosts x chips per host = chips = the product of the dims; host bounds multiply to hosts).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "torus/common/tpu_shape.h"

namespace {

// Aborts, so that libFuzzer records the input, when a property that parsing promises does not hold.
void Require(bool condition) {
  if (!condition) std::abort();
}

void CheckPodType(const torus::PodType& pod_type) {
  Require(pod_type.Chips() > 0);
  absl::StatusOr<torus::PodType> printed = torus::ParsePodType(pod_type.ToString());
  Require(printed.ok() && *printed == pod_type);
  absl::StatusOr<torus::PodType> label = torus::ParsePodType(pod_type.LabelString());
  Require(label.ok() && *label == pod_type);
}

void CheckShape(torus::TpuGeneration gen, const torus::Topology& topology, std::optional<int> chips_per_host) {
  absl::StatusOr<torus::SliceShape> shape = torus::MakeSliceShape(gen, topology, chips_per_host);
  if (!shape.ok()) return;
  Require(shape->chips == topology.Chips() && shape->hosts * shape->chips_per_host == shape->chips);
  Require(shape->host_bounds.size() == 3 && shape->wrap.size() == 3);
  Require(shape->host_bounds[0] * shape->host_bounds[1] * shape->host_bounds[2] == shape->hosts);
  Require(shape->pod_type == torus::PodTypeFor(gen, topology));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  if (absl::StatusOr<torus::TpuGeneration> gen = torus::ParseAcceleratorType(input); gen.ok()) {
    absl::StatusOr<torus::TpuGeneration> again =
        torus::ParseAcceleratorType(torus::GetGenerationInfo(*gen).accelerator_type);
    Require(again.ok() && *again == *gen);
  }
  if (absl::StatusOr<torus::PodType> pod_type = torus::ParsePodType(input); pod_type.ok()) CheckPodType(*pod_type);

  for (torus::TpuGeneration gen : torus::AllGenerations()) {
    absl::StatusOr<torus::Topology> topology = torus::ParseTopology(gen, input);
    if (!topology.ok()) {
      Require(topology.status().code() == absl::StatusCode::kInvalidArgument);
      continue;
    }
    Require(static_cast<int>(topology->dims.size()) == torus::GetGenerationInfo(gen).topology_dims);
    Require(torus::IsValidTopology(gen, topology->dims) && topology->Chips() > 0);
    absl::StatusOr<torus::Topology> printed = torus::ParseTopology(gen, topology->ToString());
    Require(printed.ok() && *printed == *topology);
    CheckPodType(torus::PodTypeFor(gen, *topology));
    CheckShape(gen, *topology, std::nullopt);
    for (int chips_per_host : torus::ValidChipsPerHost(gen)) CheckShape(gen, *topology, chips_per_host);
  }
  return 0;
}
