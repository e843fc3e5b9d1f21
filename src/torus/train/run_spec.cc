#include "torus/train/run_spec.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "torus/common/device_env.h"
#include "torus/common/label_selector.h"
#include "torus/common/status.h"
#include "torus/common/tpu_shape.h"

namespace torus::train {
namespace {

std::string Chips(int n) { return absl::StrCat(n, n == 1 ? " chip" : " chips"); }

// One alternative of a TPU run, resolved.
struct Alternative {
  TpuGeneration generation;
  Topology topology;
  int num_slices = 1;
  int chips_per_host = 0;
  bool settle_chips_per_host = false;  // written into the request: named by the user, or the shape admits several
  int chips_per_worker = 0;
  int64_t Workers() const { return int64_t{topology.Chips()} * num_slices / chips_per_worker; }
  std::string ShapeText() const {
    return absl::StrCat(std::string(GetGenerationInfo(generation).accelerator_type), " ", topology.ToString(), " x",
                        num_slices);
  }
};

absl::StatusOr<Alternative> ResolveAlternative(const std::string& accelerator_type, const std::string& topology,
                                               int num_slices, std::optional<int> chips_per_host,
                                               const std::string& prefix) {
  Alternative alt;
  absl::StatusOr<TpuGeneration> gen = ParseAcceleratorType(accelerator_type);
  if (!gen.ok()) return PrefixStatus(prefix, gen.status());
  alt.generation = *gen;
  absl::StatusOr<Topology> topo = ParseTopology(alt.generation, topology);
  if (!topo.ok()) return PrefixStatus(prefix, topo.status());
  alt.topology = *topo;
  if (num_slices < 1) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "num_slices=", num_slices, " is not valid; ask for at least 1 slice"));
  }
  alt.num_slices = num_slices;
  absl::StatusOr<SliceShape> shape = MakeSliceShape(alt.generation, alt.topology, chips_per_host);
  if (!shape.ok()) return PrefixStatus(prefix, shape.status());
  alt.chips_per_host = shape->chips_per_host;
  int admissible = 0;
  for (int cph : ValidChipsPerHost(alt.generation)) {
    if (MakeSliceShape(alt.generation, alt.topology, cph).ok()) ++admissible;
  }
  alt.settle_chips_per_host = chips_per_host.has_value() || admissible > 1;
  return alt;
}

absl::Status CheckTpuOnlyFieldsUnset(const ScalingConfig& s) {
  if (!s.accelerator_type.empty()) {
    return absl::InvalidArgumentError(
        "accelerator_type requires use_tpu; to pick a GPU type, use label_selector "
        "{\"torus.io/accelerator-type\": \"H100\"}");
  }
  if (!s.topology.empty()) return absl::InvalidArgumentError("topology requires use_tpu");
  if (s.num_slices != 1) return absl::InvalidArgumentError("num_slices requires use_tpu");
  if (s.chips_per_host.has_value()) return absl::InvalidArgumentError("chips_per_host requires use_tpu");
  if (!s.fallbacks.empty()) return absl::InvalidArgumentError("fallbacks require use_tpu");
  return absl::OkStatus();
}

absl::Status PlanTpu(const ScalingConfig& s, const LabelSelector& selector, GangPlan& plan) {
  if (s.accelerator_type.empty() || s.topology.empty()) {
    return absl::InvalidArgumentError("use_tpu requires accelerator_type and topology");
  }
  if (absl::AsciiStrToUpper(s.placement_strategy) != "PACK") {
    return absl::InvalidArgumentError(absl::StrCat("placement_strategy \"", s.placement_strategy,
                                "\" applies only without use_tpu; a TPU run reserves whole slices"));
  }
  std::vector<Alternative> alts;
  {
    TORUS_ASSIGN_OR_RETURN(Alternative primary,
                           ResolveAlternative(s.accelerator_type, s.topology, s.num_slices, s.chips_per_host, ""));
    alts.push_back(std::move(primary));
  }
  for (size_t i = 0; i < s.fallbacks.size(); ++i) {
    const ScalingConfig::Fallback& f = s.fallbacks[i];
    const std::string prefix = absl::StrCat("fallback ", i + 1, ": ");
    if (f.accelerator_type.empty() || f.topology.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, "accelerator_type and topology are required"));
    }
    if (f.num_slices < 0) {
      return absl::InvalidArgumentError(absl::StrCat(prefix, "num_slices=", f.num_slices,
                                  " is not valid; ask for at least 1 slice, or 0 for as many as the primary"));
    }
    const int num_slices = f.num_slices == 0 ? s.num_slices : f.num_slices;
    TORUS_ASSIGN_OR_RETURN(Alternative alt,
                           ResolveAlternative(f.accelerator_type, f.topology, num_slices, f.chips_per_host, prefix));
    alts.push_back(std::move(alt));
  }

  ResourceSet per_worker = s.resources_per_worker.value_or(ResourceSet());
  if (per_worker.GetFixed(kResourceGpu) > 0) {
    return absl::InvalidArgumentError("resources_per_worker: GPU cannot be combined with use_tpu");
  }
  const int64_t tpu_fixed = per_worker.GetFixed(kResourceTpu);
  bool whole_hosts = true;
  for (size_t i = 0; i < alts.size(); ++i) {
    Alternative& alt = alts[i];
    const std::string prefix = i == 0 ? "" : absl::StrCat("fallback ", i, ": ");
    if (tpu_fixed == 0) {
      alt.chips_per_worker = alt.chips_per_host;
      continue;
    }
    TORUS_RETURN_IF_ERROR(PrefixStatus(prefix, ValidateTpuRequest(FromFixed(tpu_fixed), alt.chips_per_host)));
    alt.chips_per_worker = static_cast<int>(tpu_fixed / kResourceScale);
    if (alt.chips_per_host % alt.chips_per_worker != 0) {  // 1, 2, 4, 8 divide every valid chips per host
      return absl::InvalidArgumentError(absl::StrCat(prefix, "TPU per worker ", alt.chips_per_worker, " does not divide the ",
                                  alt.chips_per_host, " chips per host"));
    }
    if (alt.chips_per_worker != alt.chips_per_host) whole_hosts = false;
  }
  for (size_t i = 0; i < alts.size(); ++i) {
    if (alts[i].Workers() > kMaxWorkers) {
      return absl::InvalidArgumentError(absl::StrCat(i == 0 ? "" : absl::StrCat("fallback ", i, ": "), alts[i].ShapeText(), " with ",
                                  Chips(alts[i].chips_per_worker), " per worker is ", alts[i].Workers(),
                                  " workers; a run has at most ", kMaxWorkers));
    }
  }

  const Alternative& primary = alts.front();
  if (s.num_workers.has_value() && *s.num_workers != primary.Workers()) {
    return absl::InvalidArgumentError(absl::StrCat("num_workers=", *s.num_workers, " does not match ", primary.ShapeText(), " with ",
                                Chips(primary.chips_per_worker), " per worker; expected ", primary.Workers()));
  }

  sched::SliceGroupRequest& request = plan.slice_request;
  for (size_t i = 0; i < alts.size(); ++i) {
    sched::SliceShapeRequest shape;
    shape.generation = alts[i].generation;
    shape.topology = alts[i].topology;
    shape.num_slices = alts[i].num_slices;
    if (alts[i].settle_chips_per_host) shape.chips_per_host = alts[i].chips_per_host;
    shape.selector = selector;
    if (i == 0) {
      request.primary = std::move(shape);
    } else {
      request.fallbacks.push_back(std::move(shape));
    }
  }
  // Whole hosts leave TPU out, so that each alternative's bundles take its own chips per host.
  request.unit = whole_hosts ? sched::BundleUnit::kHost : sched::BundleUnit::kChip;
  per_worker.SetFixed(kResourceTpu, whole_hosts ? 0 : tpu_fixed);
  if (per_worker.GetFixed(kResourceCpu) == 0) per_worker.SetFixed(kResourceCpu, kResourceScale);
  request.resources_per_bundle = per_worker;
  TORUS_RETURN_IF_ERROR(sched::ValidateSliceGroupRequest(request));

  plan.tpu = true;
  plan.num_workers = static_cast<int>(primary.Workers());
  plan.workers_per_host = primary.chips_per_host / primary.chips_per_worker;
  return absl::OkStatus();
}

absl::Status PlanBundles(const ScalingConfig& s, const LabelSelector& selector, GangPlan& plan) {
  TORUS_RETURN_IF_ERROR(CheckTpuOnlyFieldsUnset(s));
  if (!s.num_workers.has_value()) return absl::InvalidArgumentError("num_workers is required without use_tpu");
  if (*s.num_workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("num_workers=", *s.num_workers, " is not valid; use 1 or more"));
  }
  if (*s.num_workers > kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrCat("num_workers=", *s.num_workers, " is too many; a run has at most ", kMaxWorkers));
  }
  ResourceSet per_worker;
  if (s.resources_per_worker.has_value()) {
    per_worker = *s.resources_per_worker;
    if (per_worker.GetFixed(kResourceTpu) > 0) {
      return absl::InvalidArgumentError("resources_per_worker asks for TPU; TPU runs set use_tpu, accelerator_type and topology");
    }
    if (per_worker.GetFixed(kResourceGpu) > 0 && !s.use_gpu) {
      return absl::InvalidArgumentError("resources_per_worker asks for GPU; set use_gpu, or remove GPU from resources_per_worker");
    }
  } else {
    per_worker.SetFixed(kResourceCpu, kResourceScale);
  }
  if (s.use_gpu && per_worker.GetFixed(kResourceGpu) == 0) per_worker.SetFixed(kResourceGpu, kResourceScale);
  if (per_worker.empty()) {
    return absl::InvalidArgumentError("resources_per_worker is empty; give at least one positive amount, e.g. {\"CPU\": 1}");
  }
  TORUS_ASSIGN_OR_RETURN(plan.bundle_request.strategy, sched::ParseStrategy(s.placement_strategy));
  plan.bundle_request.primary.bundles.assign(*s.num_workers, per_worker);
  if (!selector.empty()) plan.bundle_request.primary.bundle_selectors.assign(*s.num_workers, selector);
  TORUS_RETURN_IF_ERROR(sched::ValidateBundleRequest(plan.bundle_request));
  plan.tpu = false;
  plan.num_workers = *s.num_workers;
  plan.workers_per_host = 1;
  return absl::OkStatus();
}

bool IsNameChar(char c) { return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-' || c == '_' || c == '.'; }

absl::Status ValidateRunConfig(const RunConfig& run) {
  if (!run.name.empty()) {
    const bool valid = run.name.size() <= 64 && std::all_of(run.name.begin(), run.name.end(), IsNameChar) &&
                       (absl::ascii_islower(run.name[0]) || absl::ascii_isdigit(run.name[0]));
    if (!valid) {
      return absl::InvalidArgumentError(absl::StrCat("name \"", run.name,
                                  "\" is not valid; use 1-64 characters of a-z, 0-9, '-', '_', '.', starting with a "
                                  "letter or digit"));
    }
  }
  if (!run.storage_path.empty() && !run.storage_path.starts_with("/")) {
    return absl::InvalidArgumentError(absl::StrCat("storage_path \"", run.storage_path, "\" is not an absolute path"));
  }
  if (run.max_failures < -1) {
    return absl::InvalidArgumentError(absl::StrCat("max_failures=", run.max_failures,
                                " is not valid; use -1 (unlimited), 0 (no restart) or more"));
  }
  if (run.placement_timeout_s < 0) {
    return absl::InvalidArgumentError(absl::StrCat("placement_timeout_s=", run.placement_timeout_s,
                                ": must be 0 (wait as long as it takes) or a number of seconds"));
  }
  if (run.checkpoints_to_keep.has_value() && *run.checkpoints_to_keep < 1) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoints_to_keep=", *run.checkpoints_to_keep,
                                " is not valid; keep at least 1 (unset keeps all)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateCommand(const RunSpec& spec) {
  if (spec.entrypoint.empty()) {
    return absl::InvalidArgumentError("entrypoint is empty; give the program and its arguments, or a shell command");
  }
  if (spec.entrypoint[0].empty()) return absl::InvalidArgumentError("entrypoint[0] is empty; it names the program to run");
  for (size_t i = 0; i < spec.entrypoint.size(); ++i) {
    if (spec.entrypoint[i].find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("entrypoint[", i, "] contains a NUL character"));
    }
  }
  for (const auto& [name, value] : spec.env) {
    if (name.empty() || name.find('=') != std::string::npos || name.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("env: variable name \"", name, "\" is not valid; a name is not empty and has no '='"));
    }
    if (value.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("env: the value of ", name, " contains a NUL character"));
    }
  }
  if (spec.working_dir.find('\0') != std::string::npos) return absl::InvalidArgumentError("working_dir contains a NUL character");
  // A package uploaded to the head ("gcs://<name>.zip") or a path on every host; no other URI scheme.
  auto location = [](const std::string& field, const std::string& value) -> absl::Status {
    if (value.find("://") != std::string::npos && value.rfind("gcs://", 0) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, " \"", value, "\" is not supported; use a package uploaded to the head ",
                                  "(gcs://<name>.zip) or a directory on every host"));
    }
    return absl::OkStatus();
  };
  TORUS_RETURN_IF_ERROR(location("working_dir", spec.working_dir));
  for (size_t i = 0; i < spec.py_modules.size(); ++i) {
    if (spec.py_modules[i].empty() || spec.py_modules[i].find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("py_modules[", i, "] is empty or contains a NUL character"));
    }
    TORUS_RETURN_IF_ERROR(location(absl::StrCat("py_modules[", i, "]"), spec.py_modules[i]));
  }
  return absl::OkStatus();
}

bool IsScript(const std::string& word) { return absl::EndsWith(word, ".py") || absl::EndsWith(word, ".sh"); }

std::string BaseName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

absl::StatusOr<GangPlan> PlanRun(const RunSpec& spec) {
  const ScalingConfig& s = spec.scaling;
  if (s.use_tpu && s.use_gpu) return absl::InvalidArgumentError("use_tpu and use_gpu cannot both be set");
  GangPlan plan;
  {
    TORUS_ASSIGN_OR_RETURN(LabelSelector selector, LabelSelector::Parse(s.label_selector));
    TORUS_RETURN_IF_ERROR(s.use_tpu ? PlanTpu(s, selector, plan) : PlanBundles(s, selector, plan));
  }
  TORUS_RETURN_IF_ERROR(ValidateCommand(spec));
  TORUS_RETURN_IF_ERROR(ValidateRunConfig(spec.run));
  return plan;
}

int WorkersForAlternative(const GangPlan& plan, int alternative) {
  if (!plan.tpu) return alternative == 0 ? plan.num_workers : 0;
  const sched::SliceGroupRequest& request = plan.slice_request;
  if (alternative < 0 || alternative > static_cast<int>(request.fallbacks.size())) return 0;
  const sched::SliceShapeRequest& shape = alternative == 0 ? request.primary : request.fallbacks[alternative - 1];
  const int cph = shape.chips_per_host.value_or(DefaultChipsPerHost(shape.generation, shape.topology));
  int per_worker = cph;
  if (request.unit == sched::BundleUnit::kChip) {
    const int64_t tpu = request.resources_per_bundle ? request.resources_per_bundle->GetFixed(kResourceTpu) : 0;
    per_worker = tpu > 0 ? static_cast<int>(tpu / kResourceScale) : 1;
  }
  if (per_worker <= 0) return 0;
  const int64_t workers = int64_t{shape.topology.Chips()} * shape.num_slices / per_worker;
  return workers > kMaxWorkers ? 0 : static_cast<int>(workers);
}

std::string DefaultRunName(const std::vector<std::string>& entrypoint) {
  std::vector<std::string> words = entrypoint;
  if (words.size() >= 3 && (BaseName(words[0]) == "sh" || BaseName(words[0]) == "bash") && words[1] == "-c") {
    words = absl::StrSplit(words[2], absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
  }
  std::string pick;
  for (const std::string& word : words) {
    if (!word.starts_with("-") && IsScript(word)) {
      pick = BaseName(word);
      pick.resize(pick.size() - 3);
      break;
    }
  }
  for (size_t i = 0; pick.empty() && i + 1 < words.size(); ++i) {
    if (words[i] == "-m") pick = words[i + 1];
  }
  if (pick.empty() && !words.empty()) pick = BaseName(words[0]);

  std::string name;
  for (char c : absl::AsciiStrToLower(pick)) {
    if (name.empty() && !(absl::ascii_islower(c) || absl::ascii_isdigit(c))) continue;
    name.push_back(IsNameChar(c) ? c : '-');
    if (name.size() == 64) break;
  }
  return name.empty() ? "run" : name;
}

RunSpec ApplyRunDefaults(RunSpec spec) {
  if (spec.run.name.empty()) spec.run.name = DefaultRunName(spec.entrypoint);
  if (spec.run.storage_path.empty()) spec.run.storage_path = kDefaultStoragePath;
  return spec;
}

}  // namespace torus::train
