#include "torus/common/yaml_fields.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/common/status.h"

namespace torus {

absl::Status FieldError(const std::string& path, absl::string_view message) {
  if (path.empty()) return absl::InvalidArgumentError(message);  // the document itself
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

absl::StatusOr<double> GetNumber(const YAML::Node& node, const std::string& path, double min, double max) {
  double value = 0;
  if (!node.IsScalar() || !absl::SimpleAtod(node.Scalar(), &value) || !std::isfinite(value) || value < min ||
      value > max) {
    return FieldError(path, absl::StrCat("must be a number from ", min, " to ", max));
  }
  return value;
}

absl::Status GroupNameError(const std::string& path, const std::string& name) {
  return FieldError(path, absl::StrCat("\"", name,
                                       "\" is invalid; use 1-40 of a-z, 0-9 and '-', starting and ending with a "
                                       "letter or digit"));
}

absl::StatusOr<SliceShape> GetSliceShape(const YAML::Node& node, const std::string& path) {
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
  return *shape;
}

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

}  // namespace torus
