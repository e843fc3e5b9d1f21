#include "torus/cli/cluster_spec.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/status.h"

namespace torus::cli {
namespace {

absl::Status FieldError(const std::string& path, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", message));
}

absl::Status CheckKeys(const YAML::Node& node, const std::string& path, const std::vector<std::string>& accepted) {
  if (!node.IsMap()) return FieldError(path, "must be a map");
  for (const auto& kv : node) {
    std::string key = kv.first.Scalar();
    if (std::find(accepted.begin(), accepted.end(), key) == accepted.end()) {
      return FieldError(path, absl::StrCat("unknown key \"", key, "\"; accepted: ", absl::StrJoin(accepted, ", ")));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> GetString(const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar()) return FieldError(path, "must be a string");
  return node.Scalar();
}

absl::StatusOr<int> GetInt(const YAML::Node& node, const std::string& path, int min, int max) {
  int value = 0;
  if (!node.IsScalar() || !absl::SimpleAtoi(node.Scalar(), &value) || value < min || value > max) {
    return FieldError(path, absl::StrCat("must be an integer from ", min, " to ", max));
  }
  return value;
}

absl::StatusOr<double> GetCpus(const YAML::Node& node, const std::string& path) {
  double value = 0;
  if (!node.IsScalar() || !absl::SimpleAtod(node.Scalar(), &value) || !std::isfinite(value) || value < 0 ||
      value > 1e6) {
    return FieldError(path, "must be a non-negative number of CPUs");
  }
  return value;
}

// A size in bytes ("64Mi", "2Gi", "1000000").
absl::StatusOr<int64_t> GetBytes(const YAML::Node& node, const std::string& path) {
  TORUS_ASSIGN_OR_RETURN(std::string text, GetString(node, path));
  auto bytes = ParseByteSize(text);
  if (!bytes.ok()) return FieldError(path, bytes.status().message());
  return *bytes;
}

absl::StatusOr<Labels> GetLabels(const YAML::Node& node, const std::string& path) {
  if (!node.IsMap()) return FieldError(path, "must be a map of label key to value");
  Labels raw;
  for (const auto& kv : node) {
    if (!kv.second.IsScalar() && !kv.second.IsNull()) {
      return FieldError(path, absl::StrCat("value of \"", kv.first.Scalar(), "\" must be a string"));
    }
    raw[kv.first.Scalar()] = kv.second.IsNull() ? "" : kv.second.Scalar();
  }
  auto canonical = CanonicalUserLabels(raw);
  if (!canonical.ok()) return FieldError(path, canonical.status().message());
  return *canonical;
}

bool ValidGroupName(const std::string& name) {
  if (name.empty() || name.size() > 40) return false;
  if (!absl::ascii_isalnum(name.front()) || !absl::ascii_isalnum(name.back())) return false;
  for (char c : name) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-')) return false;
  }
  return true;
}

absl::StatusOr<TpuGroupSpec> ParseTpu(const YAML::Node& node, const std::string& path) {
  TORUS_RETURN_IF_ERROR(CheckKeys(node, path, {"pod_type", "accelerator_type", "topology", "chips_per_host"}));
  if (!node["topology"]) return FieldError(path + ".topology", "is required (e.g. 4x4)");
  if (!node["pod_type"] && !node["accelerator_type"]) {
    return FieldError(path, "give pod_type (e.g. v6e-16) or accelerator_type (e.g. TPU-V6E)");
  }
  std::optional<PodType> pod_type;
  std::optional<TpuGeneration> generation;
  if (node["pod_type"]) {
    TORUS_ASSIGN_OR_RETURN(std::string text, GetString(node["pod_type"], path + ".pod_type"));
    auto parsed = ParsePodType(text);
    if (!parsed.ok()) return FieldError(path + ".pod_type", parsed.status().message());
    pod_type = *parsed;
    generation = parsed->generation;
  }
  if (node["accelerator_type"]) {
    TORUS_ASSIGN_OR_RETURN(std::string text, GetString(node["accelerator_type"], path + ".accelerator_type"));
    auto parsed = ParseAcceleratorType(text);
    if (!parsed.ok()) return FieldError(path + ".accelerator_type", parsed.status().message());
    if (generation && *generation != *parsed) {
      return FieldError(path, absl::StrCat("pod_type ", pod_type->ToString(), " is not of accelerator type ", text));
    }
    generation = *parsed;
  }
  TORUS_ASSIGN_OR_RETURN(std::string topology_text, GetString(node["topology"], path + ".topology"));
  auto topology = ParseTopology(*generation, topology_text);
  if (!topology.ok()) return FieldError(path + ".topology", topology.status().message());
  std::optional<int> cph;
  if (node["chips_per_host"]) {
    TORUS_ASSIGN_OR_RETURN(cph, GetInt(node["chips_per_host"], path + ".chips_per_host", 1, 8));
  }
  auto shape = MakeSliceShape(*generation, *topology, cph);
  if (!shape.ok()) return FieldError(path, shape.status().message());
  if (pod_type && pod_type->ToString() != shape->pod_type.ToString()) {
    return FieldError(path, absl::StrCat("pod_type ", pod_type->ToString(), " does not match topology ",
                                         topology->ToString(), " (that is ", shape->pod_type.ToString(), ")"));
  }
  return TpuGroupSpec{*shape, 1};
}

absl::StatusOr<NodeGroupSpec> ParseGroup(const YAML::Node& node, const std::string& path) {
  TORUS_RETURN_IF_ERROR(CheckKeys(
      node, path, {"name", "count", "slices", "num_cpus", "memory", "object_store_memory", "labels", "market_type", "tpu",
                   "gpu"}));
  NodeGroupSpec group;
  if (!node["name"]) return FieldError(path + ".name", "is required");
  TORUS_ASSIGN_OR_RETURN(group.name, GetString(node["name"], path + ".name"));
  if (!ValidGroupName(group.name)) {
    return FieldError(path + ".name", absl::StrCat("\"", group.name,
                                                   "\" is invalid; use 1-40 of a-z, 0-9 and '-', starting and "
                                                   "ending with a letter or digit"));
  }
  if (node["tpu"] && node["gpu"]) return FieldError(path, "a group has either tpu or gpu, not both");
  if (node["tpu"]) {
    if (node["count"]) return FieldError(path + ".count", "TPU groups are sized by slices, not count");
    TORUS_ASSIGN_OR_RETURN(auto tpu, ParseTpu(node["tpu"], path + ".tpu"));
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

absl::StatusOr<int64_t> ParseByteSize(const std::string& text) {
  static const std::pair<absl::string_view, int64_t> kSuffixes[] = {
      {"Ki", int64_t{1} << 10}, {"Mi", int64_t{1} << 20}, {"Gi", int64_t{1} << 30}, {"Ti", int64_t{1} << 40},
      {"K", 1000},              {"M", 1000'000},          {"G", 1000'000'000},     {"T", 1000'000'000'000}};
  absl::string_view s = absl::StripAsciiWhitespace(text);
  int64_t multiplier = 1;
  for (auto [suffix, mult] : kSuffixes) {
    if (s.size() > suffix.size() && s.substr(s.size() - suffix.size()) == suffix) {
      s.remove_suffix(suffix.size());
      multiplier = mult;
      break;
    }
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(s, &value) || value < 0 || value > (int64_t{1} << 50) / multiplier) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not a byte size; use an integer with an optional Ki, Mi, Gi, Ti, K, M, G "
                                 "or T suffix, e.g. 16Gi"));
  }
  return value * multiplier;
}

absl::StatusOr<ClusterSpec> ParseClusterSpec(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("spec is not valid YAML: line ", e.mark.line + 1, ": ", e.msg));
  }
  ClusterSpec spec;
  try {
    TORUS_RETURN_IF_ERROR(CheckKeys(root, "spec", {"head", "node_groups"}));
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
  if (hosts > 250) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec has ", hosts, " hosts; a local simulated cluster holds at most 250"));
  }
  return spec;
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
