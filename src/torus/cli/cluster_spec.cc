#include "torus/cli/cluster_spec.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/status.h"
#include "torus/common/yaml_fields.h"

namespace torus::cli {
namespace {

absl::StatusOr<NodeGroupSpec> ParseGroup(const YAML::Node& node, const std::string& path) {
  TORUS_RETURN_IF_ERROR(CheckKeys(
      node, path, {"name", "count", "slices", "num_cpus", "memory", "object_store_memory", "labels", "market_type", "tpu",
                   "gpu"}));
  NodeGroupSpec group;
  if (!node["name"]) return FieldError(path + ".name", "is required");
  TORUS_ASSIGN_OR_RETURN(group.name, GetString(node["name"], path + ".name"));
  if (!ValidGroupName(group.name)) return GroupNameError(path + ".name", group.name);
  if (node["tpu"] && node["gpu"]) return FieldError(path, "a group has either tpu or gpu, not both");
  if (node["tpu"]) {
    if (node["count"]) return FieldError(path + ".count", "TPU groups are sized by slices, not count");
    TpuGroupSpec tpu;
    TORUS_ASSIGN_OR_RETURN(tpu.shape, GetSliceShape(node["tpu"], path + ".tpu"));
    if (node["slices"]) {
      TORUS_ASSIGN_OR_RETURN(tpu.slices, GetInt(node["slices"], path + ".slices", 1, 256));
    }
    group.tpu = tpu;
  } else {
    if (node["slices"]) return FieldError(path + ".slices", "only TPU groups have slices; use count");
    if (node["count"]) {
      TORUS_ASSIGN_OR_RETURN(group.count, GetInt(node["count"], path + ".count", 1, 1000));
    }
  }
  if (node["gpu"]) {
    TORUS_RETURN_IF_ERROR(CheckKeys(node["gpu"], path + ".gpu", {"count", "model"}));
    GpuGroupSpec gpu;
    if (node["gpu"]["count"]) {
      TORUS_ASSIGN_OR_RETURN(gpu.count, GetInt(node["gpu"]["count"], path + ".gpu.count", 1, 16));
    }
    if (node["gpu"]["model"]) {
      TORUS_ASSIGN_OR_RETURN(gpu.model, GetString(node["gpu"]["model"], path + ".gpu.model"));
    }
    group.gpu = gpu;
  }
  if (node["num_cpus"]) {
    TORUS_ASSIGN_OR_RETURN(group.num_cpus, GetCpus(node["num_cpus"], path + ".num_cpus"));
  }
  if (node["memory"]) {
    TORUS_ASSIGN_OR_RETURN(std::string text, GetString(node["memory"], path + ".memory"));
    auto bytes = ParseByteSize(text);
    if (!bytes.ok()) return FieldError(path + ".memory", bytes.status().message());
    group.memory_bytes = *bytes;
  }
  if (node["object_store_memory"]) {
    TORUS_ASSIGN_OR_RETURN(group.object_store_bytes, GetBytes(node["object_store_memory"], path + ".object_store_memory"));
  }
  if (node["labels"]) {
    TORUS_ASSIGN_OR_RETURN(group.labels, GetLabels(node["labels"], path + ".labels"));
  }
  if (node["market_type"]) {
    TORUS_ASSIGN_OR_RETURN(group.market_type, GetString(node["market_type"], path + ".market_type"));
    absl::Status valid = ValidateLabelValue("torus.io/market-type", group.market_type);
    if (!valid.ok()) return FieldError(path + ".market_type", valid.message());
  }
  return group;
}

}  // namespace

absl::StatusOr<ClusterSpec> ParseClusterSpec(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("spec is not valid YAML: line ", e.mark.line + 1, ": ", e.msg));
  }
  ClusterSpec spec;
  try {
    TORUS_RETURN_IF_ERROR(CheckKeys(root, "spec", {"head", "node_groups", "node_types", "autoscaler"}));
    if (root["node_types"]) {
      TORUS_ASSIGN_OR_RETURN(spec.node_types, autoscale::ParseNodeTypes(root["node_types"], "node_types"));
      YAML::Node config;
      config["node_types"] = root["node_types"];
      if (root["autoscaler"]) {
        const YAML::Node autoscaler = root["autoscaler"];
        TORUS_RETURN_IF_ERROR(CheckKeys(autoscaler, "autoscaler", {"failure_backoff_s"}));
        if (autoscaler["failure_backoff_s"]) {
          TORUS_RETURN_IF_ERROR(
              GetNumber(autoscaler["failure_backoff_s"], "autoscaler.failure_backoff_s", 0, 86400).status());
          config["failure_backoff_s"] = autoscaler["failure_backoff_s"];
        }
      }
      YAML::Emitter out;
      out << config;
      spec.autoscaler_yaml = out.c_str();
    } else if (root["autoscaler"]) {
      return FieldError("autoscaler", "needs node_types to scale");
    }
    if (root["head"]) {
      const YAML::Node head = root["head"];
      TORUS_RETURN_IF_ERROR(CheckKeys(head, "head", {"num_cpus", "memory", "object_store_memory", "labels"}));
      if (head["num_cpus"]) {
        TORUS_ASSIGN_OR_RETURN(spec.head_num_cpus, GetCpus(head["num_cpus"], "head.num_cpus"));
      }
      if (head["memory"]) {
        TORUS_ASSIGN_OR_RETURN(std::string text, GetString(head["memory"], "head.memory"));
        auto bytes = ParseByteSize(text);
        if (!bytes.ok()) return FieldError("head.memory", bytes.status().message());
        spec.head_memory_bytes = *bytes;
      }
      if (head["object_store_memory"]) {
        TORUS_ASSIGN_OR_RETURN(spec.head_object_store_bytes,
                               GetBytes(head["object_store_memory"], "head.object_store_memory"));
      }
      if (head["labels"]) {
        TORUS_ASSIGN_OR_RETURN(spec.head_labels, GetLabels(head["labels"], "head.labels"));
      }
    }
    if (root["node_groups"]) {
      const YAML::Node groups = root["node_groups"];
      if (!groups.IsSequence()) return FieldError("node_groups", "must be a list");
      std::set<std::string> names;
      for (size_t i = 0; i < groups.size(); ++i) {
        std::string path = absl::StrCat("node_groups[", i, "]");
        TORUS_ASSIGN_OR_RETURN(NodeGroupSpec group, ParseGroup(groups[i], path));
        if (!names.insert(group.name).second) {
          return FieldError(path + ".name", absl::StrCat("\"", group.name, "\" is used by an earlier group"));
        }
        spec.groups.push_back(std::move(group));
      }
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("spec: line ", e.mark.line + 1, ": ", e.msg));
  }
  size_t hosts = ExpandClusterSpec(spec).size();
  for (const autoscale::NodeType& t : spec.node_types) hosts += static_cast<size_t>(t.max_slices * t.shape.hosts);
  if (hosts > 250) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec has ", hosts, " hosts (node types counted at max_slices); a local simulated cluster holds "
                     "at most 250"));
  }
  return spec;
}

std::string AutoscalerConfigFor(const ClusterSpec& spec, const std::string& session) {
  YAML::Node config = YAML::Load(spec.autoscaler_yaml);
  config["provider"]["type"] = "local";
  config["provider"]["session"] = session;
  YAML::Emitter out;
  out << config;
  return std::string(out.c_str()) + "\n";
}

std::vector<SimulatedHost> ExpandClusterSpec(const ClusterSpec& spec, const HostAddresses& addresses) {
  std::vector<SimulatedHost> hosts;
  SimulatedHost head;
  head.name = "head";
  head.node_ip = addresses.head;
  head.num_cpus = spec.head_num_cpus;
  head.memory_bytes = spec.head_memory_bytes;
  head.object_store_bytes = spec.head_object_store_bytes;
  head.labels = spec.head_labels;
  hosts.push_back(head);
  int next_ip = addresses.first;
  auto base = [&](const NodeGroupSpec& g, std::string name) {
    SimulatedHost h;
    h.name = std::move(name);
    h.group = g.name;
    h.node_ip = absl::StrCat(addresses.prefix, next_ip++);
    h.num_cpus = g.num_cpus;
    h.memory_bytes = g.memory_bytes;
    h.object_store_bytes = g.object_store_bytes;
    h.labels = g.labels;
    h.env["TORUS_NODE_GROUP"] = g.name;
    if (!g.market_type.empty()) h.env["TORUS_NODE_MARKET_TYPE"] = g.market_type;
    return h;
  };
  for (const NodeGroupSpec& g : spec.groups) {
    if (g.tpu) {
      const SliceShape& shape = g.tpu->shape;
      for (int s = 0; s < g.tpu->slices; ++s) {
        std::string slice = absl::StrCat(g.name, "-", s);
        std::vector<SimulatedHost> slice_hosts;
        for (int w = 0; w < shape.hosts; ++w) slice_hosts.push_back(base(g, absl::StrCat(slice, "-w", w)));
        std::vector<std::string> ips;
        for (const auto& h : slice_hosts) ips.push_back(h.node_ip);
        for (int w = 0; w < shape.hosts; ++w) {
          SimulatedHost& h = slice_hosts[w];
          h.tpu_generation = shape.generation;
          h.tpu_chips = shape.chips_per_host;
          h.env["TPU_ACCELERATOR_TYPE"] = shape.pod_type.ToString();
          h.env["TPU_TOPOLOGY"] = shape.topology.ToString();
          h.env["TPU_NAME"] = slice;
          h.env["TPU_WORKER_ID"] = absl::StrCat(w);
          h.env["TPU_WORKER_HOSTNAMES"] = absl::StrJoin(ips, ",");
          h.env["TPU_SKIP_MDS_QUERY"] = "true";
          hosts.push_back(std::move(h));
        }
      }
    } else {
      for (int i = 0; i < g.count; ++i) {
        SimulatedHost h = base(g, absl::StrCat(g.name, "-", i));
        if (g.gpu) {
          h.gpu_count = g.gpu->count;
          h.gpu_model = g.gpu->model;
        }
        hosts.push_back(std::move(h));
      }
    }
  }
  return hosts;
}

}  // namespace torus::cli
