#include "torus/train/service_spec.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "torus/common/status.h"
#include "torus/common/utf8.h"
#include "torus/common/yaml_fields.h"

namespace torus::train {
namespace {

using nlohmann::json;

// A YAML node as JSON: plain scalars that read as numbers, booleans or null become those; quoted ones stay strings.
absl::StatusOr<json> YamlToJson(const YAML::Node& node, const std::string& path) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return json(nullptr);
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (node.Tag() != "?") return json(s);  // quoted
      if (s == "true" || s == "True") return json(true);
      if (s == "false" || s == "False") return json(false);
      if (s == "null" || s == "~") return json(nullptr);
      int64_t i = 0;
      auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), i);
      if (ec == std::errc() && ptr == s.data() + s.size()) return json(i);
      double d = 0;
      auto [dptr, dec] = std::from_chars(s.data(), s.data() + s.size(), d);
      if (dec == std::errc() && dptr == s.data() + s.size() && std::isfinite(d)) return json(d);
      return json(s);
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (size_t i = 0; i < node.size(); ++i) {
        TORUS_ASSIGN_OR_RETURN(json item, YamlToJson(node[i], absl::StrCat(path, "[", i, "]")));
        out.push_back(std::move(item));
      }
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) return FieldError(path, "keys must be strings");
        const std::string key = kv.first.Scalar();
        const std::string child = path.empty() ? key : absl::StrCat(path, ".", key);
        if (out.contains(key)) return absl::InvalidArgumentError(absl::StrCat("duplicate field \"", child, "\""));
        TORUS_ASSIGN_OR_RETURN(out[key], YamlToJson(kv.second, child));
      }
      return out;
    }
  }
  return json(nullptr);
}

absl::StatusOr<int64_t> GetMillis(const YAML::Node& node, const std::string& path, double min_s, double max_s) {
  TORUS_ASSIGN_OR_RETURN(double seconds, GetNumber(node, path, min_s, max_s));
  return static_cast<int64_t>(std::llround(seconds * 1000));
}

absl::Status CheckPath(const std::string& path, const std::string& value) {
  if (value.empty() || value[0] != '/') return FieldError(path, absl::StrCat("\"", value, "\" must start with '/'"));
  for (unsigned char c : value) {
    if (c <= ' ' || c >= 0x7f || c == '?' || c == '#') {
      return FieldError(path, absl::StrCat("\"", value, "\" may hold only printable ASCII without spaces, '?' or '#'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<AutoscalingConfig> ParseAutoscaling(const YAML::Node& node) {
  const std::string path = "autoscaling";
  TORUS_RETURN_IF_ERROR(CheckKeys(node, path,
                                  {"min_replicas", "max_replicas", "target_ongoing_requests", "upscale_delay_s",
                                   "downscale_delay_s", "initial_replicas"}));
  AutoscalingConfig a;
  if (!node["max_replicas"]) return FieldError(path + ".max_replicas", "is required");
  TORUS_ASSIGN_OR_RETURN(a.max_replicas, GetInt(node["max_replicas"], path + ".max_replicas", 1, kMaxReplicas));
  if (node["min_replicas"]) {
    TORUS_ASSIGN_OR_RETURN(a.min_replicas, GetInt(node["min_replicas"], path + ".min_replicas", 0, kMaxReplicas));
  }
  if (a.min_replicas > a.max_replicas) {
    return FieldError(path + ".min_replicas",
                      absl::StrCat(a.min_replicas, " is more than max_replicas (", a.max_replicas, ")"));
  }
  if (node["target_ongoing_requests"]) {
    TORUS_ASSIGN_OR_RETURN(a.target_ongoing_requests,
                           GetNumber(node["target_ongoing_requests"], path + ".target_ongoing_requests", 0, 1e6));
    if (a.target_ongoing_requests <= 0) return FieldError(path + ".target_ongoing_requests", "must be more than 0");
  }
  if (node["upscale_delay_s"]) {
    TORUS_ASSIGN_OR_RETURN(a.upscale_delay_ms, GetMillis(node["upscale_delay_s"], path + ".upscale_delay_s", 0, 86400));
  }
  if (node["downscale_delay_s"]) {
    TORUS_ASSIGN_OR_RETURN(a.downscale_delay_ms,
                           GetMillis(node["downscale_delay_s"], path + ".downscale_delay_s", 0, 86400));
  }
  a.initial_replicas = std::max(a.min_replicas, 1);
  if (node["initial_replicas"]) {
    TORUS_ASSIGN_OR_RETURN(a.initial_replicas,
                           GetInt(node["initial_replicas"], path + ".initial_replicas", 0, kMaxReplicas));
    if (a.initial_replicas < a.min_replicas || a.initial_replicas > a.max_replicas) {
      return FieldError(path + ".initial_replicas",
                        absl::StrCat(a.initial_replicas, " is not within min_replicas (", a.min_replicas,
                                     ") and max_replicas (", a.max_replicas, ")"));
    }
  }
  return a;
}

// The replica's gang, checked as a run's: errors read "replica: ..." / "replica.num_workers: ...".
absl::StatusOr<train::RunSpec> ParseReplica(const YAML::Node& root) {
  json run = json::object();
  json scaling = json::object();
  if (root["replica"]) {
    TORUS_ASSIGN_OR_RETURN(scaling, YamlToJson(root["replica"], "replica"));
  }
  if (scaling.is_object()) {
    if (scaling.contains("accelerator_type") && !scaling.contains("use_tpu")) scaling["use_tpu"] = true;
    // One worker by default, as a gang of one process.
    if (!scaling.contains("use_tpu") && !scaling.contains("num_workers")) scaling["num_workers"] = 1;
  }
  run["scaling_config"] = std::move(scaling);
  if (!root["entrypoint"]) return FieldError("entrypoint", "is required: a shell command or a list of arguments");
  TORUS_ASSIGN_OR_RETURN(run["entrypoint"], YamlToJson(root["entrypoint"], "entrypoint"));
  if (root["env"]) {
    if (!root["env"].IsMap()) return FieldError("env", "must be a map of names to strings");
    json env = json::object();
    for (const auto& kv : root["env"]) {
      if (!kv.first.IsScalar() || !kv.second.IsScalar()) return FieldError("env", "must be a map of names to strings");
      const std::string& name = kv.first.Scalar();
      bool printable = !name.empty() && name.size() <= 256 && name.find('=') == std::string::npos;
      for (unsigned char c : name) printable = printable && c >= 0x20 && c != 0x7f;
      if (!printable) {
        return FieldError("env", absl::StrCat("name \"", absl::CHexEscape(name),
                                              "\" must be 1-256 printable characters without '='"));
      }
      env[name] = kv.second.Scalar();
    }
    run["env"] = std::move(env);
  }
  if (root["working_dir"]) {
    TORUS_ASSIGN_OR_RETURN(run["working_dir"], YamlToJson(root["working_dir"], "working_dir"));
  }
  if (root["py_modules"]) {
    TORUS_ASSIGN_OR_RETURN(run["py_modules"], YamlToJson(root["py_modules"], "py_modules"));
  }
  run["run_config"] = {{"name", "replica"}};
  auto rename = [](const absl::Status& s) {
    std::string text(s.message());
    if (absl::StartsWith(text, "scaling_config")) text = "replica" + text.substr(14);
    else if (!absl::StartsWith(text, "entrypoint") && !absl::StartsWith(text, "env") &&
             !absl::StartsWith(text, "working_dir") && !absl::StartsWith(text, "py_modules") &&
             !absl::StartsWith(text, "duplicate")) {
      text = "replica: " + text;
    }
    return absl::InvalidArgumentError(text);
  };
  auto spec = train::RunSpecFromJson(run.dump());
  if (!spec.ok()) return rename(spec.status());
  auto plan = train::PlanRun(*spec);
  if (!plan.ok()) return rename(plan.status());
  spec->run = train::RunConfig();
  return *spec;
}

absl::StatusOr<ServiceSpec> ParseNode(const YAML::Node& root) {
  if (!root.IsMap()) return absl::InvalidArgumentError("a service spec is a map of fields (name, entrypoint, replica, ...)");
  TORUS_RETURN_IF_ERROR(CheckKeys(root, "",
                                  {"name", "route_prefix", "entrypoint", "env", "working_dir", "py_modules", "replica",
                                   "health_path", "health_check_period_s", "health_check_timeout_s",
                                   "readiness_timeout_s", "num_replicas", "autoscaling", "graceful_shutdown_timeout_s",
                                   "request_timeout_s", "max_request_bytes", "max_queued_requests",
                                   "queue_timeout_s"}));
  ServiceSpec spec;
  if (root["num_replicas"] && root["autoscaling"]) {
    return absl::InvalidArgumentError("num_replicas and autoscaling cannot both be given; use one");
  }
  if (!root["name"]) return FieldError("name", "is required");
  TORUS_ASSIGN_OR_RETURN(spec.name, GetString(root["name"], "name"));
  if (!ValidGroupName(spec.name)) {
    return FieldError("name", absl::StrCat("\"", spec.name,
                                           "\" is not valid; use 1-40 of a-z, 0-9 and '-', starting and ending with a "
                                           "letter or digit"));
  }
  spec.route_prefix = "/" + spec.name;
  if (root["route_prefix"]) {
    TORUS_ASSIGN_OR_RETURN(spec.route_prefix, GetString(root["route_prefix"], "route_prefix"));
    TORUS_RETURN_IF_ERROR(CheckPath("route_prefix", spec.route_prefix));
    while (spec.route_prefix.size() > 1 && spec.route_prefix.back() == '/') spec.route_prefix.pop_back();
  }
  TORUS_ASSIGN_OR_RETURN(spec.replica, ParseReplica(root));
  if (root["health_path"]) {
    TORUS_ASSIGN_OR_RETURN(spec.health_path, GetString(root["health_path"], "health_path"));
    TORUS_RETURN_IF_ERROR(CheckPath("health_path", spec.health_path));
  }
  struct Duration {
    const char* field;
    int64_t* ms;
    double min_s, max_s;
  };
  for (const Duration& d : {Duration{"health_check_period_s", &spec.health_check_period_ms, 0.1, 3600},
                            Duration{"health_check_timeout_s", &spec.health_check_timeout_ms, 0.1, 3600},
                            Duration{"readiness_timeout_s", &spec.readiness_timeout_ms, 1, 7 * 86400},
                            Duration{"graceful_shutdown_timeout_s", &spec.graceful_shutdown_timeout_ms, 0, 3600},
                            Duration{"request_timeout_s", &spec.request_timeout_ms, 0.1, 86400},
                            Duration{"queue_timeout_s", &spec.queue_timeout_ms, 0, 3600}}) {
    if (root[d.field]) {
      TORUS_ASSIGN_OR_RETURN(*d.ms, GetMillis(root[d.field], d.field, d.min_s, d.max_s));
    }
  }
  if (root["num_replicas"]) {
    TORUS_ASSIGN_OR_RETURN(spec.num_replicas, GetInt(root["num_replicas"], "num_replicas", 0, kMaxReplicas));
  }
  if (root["autoscaling"]) {
    TORUS_ASSIGN_OR_RETURN(spec.autoscaling, ParseAutoscaling(root["autoscaling"]));
  }
  if (root["max_request_bytes"]) {
    TORUS_ASSIGN_OR_RETURN(spec.max_request_bytes, GetBytes(root["max_request_bytes"], "max_request_bytes"));
    if (spec.max_request_bytes > (int64_t{1} << 32)) return FieldError("max_request_bytes", "must be at most 4Gi");
  }
  if (root["max_queued_requests"]) {
    TORUS_ASSIGN_OR_RETURN(spec.max_queued_requests,
                           GetInt(root["max_queued_requests"], "max_queued_requests", 0, 1'000'000));
  }
  return spec;
}

}  // namespace

absl::StatusOr<ServiceSpec> ParseServiceSpec(absl::string_view text) {
  if (!IsValidUtf8(std::string_view(text.data(), text.size()))) {
    return absl::InvalidArgumentError("a service spec must be valid UTF-8");
  }
  try {
    YAML::Node root = YAML::Load(std::string(text));
    return ParseNode(root);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("not valid YAML or JSON: ", e.what()));
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("not a valid service spec: ", e.what()));
  }
}

std::string ServiceSpecToJson(const ServiceSpec& spec) {
  json run = json::parse(train::RunSpecToJson(spec.replica));
  auto seconds = [](int64_t ms) { return static_cast<double>(ms) / 1000; };
  json out = {{"name", spec.name},
              {"route_prefix", spec.route_prefix},
              {"entrypoint", run["entrypoint"]},
              {"replica", run["scaling_config"]},
              {"health_path", spec.health_path},
              {"health_check_period_s", seconds(spec.health_check_period_ms)},
              {"health_check_timeout_s", seconds(spec.health_check_timeout_ms)},
              {"readiness_timeout_s", seconds(spec.readiness_timeout_ms)},
              {"graceful_shutdown_timeout_s", seconds(spec.graceful_shutdown_timeout_ms)},
              {"request_timeout_s", seconds(spec.request_timeout_ms)},
              {"max_request_bytes", spec.max_request_bytes},
              {"max_queued_requests", spec.max_queued_requests},
              {"queue_timeout_s", seconds(spec.queue_timeout_ms)}};
  if (!spec.replica.env.empty()) out["env"] = spec.replica.env;
  if (!spec.replica.working_dir.empty()) out["working_dir"] = spec.replica.working_dir;
  if (!spec.replica.py_modules.empty()) out["py_modules"] = spec.replica.py_modules;
  if (spec.autoscaling) {
    const AutoscalingConfig& a = *spec.autoscaling;
    out["autoscaling"] = {{"min_replicas", a.min_replicas},
                          {"max_replicas", a.max_replicas},
                          {"target_ongoing_requests", a.target_ongoing_requests},
                          {"upscale_delay_s", seconds(a.upscale_delay_ms)},
                          {"downscale_delay_s", seconds(a.downscale_delay_ms)},
                          {"initial_replicas", a.initial_replicas}};
  } else {
    out["num_replicas"] = spec.num_replicas;
  }
  return out.dump();
}

train::RunSpec ReplicaRunSpec(const ServiceSpec& spec, const std::string& run_name) {
  train::RunSpec run = spec.replica;
  run.run.name = run_name;
  run.run.max_failures = 0;
  return train::ApplyRunDefaults(std::move(run));
}

int InitialReplicas(const ServiceSpec& spec) {
  return spec.autoscaling ? spec.autoscaling->initial_replicas : spec.num_replicas;
}

bool PrefixMatches(absl::string_view prefix, absl::string_view path) {
  if (prefix == "/") return true;
  if (!absl::StartsWith(path, prefix)) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '/';
}

}  // namespace torus::train
