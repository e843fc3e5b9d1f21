// The well-known node label keys (reference/semantics.md §1).
#pragma once

#include <array>
#include <string_view>

namespace torus {

inline constexpr std::string_view kLabelPrefix = "torus.io/";
inline constexpr std::string_view kRayLabelPrefix = "ray.io/";

inline constexpr std::string_view kLabelNodeId = "torus.io/node-id";
inline constexpr std::string_view kLabelAcceleratorType = "torus.io/accelerator-type";
inline constexpr std::string_view kLabelTpuSliceName = "torus.io/tpu-slice-name";
inline constexpr std::string_view kLabelTpuWorkerId = "torus.io/tpu-worker-id";
inline constexpr std::string_view kLabelTpuTopology = "torus.io/tpu-topology";
inline constexpr std::string_view kLabelTpuPodType = "torus.io/tpu-pod-type";
inline constexpr std::string_view kLabelMarketType = "torus.io/market-type";
inline constexpr std::string_view kLabelNodeGroup = "torus.io/node-group";
inline constexpr std::string_view kLabelAvailabilityZone = "torus.io/availability-zone";
inline constexpr std::string_view kLabelAvailabilityRegion = "torus.io/availability-region";
// Chips per host of a TPU node; torus-internal, lets a slice's hosts be checked for agreement.
inline constexpr std::string_view kLabelTpuChipsPerHost = "torus.io/tpu-chips-per-host";

// The ten names that `ray.io/<name>` aliases to `torus.io/<name>`.
inline constexpr std::array<std::string_view, 10> kWellKnownLabelNames = {
    "node-id",     "accelerator-type", "tpu-slice-name", "tpu-worker-id",     "tpu-topology",
    "tpu-pod-type", "market-type",     "node-group",     "availability-zone", "availability-region"};

// The well-known keys a user may set through --labels / --labels-file (they win over the environment).
inline constexpr std::array<std::string_view, 4> kUserSettableWellKnownLabels = {
    kLabelMarketType, kLabelNodeGroup, kLabelAvailabilityZone, kLabelAvailabilityRegion};

}  // namespace torus
