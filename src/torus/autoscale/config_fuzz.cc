// libFuzzer target for the autoscaler's configuration (torus-head --autoscaler-config, docs/fuzzing.md): the whole
// input is the file. Parsing may fail, with InvalidArgument; it must never crash. What parses gives, for each node
// type and each of its classes, the hosts of a slice named as the autoscaler names them ("<type>-fffff"): one per
// worker id, with distinct node ids that are valid label values and the type's chips; and Kubernetes objects whose
// names are DNS labels (at most 63 of a-z, 0-9, '-') and whose pods list every host in TPU_WORKER_HOSTNAMES.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>

#include "absl/strings/str_split.h"
#include "torus/autoscale/config.h"
#include "torus/autoscale/kubernetes_objects.h"

namespace {

void Require(bool condition) {
  if (!condition) std::abort();
}

bool DnsLabel(const std::string& s) {
  if (s.empty() || s.size() > 63 || s.front() == '-' || s.back() == '-') return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 8192) return 0;
  absl::StatusOr<torus::autoscale::AutoscalerConfig> config =
      torus::autoscale::ParseAutoscalerConfig(std::string(reinterpret_cast<const char*>(data), size));
  if (!config.ok()) {
    Require(absl::IsInvalidArgument(config.status()));
    return 0;
  }
  for (const torus::autoscale::NodeType& type : config->node_types) {
    Require(!type.classes.empty() && type.min_slices <= type.max_slices);
    const std::string slice = type.name + "-fffff";
    for (const torus::autoscale::ClassOption& option : type.classes) {
      const auto hosts = torus::autoscale::SliceHosts(type, slice, option.capacity_class);
      Require(static_cast<int>(hosts.size()) == type.shape.hosts);
      std::set<std::string> names;
      for (const auto& h : hosts) {
        Require(names.insert(h.name).second);
        Require(torus::ValidateLabelValue("torus.io/node-id", h.name).ok());
        Require(h.resources.GetFixed("TPU") == type.shape.chips_per_host * torus::kResourceScale);
      }
      const auto objects = torus::autoscale::KubernetesSliceObjects(config->kubernetes, "ns", type, slice,
                                                                    option.capacity_class, 1);
      Require(DnsLabel(objects.service["metadata"]["name"].get<std::string>()));
      Require(static_cast<int>(objects.pods.size()) == type.shape.hosts);
      for (const auto& pod : objects.pods) {
        Require(DnsLabel(pod["metadata"]["name"].get<std::string>()));
        for (const auto& env : pod["spec"]["containers"][0]["env"]) {
          if (env["name"] == "TPU_WORKER_HOSTNAMES") {
            Require(static_cast<int>(std::vector<std::string>(absl::StrSplit(env["value"].get<std::string>(), ','))
                                         .size()) == type.shape.hosts);
          }
        }
        Require(!pod.dump().empty());
      }
    }
  }
  return 0;
}
