#include "torus/autoscale/kubernetes_objects.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace torus::autoscale {
namespace {

using json = nlohmann::json;

json Labels(const NodeType& type, const std::string& slice, CapacityClass c) {
  return {{std::string(kManagedByLabel), std::string(kManagedByValue)},
          {std::string(kSliceLabel), slice},
          {std::string(kNodeTypeLabel), type.name},
          {std::string(kCapacityClassLabel), std::string(CapacityClassName(c))}};
}

// "8", "0.5": a Kubernetes quantity of CPUs.
std::string CpuQuantity(double cpus) { return absl::StrCat(cpus); }

void AddClassScheduling(const NodeType& type, CapacityClass c, json& node_selector, json& tolerations) {
  switch (c) {
    case CapacityClass::kSpot:
      node_selector["cloud.google.com/gke-spot"] = "true";
      tolerations.push_back(
          {{"key", "cloud.google.com/gke-spot"}, {"operator", "Equal"}, {"value", "true"}, {"effect", "NoSchedule"}});
      break;
    case CapacityClass::kFlexStart:
      node_selector["cloud.google.com/gke-flex-start"] = "true";
      tolerations.push_back({{"key", "cloud.google.com/gke-queued"}, {"operator", "Exists"}, {"effect", "NoSchedule"}});
      break;
    case CapacityClass::kReserved:
      node_selector["cloud.google.com/reservation-name"] = type.reservation;
      break;
    case CapacityClass::kOnDemand:
      break;
  }
}

}  // namespace

std::string GkeTpuAccelerator(TpuGeneration generation) {
  switch (generation) {
    case TpuGeneration::kV4:
      return "tpu-v4-podslice";
    case TpuGeneration::kV5e:
      return "tpu-v5-lite-podslice";
    case TpuGeneration::kV5p:
      return "tpu-v5p-slice";
    case TpuGeneration::kV6e:
      return "tpu-v6e-slice";
    case TpuGeneration::kTpu7x:
      return "tpu7x";
  }
  return "";
}

SliceObjects KubernetesSliceObjects(const KubernetesProvider& provider, const std::string& ns, const NodeType& type,
                                    const std::string& slice, CapacityClass capacity_class, int64_t wall_ms) {
  SliceObjects out;
  const json labels = Labels(type, slice, capacity_class);
  const json annotations = {{std::string(kLaunchedAnnotation), absl::StrCat(wall_ms)}};
  out.service = {{"apiVersion", "v1"},
                 {"kind", "Service"},
                 {"metadata", {{"name", slice}, {"namespace", ns}, {"labels", labels}, {"annotations", annotations}}},
                 {"spec",
                  {{"clusterIP", "None"},
                   {"selector", {{std::string(kSliceLabel), slice}}},
                   {"publishNotReadyAddresses", true}}}};

  const std::vector<HostPlan> hosts = SliceHosts(type, slice, capacity_class);
  std::vector<std::string> hostnames;
  for (const HostPlan& h : hosts) hostnames.push_back(absl::StrCat(h.name, ".", slice, ".", ns, ".svc"));
  json node_selector = {{"cloud.google.com/gke-tpu-accelerator", GkeTpuAccelerator(type.shape.generation)},
                        {"cloud.google.com/gke-tpu-topology", type.shape.topology.ToString()}};
  json tolerations = json::array({{{"key", "google.com/tpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}});
  AddClassScheduling(type, capacity_class, node_selector, tolerations);
  const json affinity = {
      {"podAffinity",
       {{"requiredDuringSchedulingIgnoredDuringExecution",
         json::array({{{"labelSelector", {{"matchLabels", {{std::string(kSliceLabel), slice}}}}},
                       {"topologyKey", "cloud.google.com/gke-nodepool"}}})}}},
      {"podAntiAffinity",
       {{"requiredDuringSchedulingIgnoredDuringExecution",
         json::array({{{"labelSelector",
                        {{"matchExpressions",
                          json::array({{{"key", std::string(kSliceLabel)}, {"operator", "Exists"}},
                                       {{"key", std::string(kSliceLabel)},
                                        {"operator", "NotIn"},
                                        {"values", json::array({slice})}}})}}},
                       {"topologyKey", "cloud.google.com/gke-nodepool"}}})}}}};
  const std::string chips = absl::StrCat(type.shape.chips_per_host);
  for (const HostPlan& h : hosts) {
    json env = json::array({{{"name", "POD_IP"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}}});
    for (const auto& [k, v] : h.env) env.push_back({{"name", k}, {"value", v}});
    env.push_back({{"name", "TPU_WORKER_HOSTNAMES"}, {"value", absl::StrJoin(hostnames, ",")}});
    std::vector<std::string> args = {"--address",    provider.head_address,
                                     "--token-file", absl::StrCat(std::string(kTokenMountPath), "/token"),
                                     "--node-id",    h.name,
                                     "--node-ip",    "$(POD_IP)",
                                     "--num-cpus",   CpuQuantity(type.num_cpus),
                                     "--memory",     absl::StrCat(type.memory_bytes)};
    if (provider.tls) {
      for (const char* arg : {"--tls-ca", "ca.crt", "--join-token-file", "join_token"}) {
        args.push_back(arg[0] == '-' ? std::string(arg) : absl::StrCat(std::string(kTlsMountPath), "/", arg));
      }
    }
    if (!type.labels.empty()) {
      std::vector<std::string> pairs;
      for (const auto& [k, v] : type.labels) pairs.push_back(absl::StrCat(k, "=", v));
      args.push_back("--labels");
      args.push_back(absl::StrJoin(pairs, ","));
    }
    json mounts =
        json::array({{{"name", "torus-token"}, {"mountPath", std::string(kTokenMountPath)}, {"readOnly", true}}});
    json volumes = json::array(
        {{{"name", "torus-token"}, {"secret", {{"secretName", provider.token_secret}, {"defaultMode", 0400}}}}});
    if (provider.tls) {
      mounts.push_back({{"name", "torus-tls"}, {"mountPath", std::string(kTlsMountPath)}, {"readOnly", true}});
      volumes.push_back({{"name", "torus-tls"},
                         {"secret",
                          {{"secretName", provider.tls_secret},
                           {"defaultMode", 0400},
                           {"items", json::array({{{"key", "ca.crt"}, {"path", "ca.crt"}},
                                                  {{"key", "join_token"}, {"path", "join_token"}}})}}}});
    }
    json pod_labels = labels;
    pod_labels["torus.io/worker-id"] = absl::StrCat(h.worker_id);
    json container = {
        {"name", "torus-node"},
        {"image", provider.image},
        {"imagePullPolicy", provider.image_pull_policy},
        {"command", json::array({"torus-node"})},
        {"args", args},
        {"env", env},
        {"resources",
         {{"requests",
           {{"google.com/tpu", chips}, {"cpu", CpuQuantity(type.num_cpus)}, {"memory", absl::StrCat(type.memory_bytes)}}},
          {"limits", {{"google.com/tpu", chips}}}}},
        {"volumeMounts", mounts}};
    out.pods.push_back(
        {{"apiVersion", "v1"},
         {"kind", "Pod"},
         {"metadata", {{"name", h.name}, {"namespace", ns}, {"labels", pod_labels}, {"annotations", annotations}}},
         {"spec",
          {{"hostname", h.name},
           {"subdomain", slice},
           {"restartPolicy", "Never"},
           {"terminationGracePeriodSeconds", 30},
           {"nodeSelector", node_selector},
           {"tolerations", tolerations},
           {"affinity", affinity},
           {"containers", json::array({container})},
           {"volumes", volumes}}}});
  }
  return out;
}

}  // namespace torus::autoscale
