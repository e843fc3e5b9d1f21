// The autoscaler's configuration: the node types it may launch, each a whole TPU slice of one shape, with the
// capacity classes to try in order, and the provider that launches them.
//
// The head reads it from `--autoscaler-config FILE` (YAML or JSON); `torus up` writes one for its local cluster from
// the spec's `node_types` section. Example:
//   provider: {type: local, session: /tmp/torus/session_2026-12-03_10-00-00_123}
//   failure_backoff_s: 300          # a class that failed is not tried again for this long (per node type)
//   node_types:
//     - name: v6e                   # slices are named <name>-<5 hex digits>, hosts <slice>-w<worker id>
//       tpu: {pod_type: v6e-16, topology: 4x4}
//       num_cpus: 8                 # per host (default 8)
//       memory: 16Gi                # per host (default 16Gi)
//       labels: {team: ml}
//       min_slices: 0               # kept running even when idle
//       max_slices: 4               # never more, launching ones included
//       idle_timeout_s: 60          # a slice nothing has used for this long is removed whole
//       capacity_classes:           # tried in order; default [{class: on-demand}]
//         - {class: spot, provisioning_timeout_s: 10}
//         - {class: flex-start, provisioning_timeout_s: 120}
//       simulate: {spot: stockout}  # local provider only: stockout (never provisions) or quota (refused at once)
//       reservation: my-reservation # kubernetes provider, class reserved: the reservation its hosts consume
//
// The kubernetes provider instead:
//   provider: {type: kubernetes, image: REGISTRY/torus:TAG, head_address: torus-head.torus.svc:6380,
//              namespace: torus, token_secret: torus-token, tls_secret: torus-tls, image_pull_policy: IfNotPresent,
//              api_server: https://kubernetes.default.svc,
//              service_account_dir: /var/run/secrets/kubernetes.io/serviceaccount}
//
// Thread-safety: value types and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "absl/status/statusor.h"
#include "torus/common/labels.h"
#include "torus/common/resources.h"
#include "torus/common/tpu_shape.h"

namespace torus::autoscale {

// GKE's ways of getting TPU VMs (reference/tpu.md "Capacity classes"); a host's torus.io/market-type is its class.
enum class CapacityClass { kSpot, kFlexStart, kReserved, kOnDemand };
std::string_view CapacityClassName(CapacityClass c);  // "spot", "flex-start", "reserved", "on-demand"
// Error names the accepted forms.
absl::StatusOr<CapacityClass> ParseCapacityClass(std::string_view text);

// How the local provider answers a launch of one class, standing in for a cloud's answers.
enum class SimulatedAnswer {
  kCapacity,  // the slice starts
  kStockout,  // accepted, never provisions (as a node pool waiting for capacity): the provisioning timeout ends it
  kQuota,     // refused at once
};

struct ClassOption {
  CapacityClass capacity_class = CapacityClass::kOnDemand;
  int64_t provisioning_timeout_ms = 600'000;  // launch to every host registered
};

struct NodeType {
  std::string name;
  SliceShape shape;
  double num_cpus = 8;                             // per host
  int64_t memory_bytes = int64_t{16} << 30;        // per host
  Labels labels;                                   // user labels of every host
  int min_slices = 0;
  int max_slices = 10;
  int64_t idle_timeout_ms = 60'000;
  std::vector<ClassOption> classes;                // at least one, no class twice
  std::map<CapacityClass, SimulatedAnswer> simulate;
  std::string reservation;                         // kubernetes, class reserved: the GCE reservation to consume
};

enum class ProviderKind { kLocal, kKubernetes };

// The kubernetes provider: one pod per host of a slice in a GKE TPU node pool, and a headless service per slice for
// its hosts' names (kubernetes_objects.h).
struct KubernetesProvider {
  std::string api_server = "https://kubernetes.default.svc";
  std::string service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";  // token, ca.crt, namespace
  std::string ns;                                  // "" = the namespace file of service_account_dir
  std::string image;                               // the torus image (deploy/Dockerfile); required
  std::string image_pull_policy = "IfNotPresent";
  std::string head_address;                        // what agents join, e.g. torus-head.torus.svc:6380; required
  std::string token_secret = "torus-token";        // a Secret whose key `token` is the cluster token
  // A Secret whose keys `ca.crt` and `join_token` the pods mount (not `ca.key`, which only the head mounts) to join a
  // head that serves TLS: `torus tls init` writes all three (docs/gke.md).
  std::string tls_secret = "torus-tls";
  // Not read from the file: set by the head when it serves TLS (its pods' agents then join with tls_secret).
  bool tls = false;
};

struct AutoscalerConfig {
  ProviderKind provider = ProviderKind::kLocal;
  std::string local_session;                       // local: the `torus up` session the hosts join
  KubernetesProvider kubernetes;                   // kubernetes
  int64_t failure_backoff_ms = 300'000;
  std::vector<NodeType> node_types;                // unique names
  const NodeType* Find(std::string_view name) const;
};

// Parses a `node_types` list; errors name the path ("node_types[1].capacity_classes[0].class: ...").
absl::StatusOr<std::vector<NodeType>> ParseNodeTypes(const YAML::Node& node, const std::string& path);

// Parses a whole configuration (YAML or JSON).
absl::StatusOr<AutoscalerConfig> ParseAutoscalerConfig(const std::string& text);

// One host of a slice of a node type, as the provider starts it and as its agent will register.
struct HostPlan {
  std::string name;                        // node id: "<slice>-w<worker id>"
  int worker_id = 0;
  std::map<std::string, std::string> env;  // what GKE injects into a TPU pod, and TORUS_NODE_GROUP/MARKET_TYPE
  Labels labels;                           // the labels its agent's detection gives it
  ResourceSet resources;                   // CPU, memory, TPU
};

// The hosts of slice `slice` of `type` in `capacity_class`, in worker-id order. TPU_WORKER_HOSTNAMES is left to
// the provider (it knows the addresses).
std::vector<HostPlan> SliceHosts(const NodeType& type, const std::string& slice, CapacityClass capacity_class);

}  // namespace torus::autoscale
