// The REST JSON form of a RunSpec: RunSpecFromJson and RunSpecToJson (run_spec.h).
#include "torus/train/run_spec.h"

#include <climits>
#include <cstdint>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "torus/common/status.h"

namespace torus::train {
namespace {

using nlohmann::json;

std::string Join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

std::string Describe(const json& value) {
  if (value.is_object()) return "an object";
  if (value.is_array()) return "an array";
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::Status TypeError(const std::string& path, std::string_view expected, const json& value) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": expected ", std::string(expected), ", got ", Describe(value)));
}

// Checks that `j` is an object with only `accepted` keys.
absl::Status CheckObject(const json& j, const std::string& path, const std::vector<std::string>& accepted) {
  if (!j.is_object()) {
    return path.empty() ? absl::InvalidArgumentError(absl::StrCat("expected a JSON object, got ", Describe(j)))
                        : TypeError(path, "an object", j);
  }
  std::vector<std::string> unknown;
  for (const auto& [key, value] : j.items()) {
    if (std::find(accepted.begin(), accepted.end(), key) == accepted.end()) unknown.push_back(json(key).dump());
  }
  if (unknown.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(path.empty() ? "" : path + ": ",
                              unknown.size() == 1 ? "unknown field " : "unknown fields ", absl::StrJoin(unknown, ", "),
                              "; accepted: ", absl::StrJoin(accepted, ", ")));
}

absl::StatusOr<int> ReadInt(const json& j, const std::string& path) {
  if (!j.is_number_integer()) return TypeError(path, "an integer", j);
  const bool fits = j.is_number_unsigned() ? j.get<uint64_t>() <= static_cast<uint64_t>(INT_MAX)
                                           : j.get<int64_t>() >= INT_MIN && j.get<int64_t>() <= INT_MAX;
  if (!fits) return absl::InvalidArgumentError(absl::StrCat(path, ": ", j.dump(), " is out of range"));
  return static_cast<int>(j.get<int64_t>());
}

absl::StatusOr<std::optional<int>> ReadOptionalInt(const json& j, const std::string& path) {
  if (j.is_null()) return std::optional<int>();
  TORUS_ASSIGN_OR_RETURN(int value, ReadInt(j, path));
  return std::optional<int>(value);
}

absl::StatusOr<bool> ReadBool(const json& j, const std::string& path) {
  if (!j.is_boolean()) return TypeError(path, "true or false", j);
  return j.get<bool>();
}

absl::StatusOr<std::string> ReadString(const json& j, const std::string& path) {
  if (!j.is_string()) return TypeError(path, "a string", j);
  return j.get<std::string>();
}

absl::StatusOr<std::map<std::string, std::string>> ReadStringMap(const json& j, const std::string& path) {
  if (!j.is_object()) return TypeError(path, "an object of strings", j);
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : j.items()) {
    TORUS_ASSIGN_OR_RETURN(out[key], ReadString(value, Join(path, key)));
  }
  return out;
}

absl::StatusOr<ResourceSet> ReadResources(const json& j, const std::string& path) {
  if (!j.is_object()) return TypeError(path, "an object of resource amounts, e.g. {\"CPU\": 1}", j);
  ResourceSet out;
  for (const auto& [name, value] : j.items()) {
    const std::string field = Join(path, name);
    TORUS_RETURN_IF_ERROR(PrefixStatus(path + ": ", ValidateResourceName(name)));
    if (!value.is_number()) return TypeError(field, "a non-negative number", value);
    absl::StatusOr<int64_t> fixed = ToFixed(value.get<double>());
    if (!fixed.ok()) return PrefixStatus(field + ": ", fixed.status());
    out.SetFixed(name, *fixed);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ReadEntrypoint(const json& j) {
  if (j.is_string()) {
    const std::string command = j.get<std::string>();
    if (absl::StripAsciiWhitespace(command).empty()) return absl::InvalidArgumentError("entrypoint: the shell command is empty");
    return std::vector<std::string>{"/bin/sh", "-c", command};
  }
  if (!j.is_array()) return TypeError("entrypoint", "a list of strings or a shell command string", j);
  std::vector<std::string> argv;
  for (size_t i = 0; i < j.size(); ++i) {
    TORUS_ASSIGN_OR_RETURN(std::string arg, ReadString(j[i], absl::StrCat("entrypoint[", i, "]")));
    argv.push_back(std::move(arg));
  }
  return argv;
}

absl::StatusOr<ScalingConfig::Fallback> ReadFallback(const json& j, const std::string& path) {
  TORUS_RETURN_IF_ERROR(CheckObject(j, path, {"accelerator_type", "topology", "num_slices", "chips_per_host"}));
  ScalingConfig::Fallback f;
  for (const auto& [key, value] : j.items()) {
    const std::string field = Join(path, key);
    if (key == "accelerator_type") {
      TORUS_ASSIGN_OR_RETURN(f.accelerator_type, ReadString(value, field));
    } else if (key == "topology") {
      TORUS_ASSIGN_OR_RETURN(f.topology, ReadString(value, field));
    } else if (key == "num_slices") {
      TORUS_ASSIGN_OR_RETURN(f.num_slices, ReadInt(value, field));
    } else {
      TORUS_ASSIGN_OR_RETURN(f.chips_per_host, ReadOptionalInt(value, field));
    }
  }
  return f;
}

absl::StatusOr<ScalingConfig> ReadScaling(const json& j) {
  const std::string path = "scaling_config";
  TORUS_RETURN_IF_ERROR(CheckObject(j, path,
                                    {"num_workers", "use_tpu", "use_gpu", "accelerator_type", "topology", "num_slices",
                                     "chips_per_host", "resources_per_worker", "placement_strategy", "label_selector",
                                     "fallbacks"}));
  ScalingConfig s;
  for (const auto& [key, value] : j.items()) {
    const std::string field = Join(path, key);
    if (key == "num_workers") {
      TORUS_ASSIGN_OR_RETURN(s.num_workers, ReadOptionalInt(value, field));
    } else if (key == "use_tpu") {
      TORUS_ASSIGN_OR_RETURN(s.use_tpu, ReadBool(value, field));
    } else if (key == "use_gpu") {
      TORUS_ASSIGN_OR_RETURN(s.use_gpu, ReadBool(value, field));
    } else if (key == "accelerator_type") {
      TORUS_ASSIGN_OR_RETURN(s.accelerator_type, ReadString(value, field));
    } else if (key == "topology") {
      TORUS_ASSIGN_OR_RETURN(s.topology, ReadString(value, field));
    } else if (key == "num_slices") {
      TORUS_ASSIGN_OR_RETURN(s.num_slices, ReadInt(value, field));
    } else if (key == "chips_per_host") {
      TORUS_ASSIGN_OR_RETURN(s.chips_per_host, ReadOptionalInt(value, field));
    } else if (key == "resources_per_worker") {
      if (!value.is_null()) {
        TORUS_ASSIGN_OR_RETURN(s.resources_per_worker, ReadResources(value, field));
      }
    } else if (key == "placement_strategy") {
      TORUS_ASSIGN_OR_RETURN(s.placement_strategy, ReadString(value, field));
    } else if (key == "label_selector") {
      TORUS_ASSIGN_OR_RETURN(s.label_selector, ReadStringMap(value, field));
    } else {
      if (!value.is_array()) return TypeError(field, "a list of shapes", value);
      for (size_t i = 0; i < value.size(); ++i) {
        TORUS_ASSIGN_OR_RETURN(ScalingConfig::Fallback f, ReadFallback(value[i], absl::StrCat(field, "[", i, "]")));
        s.fallbacks.push_back(std::move(f));
      }
    }
  }
  return s;
}

absl::StatusOr<RunConfig> ReadRunConfig(const json& j) {
  const std::string path = "run_config";
  TORUS_RETURN_IF_ERROR(
      CheckObject(j, path, {"name", "storage_path", "max_failures", "checkpoints_to_keep", "placement_timeout_s"}));
  RunConfig run;
  for (const auto& [key, value] : j.items()) {
    const std::string field = Join(path, key);
    if (key == "name") {
      TORUS_ASSIGN_OR_RETURN(run.name, ReadString(value, field));
    } else if (key == "storage_path") {
      TORUS_ASSIGN_OR_RETURN(run.storage_path, ReadString(value, field));
    } else if (key == "max_failures") {
      TORUS_ASSIGN_OR_RETURN(run.max_failures, ReadInt(value, field));
    } else if (key == "placement_timeout_s") {
      TORUS_ASSIGN_OR_RETURN(run.placement_timeout_s, ReadInt(value, field));
    } else {
      TORUS_ASSIGN_OR_RETURN(run.checkpoints_to_keep, ReadOptionalInt(value, field));
    }
  }
  return run;
}

// Drops nlohmann's "[json.exception.parse_error.101] " tag.
std::string JsonErrorText(const std::exception& e) {
  std::string_view text = e.what();
  if (text.starts_with("[json.exception.")) {
    size_t end = text.find("] ");
    if (end != std::string_view::npos) text.remove_prefix(end + 2);
  }
  return std::string(text);
}

// Tracks the path of every key while parsing, so that a repeated one (nlohmann silently keeps the last) is named.
class DuplicateFinder {
 public:
  bool OnEvent(json::parse_event_t event, const json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
      {
        Frame frame;
        frame.object = event == json::parse_event_t::object_start;
        frame.path = ChildPath();
        frames_.push_back(std::move(frame));
        break;
      }
      case json::parse_event_t::key:
        if (!frames_.empty() && parsed.is_string()) {
          Frame& f = frames_.back();
          f.key = parsed.get<std::string>();
          if (!f.keys.insert(f.key).second && duplicate_.empty()) duplicate_ = Join(f.path, f.key);
        }
        break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!frames_.empty()) frames_.pop_back();
        NextElement();
        break;
      case json::parse_event_t::value:
        NextElement();
        break;
    }
    return true;
  }
  const std::string& duplicate() const { return duplicate_; }

 private:
  struct Frame {
    bool object = false;
    std::string path;
    std::set<std::string> keys;
    std::string key;
    size_t index = 0;
  };
  std::string ChildPath() const {
    if (frames_.empty()) return "";
    const Frame& f = frames_.back();
    return f.object ? Join(f.path, f.key) : absl::StrCat(f.path, "[", f.index, "]");
  }
  void NextElement() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
  }
  std::vector<Frame> frames_;
  std::string duplicate_;
};

json ResourcesToJson(const ResourceSet& resources) {
  json out = json::object();
  for (const auto& [name, fixed] : resources.amounts()) {
    if (fixed % kResourceScale == 0) {
      out[name] = fixed / kResourceScale;
    } else {
      out[name] = FromFixed(fixed);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<RunSpec> RunSpecFromJson(std::string_view text) {
  DuplicateFinder duplicates;
  json root;
  try {
    root = json::parse(text.begin(), text.end(),
                       [&](int, json::parse_event_t event, json& parsed) { return duplicates.OnEvent(event, parsed); });
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON: ", JsonErrorText(e)));
  }
  TORUS_RETURN_IF_ERROR(CheckObject(root, "", {"scaling_config", "run_config", "entrypoint", "env", "working_dir", "py_modules"}));
  if (!duplicates.duplicate().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("duplicate field \"", duplicates.duplicate(), "\""));
  }
  RunSpec spec;
  for (const auto& [key, value] : root.items()) {
    if (key == "scaling_config") {
      TORUS_ASSIGN_OR_RETURN(spec.scaling, ReadScaling(value));
    } else if (key == "run_config") {
      TORUS_ASSIGN_OR_RETURN(spec.run, ReadRunConfig(value));
    } else if (key == "entrypoint") {
      TORUS_ASSIGN_OR_RETURN(spec.entrypoint, ReadEntrypoint(value));
    } else if (key == "env") {
      TORUS_ASSIGN_OR_RETURN(spec.env, ReadStringMap(value, "env"));
    } else if (key == "py_modules") {
      if (!value.is_array()) return TypeError("py_modules", "a list of strings", value);
      for (size_t i = 0; i < value.size(); ++i) {
        TORUS_ASSIGN_OR_RETURN(std::string m, ReadString(value[i], absl::StrCat("py_modules[", i, "]")));
        spec.py_modules.push_back(std::move(m));
      }
    } else {
      TORUS_ASSIGN_OR_RETURN(spec.working_dir, ReadString(value, "working_dir"));
    }
  }
  return spec;
}

std::string RunSpecToJson(const RunSpec& spec) {
  const ScalingConfig& s = spec.scaling;
  json scaling = {{"use_tpu", s.use_tpu},
                  {"use_gpu", s.use_gpu},
                  {"accelerator_type", s.accelerator_type},
                  {"topology", s.topology},
                  {"num_slices", s.num_slices},
                  {"placement_strategy", s.placement_strategy},
                  {"label_selector", s.label_selector},
                  {"fallbacks", json::array()}};
  if (s.num_workers) scaling["num_workers"] = *s.num_workers;
  if (s.chips_per_host) scaling["chips_per_host"] = *s.chips_per_host;
  if (s.resources_per_worker) scaling["resources_per_worker"] = ResourcesToJson(*s.resources_per_worker);
  for (const ScalingConfig::Fallback& f : s.fallbacks) {
    json fallback = {{"accelerator_type", f.accelerator_type}, {"topology", f.topology}, {"num_slices", f.num_slices}};
    if (f.chips_per_host) fallback["chips_per_host"] = *f.chips_per_host;
    scaling["fallbacks"].push_back(std::move(fallback));
  }
  json run = {
      {"name", spec.run.name}, {"storage_path", spec.run.storage_path}, {"max_failures", spec.run.max_failures}};
  if (spec.run.checkpoints_to_keep) run["checkpoints_to_keep"] = *spec.run.checkpoints_to_keep;
  if (spec.run.placement_timeout_s != 0) run["placement_timeout_s"] = spec.run.placement_timeout_s;
  json out = {{"scaling_config", std::move(scaling)},
              {"run_config", std::move(run)},
              {"entrypoint", spec.entrypoint},
              {"env", spec.env},
              {"working_dir", spec.working_dir}};
  if (!spec.py_modules.empty()) out["py_modules"] = spec.py_modules;
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace torus::train
