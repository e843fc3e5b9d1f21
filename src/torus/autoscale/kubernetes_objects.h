// The Kubernetes objects of one slice, as the kubernetes provider creates them in a GKE cluster: one Pod per host of
// the slice, each taking a whole TPU VM of a node pool of the slice's shape, and a headless Service that gives the
// hosts stable names (<slice>-w<i>.<slice>.<namespace>.svc) in worker-id order.
//
// A host's pod (reference/tpu.md "Capacity classes and node pools on GKE"):
//   - requests = limits of google.com/tpu (the chips per host), CPU and memory as the node type gives them;
//   - node selectors cloud.google.com/gke-tpu-accelerator (tpu-v6e-slice, ...) and gke-tpu-topology, the toleration
//     of google.com/tpu, and per capacity class: spot (gke-spot: "true", tolerating its taint), flex-start
//     (gke-flex-start: "true", tolerating gke-queued), reserved (reservation-name), on-demand (nothing more);
//   - required pod affinity to the slice's other pods and anti-affinity to other slices' pods, both on
//     cloud.google.com/gke-nodepool: a slice's hosts are one node pool, which GKE creates and removes whole;
//   - the torus-node agent of the torus image, with the environment GKE's webhook would give a TPU pod of a slice
//     (TPU_NAME, TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, ...) and the cluster token from a Secret; when the head serves
//     TLS (provider.tls), the cluster CA and the join token from provider.tls_secret (its keys ca.crt and join_token
//     only: the CA's key never leaves the head).
// Labels: app.kubernetes.io/managed-by: torus-autoscaler, torus.io/slice, torus.io/node-type,
// torus.io/capacity-class (and torus.io/worker-id on pods); annotation torus.io/launched-ms.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nlohmann/json.hpp"
#include "torus/autoscale/config.h"

namespace torus::autoscale {

inline constexpr std::string_view kManagedByLabel = "app.kubernetes.io/managed-by";
inline constexpr std::string_view kManagedByValue = "torus-autoscaler";
inline constexpr std::string_view kSliceLabel = "torus.io/slice";
inline constexpr std::string_view kNodeTypeLabel = "torus.io/node-type";
inline constexpr std::string_view kCapacityClassLabel = "torus.io/capacity-class";
inline constexpr std::string_view kLaunchedAnnotation = "torus.io/launched-ms";
// Where a pod finds the cluster token (the Secret's key `token`).
inline constexpr std::string_view kTokenMountPath = "/var/run/torus";
// Where a pod finds the cluster CA (ca.crt) and the join token (join_token) when the head serves TLS.
inline constexpr std::string_view kTlsMountPath = "/var/run/torus-tls";

struct SliceObjects {
  nlohmann::json service;            // headless Service <slice>
  std::vector<nlohmann::json> pods;  // <slice>-w<worker id>, in worker-id order
};

// GKE's cloud.google.com/gke-tpu-accelerator value of a generation: tpu-v4-podslice, tpu-v5-lite-podslice,
// tpu-v5p-slice, tpu-v6e-slice, tpu7x.
std::string GkeTpuAccelerator(TpuGeneration generation);

SliceObjects KubernetesSliceObjects(const KubernetesProvider& provider, const std::string& ns, const NodeType& type,
                                    const std::string& slice, CapacityClass capacity_class, int64_t wall_ms);

}  // namespace torus::autoscale
