#include "torus/autoscale/config.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/accel/tpu_detect.h"
#include "torus/common/status.h"
#include "torus/common/utf8.h"
#include "torus/common/well_known_labels.h"
#include "torus/common/yaml_fields.h"

namespace torus::autoscale {
namespace {

constexpr CapacityClass kAllClasses[] = {CapacityClass::kSpot, CapacityClass::kFlexStart, CapacityClass::kReserved,
                                         CapacityClass::kOnDemand};

absl::StatusOr<int64_t> GetSeconds(const YAML::Node& node, const std::string& path, double max_s) {
  TORUS_ASSIGN_OR_RETURN(double seconds, GetNumber(node, path, 0, max_s));
  return static_cast<int64_t>(seconds * 1000);
}

bool DnsLabel(const std::string& s) {
  if (s.empty() || s.size() > 63 || s.front() == '-' || s.back() == '-') return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
}

absl::StatusOr<ClassOption> ParseClassOption(const YAML::Node& node, const std::string& path) {
  ClassOption option;
  if (node.IsScalar()) {  // "- spot" for the default timeout
    auto c = ParseCapacityClass(node.Scalar());
    if (!c.ok()) return FieldError(path, c.status().message());
    option.capacity_class = *c;
    return option;
  }
  TORUS_RETURN_IF_ERROR(CheckKeys(node, path, {"class", "provisioning_timeout_s"}));
  if (!node["class"]) return FieldError(path + ".class", "is required (spot, flex-start, reserved or on-demand)");
  TORUS_ASSIGN_OR_RETURN(std::string text, GetString(node["class"], path + ".class"));
  auto c = ParseCapacityClass(text);
  if (!c.ok()) return FieldError(path + ".class", c.status().message());
  option.capacity_class = *c;
  if (node["provisioning_timeout_s"]) {
    TORUS_ASSIGN_OR_RETURN(option.provisioning_timeout_ms,
                           GetSeconds(node["provisioning_timeout_s"], path + ".provisioning_timeout_s", 7 * 86400));
    if (option.provisioning_timeout_ms <= 0) {
      return FieldError(path + ".provisioning_timeout_s", "must be more than 0");
    }
  }
  return option;
}

absl::StatusOr<NodeType> ParseNodeType(const YAML::Node& node, const std::string& path) {
  TORUS_RETURN_IF_ERROR(CheckKeys(node, path,
                                  {"name", "tpu", "num_cpus", "memory", "labels", "min_slices", "max_slices",
                                   "idle_timeout_s", "capacity_classes", "simulate", "reservation"}));
  NodeType type;
  if (!node["name"]) return FieldError(path + ".name", "is required");
  TORUS_ASSIGN_OR_RETURN(type.name, GetString(node["name"], path + ".name"));
  // Slice names add "-" and 5 hex digits, host names "-w" and the worker id: both stay label values.
  if (!ValidGroupName(type.name) || type.name.size() > 30) {
    return FieldError(path + ".name", absl::StrCat("\"", type.name,
                                                   "\" is invalid; use 1-30 of a-z, 0-9 and '-', starting and "
                                                   "ending with a letter or digit"));
  }
  if (!node["tpu"]) {
    return FieldError(path + ".tpu", "is required (the autoscaler launches whole TPU slices), e.g. "
                                     "{pod_type: v6e-16, topology: 4x4}");
  }
  TORUS_ASSIGN_OR_RETURN(type.shape, GetSliceShape(node["tpu"], path + ".tpu"));
  if (node["num_cpus"]) {
    TORUS_ASSIGN_OR_RETURN(type.num_cpus, GetCpus(node["num_cpus"], path + ".num_cpus"));
  }
  if (node["memory"]) {
    TORUS_ASSIGN_OR_RETURN(type.memory_bytes, GetBytes(node["memory"], path + ".memory"));
  }
  if (node["labels"]) {
    TORUS_ASSIGN_OR_RETURN(type.labels, GetLabels(node["labels"], path + ".labels"));
    for (std::string_view key : {kLabelMarketType, kLabelNodeGroup}) {
      if (type.labels.count(std::string(key))) {
        return FieldError(path + ".labels", absl::StrCat(std::string(key), " is set by the autoscaler (the capacity class and "
                                                              "the node type's name)"));
      }
    }
  }
  if (node["min_slices"]) {
    TORUS_ASSIGN_OR_RETURN(type.min_slices, GetInt(node["min_slices"], path + ".min_slices", 0, 1000));
  }
  if (node["max_slices"]) {
    TORUS_ASSIGN_OR_RETURN(type.max_slices, GetInt(node["max_slices"], path + ".max_slices", 0, 1000));
  }
  if (type.min_slices > type.max_slices) {
    return FieldError(path, absl::StrCat("min_slices (", type.min_slices, ") is more than max_slices (",
                                         type.max_slices, ")"));
  }
  if (node["idle_timeout_s"]) {
    TORUS_ASSIGN_OR_RETURN(type.idle_timeout_ms, GetSeconds(node["idle_timeout_s"], path + ".idle_timeout_s", 86400));
  }
  if (node["capacity_classes"]) {
    const YAML::Node list = node["capacity_classes"];
    if (!list.IsSequence() || list.size() == 0) {
      return FieldError(path + ".capacity_classes", "must be a non-empty list, e.g. [spot, on-demand]");
    }
    std::set<CapacityClass> seen;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string item = absl::StrCat(path, ".capacity_classes[", i, "]");
      TORUS_ASSIGN_OR_RETURN(ClassOption option, ParseClassOption(list[i], item));
      if (!seen.insert(option.capacity_class).second) {
        return FieldError(item, absl::StrCat("class ", std::string(CapacityClassName(option.capacity_class)), " is listed twice"));
      }
      type.classes.push_back(option);
    }
  } else {
    type.classes.push_back(ClassOption{});
  }
  if (node["reservation"]) {
    TORUS_ASSIGN_OR_RETURN(type.reservation, GetString(node["reservation"], path + ".reservation"));
    if (!ValidateLabelValue("cloud.google.com/reservation-name", type.reservation).ok() || type.reservation.empty()) {
      return FieldError(path + ".reservation", "must be a reservation name (a label value)");
    }
  }
  if (node["simulate"]) {
    const YAML::Node sim = node["simulate"];
    if (!sim.IsMap()) return FieldError(path + ".simulate", "must be a map of capacity class to stockout or quota");
    for (const auto& kv : sim) {
      const std::string key = kv.first.Scalar();
      const std::string item = absl::StrCat(path, ".simulate.", key);
      auto c = ParseCapacityClass(key);
      if (!c.ok()) return FieldError(item, c.status().message());
      TORUS_ASSIGN_OR_RETURN(std::string answer, GetString(kv.second, item));
      if (answer == "stockout") {
        type.simulate[*c] = SimulatedAnswer::kStockout;
      } else if (answer == "quota") {
        type.simulate[*c] = SimulatedAnswer::kQuota;
      } else if (answer == "capacity") {
        type.simulate[*c] = SimulatedAnswer::kCapacity;
      } else {
        return FieldError(item, absl::StrCat("\"", answer, "\" is not an answer; accepted: stockout (accepted, "
                                             "never provisions), quota (refused at once), capacity"));
      }
    }
  }
  return type;
}

}  // namespace

std::string_view CapacityClassName(CapacityClass c) {
  switch (c) {
    case CapacityClass::kSpot:
      return "spot";
    case CapacityClass::kFlexStart:
      return "flex-start";
    case CapacityClass::kReserved:
      return "reserved";
    case CapacityClass::kOnDemand:
      return "on-demand";
  }
  return "on-demand";
}

absl::StatusOr<CapacityClass> ParseCapacityClass(std::string_view text) {
  for (CapacityClass c : kAllClasses) {
    if (text == CapacityClassName(c)) return c;
  }
  return absl::InvalidArgumentError(absl::StrCat("capacity class \"", std::string(text),
                                                 "\" is not known; accepted: spot, flex-start, reserved, on-demand"));
}

const NodeType* AutoscalerConfig::Find(std::string_view name) const {
  for (const NodeType& t : node_types) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::StatusOr<std::vector<NodeType>> ParseNodeTypes(const YAML::Node& node, const std::string& path) {
  if (!node.IsSequence()) return FieldError(path, "must be a list of node types");
  std::vector<NodeType> types;
  std::set<std::string> names;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string item = absl::StrCat(path, "[", i, "]");
    TORUS_ASSIGN_OR_RETURN(NodeType type, ParseNodeType(node[i], item));
    if (!names.insert(type.name).second) {
      return FieldError(item + ".name", absl::StrCat("\"", type.name, "\" is used by an earlier node type"));
    }
    types.push_back(std::move(type));
  }
  return types;
}

absl::StatusOr<AutoscalerConfig> ParseAutoscalerConfig(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("autoscaler config is not valid YAML: line ", e.mark.line + 1, ": ", e.msg));
  }
  AutoscalerConfig config;
  try {
    TORUS_RETURN_IF_ERROR(CheckKeys(root, "config", {"provider", "failure_backoff_s", "node_types"}));
    if (!root["provider"]) return FieldError("provider", "is required, e.g. {type: local, session: DIR}");
    const YAML::Node provider = root["provider"];
    if (!provider.IsMap()) return FieldError("provider", "must be a map, e.g. {type: local, session: DIR}");
    if (!provider["type"]) return FieldError("provider.type", "is required; accepted: local, kubernetes");
    TORUS_ASSIGN_OR_RETURN(std::string type, GetString(provider["type"], "provider.type"));
    if (type == "local") {
      TORUS_RETURN_IF_ERROR(CheckKeys(provider, "provider", {"type", "session"}));
      config.provider = ProviderKind::kLocal;
      if (!provider["session"]) return FieldError("provider.session", "is required for the local provider");
      TORUS_ASSIGN_OR_RETURN(config.local_session, GetString(provider["session"], "provider.session"));
    } else if (type == "kubernetes") {
      TORUS_RETURN_IF_ERROR(CheckKeys(provider, "provider",
                                      {"type", "api_server", "service_account_dir", "namespace", "image",
                                       "image_pull_policy", "head_address", "token_secret", "tls_secret"}));
      config.provider = ProviderKind::kKubernetes;
      KubernetesProvider& k = config.kubernetes;
      const std::pair<const char*, std::string*> fields[] = {
          {"api_server", &k.api_server}, {"service_account_dir", &k.service_account_dir}, {"namespace", &k.ns},
          {"image", &k.image}, {"image_pull_policy", &k.image_pull_policy}, {"head_address", &k.head_address},
          {"token_secret", &k.token_secret}, {"tls_secret", &k.tls_secret}};
      for (const auto& [key, value] : fields) {
        if (provider[key]) {
          const std::string field = absl::StrCat("provider.", key);
          TORUS_ASSIGN_OR_RETURN(*value, GetString(provider[key], field));
          // They go into the objects sent to the API server (as JSON) and into pods' command lines.
          if (!IsValidUtf8(*value) || std::any_of(value->begin(), value->end(), [](char c) {
                return static_cast<unsigned char>(c) <= ' ' || c == 0x7f;
              })) {
            return FieldError(field, "must be UTF-8 without spaces or control characters");
          }
        }
      }
      for (const auto& [key, value] : {std::pair<const char*, const std::string*>{"namespace", &k.ns},
                                       {"token_secret", &k.token_secret}, {"tls_secret", &k.tls_secret}}) {
        if (!value->empty() && !DnsLabel(*value)) {
          return FieldError(absl::StrCat("provider.", key),
                            absl::StrCat("\"", *value, "\" is not a Kubernetes name (1-63 of a-z, 0-9 and '-')"));
        }
      }
      if (k.image.empty()) return FieldError("provider.image", "is required: the torus image the hosts run");
      if (k.head_address.empty()) {
        return FieldError("provider.head_address", "is required: HOST:PORT agents join, e.g. torus-head.torus.svc:6380");
      }
      if (k.image_pull_policy != "Always" && k.image_pull_policy != "IfNotPresent" && k.image_pull_policy != "Never") {
        return FieldError("provider.image_pull_policy", "accepted: Always, IfNotPresent, Never");
      }
      if (k.api_server.rfind("https://", 0) != 0 && k.api_server.rfind("http://", 0) != 0) {
        return FieldError("provider.api_server", "must start with https:// (or http:// for a test server)");
      }
    } else {
      return FieldError("provider.type", absl::StrCat("\"", type, "\" is not known; accepted: local, kubernetes"));
    }
    if (root["failure_backoff_s"]) {
      TORUS_ASSIGN_OR_RETURN(config.failure_backoff_ms,
                             GetSeconds(root["failure_backoff_s"], "failure_backoff_s", 86400));
    }
    if (root["node_types"]) {
      TORUS_ASSIGN_OR_RETURN(config.node_types, ParseNodeTypes(root["node_types"], "node_types"));
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("autoscaler config: line ", e.mark.line + 1, ": ", e.msg));
  }
  for (size_t i = 0; i < config.node_types.size(); ++i) {
    const NodeType& t = config.node_types[i];
    const std::string path = absl::StrCat("node_types[", i, "]");
    const bool reserved = std::any_of(t.classes.begin(), t.classes.end(), [](const ClassOption& o) {
      return o.capacity_class == CapacityClass::kReserved;
    });
    if (config.provider == ProviderKind::kKubernetes && reserved && t.reservation.empty()) {
      return FieldError(path + ".reservation", "is required for class reserved with the kubernetes provider");
    }
    if (config.provider == ProviderKind::kKubernetes && !(t.name[0] >= 'a' && t.name[0] <= 'z')) {
      return FieldError(path + ".name", "must start with a letter with the kubernetes provider (slice names are "
                                        "Service names)");
    }
    if (config.provider == ProviderKind::kKubernetes && !t.simulate.empty()) {
      return FieldError(path + ".simulate", "is for the local provider only");
    }
  }
  return config;
}

std::vector<HostPlan> SliceHosts(const NodeType& type, const std::string& slice, CapacityClass capacity_class) {
  std::vector<HostPlan> hosts;
  const SliceShape& shape = type.shape;
  for (int w = 0; w < shape.hosts; ++w) {
    HostPlan h;
    h.name = absl::StrCat(slice, "-w", w);
    h.worker_id = w;
    h.env["TPU_ACCELERATOR_TYPE"] = shape.pod_type.ToString();
    h.env["TPU_TOPOLOGY"] = shape.topology.ToString();
    h.env["TPU_NAME"] = slice;
    h.env["TPU_WORKER_ID"] = absl::StrCat(w);
    h.env["TPU_SKIP_MDS_QUERY"] = "true";
    h.env["TORUS_NODE_GROUP"] = type.name;
    h.env["TORUS_NODE_MARKET_TYPE"] = std::string(CapacityClassName(capacity_class));
    TpuHostInfo info;
    info.chips = shape.chips_per_host;
    info.generation = shape.generation;
    info.pod_type = shape.pod_type;
    info.topology = shape.topology;
    info.slice_name = slice;
    info.worker_id = w;
    h.labels = type.labels;
    for (const auto& [k, v] : TpuLabels(info)) h.labels[k] = v;
    h.labels[std::string(kLabelNodeGroup)] = type.name;
    h.labels[std::string(kLabelMarketType)] = std::string(CapacityClassName(capacity_class));
    h.labels[std::string(kLabelNodeId)] = h.name;
    h.resources.Set(kResourceCpu, type.num_cpus);
    h.resources.SetFixed(kResourceMemory, type.memory_bytes * kResourceScale);
    h.resources.Set(kResourceTpu, shape.chips_per_host);
    hosts.push_back(std::move(h));
  }
  return hosts;
}

}  // namespace torus::autoscale
