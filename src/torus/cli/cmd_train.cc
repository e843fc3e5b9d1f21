// torus train: submit a gang run and stream every rank's output; torus train status | stop | list.
#include <algorithm>
#include <iostream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "torus/cli/command_util.h"
#include "torus/cli/commands.h"
#include "torus/cli/pg_spec.h"
#include "torus/client/run_follower.h"
#include "torus/common/resources.h"
#include "torus/common/status.h"
#include "torus/train/run_spec.h"

namespace torus::cli {
namespace {

// `--resources-per-worker '{"TPU": 1}'` -> fixed-point amounts; errors name the flag.
absl::StatusOr<ResourceSet> ParseResourcesFlag(const std::string& flag, const std::string& text) {
  auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError(flag + ": must be a JSON object, e.g. '{\"TPU\": 1}'");
  }
  ResourceSet resources;
  for (const auto& [name, value] : parsed.items()) {
    if (absl::Status valid = ValidateResourceName(name); !valid.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": ", valid.message()));
    }
    if (!value.is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": \"", name, "\" must be a non-negative number"));
    }
    auto fixed = ToFixed(value.get<double>());
    if (!fixed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": \"", name, "\": ", fixed.status().message()));
    }
    resources.SetFixed(name, *fixed);
  }
  return resources;
}

// The run `torus train` asks for. Only the flags' forms are checked here; the head validates the values (PlanRun).
absl::StatusOr<train::RunSpec> RunSpecFromFlags(const TrainFlags& flags) {
  train::RunSpec spec;
  train::ScalingConfig& scaling = spec.scaling;
  scaling.num_workers = flags.num_workers;
  if (!flags.accelerator_type.empty() || !flags.topology.empty()) {
    scaling.use_tpu = true;
    scaling.accelerator_type = flags.accelerator_type;
    scaling.topology = flags.topology;
    scaling.num_slices = flags.num_slices;
  }
  scaling.use_gpu = flags.use_gpu;
  scaling.chips_per_host = flags.chips_per_host;
  if (!flags.resources_per_worker.empty()) {
    TORUS_ASSIGN_OR_RETURN(scaling.resources_per_worker,
                           ParseResourcesFlag("--resources-per-worker", flags.resources_per_worker));
  }
  if (!flags.placement_strategy.empty()) scaling.placement_strategy = flags.placement_strategy;
  if (!flags.label_selector.empty()) {
    TORUS_ASSIGN_OR_RETURN(scaling.label_selector, ParseSelectorJson("--label-selector", flags.label_selector));
  }
  for (const std::string& text : flags.fallbacks) {
    TORUS_ASSIGN_OR_RETURN(rpc::SliceShapeProto shape, ParseFallbackShape(text));
    // Without :NUM_SLICES a fallback takes the primary's number of slices (0).
    const bool slices_given = std::count(text.begin(), text.end(), ':') == 2;
    scaling.fallbacks.push_back({shape.accelerator_type(), shape.topology(),
                                 slices_given ? static_cast<int>(shape.num_slices()) : 0, std::nullopt});
  }
  spec.run.name = flags.name;
  spec.run.storage_path = flags.storage_path;
  spec.run.max_failures = flags.max_failures;
  spec.run.checkpoints_to_keep = flags.checkpoints_to_keep;
  spec.run.placement_timeout_s = flags.placement_timeout_s;
  spec.entrypoint = flags.command;
  TORUS_ASSIGN_OR_RETURN(spec.env, ParseEnvFlags(flags.env));
  return spec;
}

}  // namespace

int FollowRunLogs(client::HttpApiClient& http, const std::string& id, bool follow, std::optional<int> rank,
                  int only_attempt) {
  auto run = client::FollowRun(http, id, {.follow = follow, .rank = rank, .attempt = only_attempt});
  if (!run.ok()) return FailCommand("logs", run.status());
  return (*run)["status"] == "SUCCEEDED" || !follow ? 0 : 1;
}

int CmdTrain(const HeadFlags& head, const TrainFlags& flags) {
  const std::string command = "train";
  if (flags.command.empty()) return FailCommand(command, absl::InvalidArgumentError("give the command after --"));
  auto spec = RunSpecFromFlags(flags);
  if (!spec.ok()) return FailCommand(command, spec.status());
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand(command, http.status());
  auto locations = UploadLocations(**http, flags.working_dir, flags.py_modules, flags.excludes);
  if (!locations.ok()) return FailCommand(command, locations.status());
  spec->working_dir = locations->working_dir;
  spec->py_modules = locations->py_modules;
  auto run = (*http)->SubmitRun(*spec);
  if (!run.ok()) return FailCommand(command, run.status());
  std::cerr << "[torus] run " << run->name << " submitted as " << run->run_id << "\n";
  if (flags.no_wait) {
    std::cout << run->run_id << "\n";
    return 0;
  }
  return FollowRunLogs(**http, run->run_id, /*follow=*/true, std::nullopt, 0);
}

int CmdTrainStatus(const HeadFlags& head, const std::string& id, bool json) {
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand("train status", http.status());
  auto run = (*http)->GetRun(id);
  if (!run.ok()) return FailCommand("train status", run.status());
  if (json) {
    std::cout << run->dump(2) << "\n";
    return 0;
  }
  const auto& r = *run;
  std::cout << r["name"].get<std::string>() << " (" << r["run_id"].get<std::string>() << ")  "
            << r["status"].get<std::string>() << "  " << r["message"].get<std::string>() << "\n"
            << "  workers " << r["num_workers"] << ", failures " << r["failures"] << " of max " << r["max_failures"]
            << ", storage " << r["storage_path"].get<std::string>() << "\n";
  if (r.contains("goodput")) std::cout << "  " << client::GoodputLine(r["goodput"]) << "\n";
  for (const auto& a : r["attempts"]) {
    std::cout << "  attempt " << a["attempt"] << ": " << a["ranks"].size() << " ranks"
              << (a["checkpoint_dir"].get<std::string>().empty() ? "" : ", from " + a["checkpoint_dir"].get<std::string>())
              << (a["end_reason"].get<std::string>().empty() ? "" : "; ended: " + a["end_reason"].get<std::string>())
              << "\n";
    client::PrintDetails(std::cout, "    ", a);
    if (!a["metrics"].empty()) {
      const auto& last = a["metrics"].back();
      std::cout << "    last report: step " << last["step"] << " " << last["metrics"].dump() << "\n";
    }
  }
  for (const auto& c : r["checkpoints"]) {
    std::cout << "  checkpoint step " << c["step"] << ": " << c["dir"].get<std::string>() << "\n";
  }
  return 0;
}

int CmdTrainStop(const HeadFlags& head, const std::string& id) {
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand("train stop", http.status());
  auto stopped = (*http)->StopRun(id);
  if (!stopped.ok()) return FailCommand("train stop", stopped.status());
  std::cout << id << (*stopped ? " stopped" : " had already ended") << "\n";
  return 0;
}

int CmdTrainList(const HeadFlags& head, bool json) {
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand("train list", http.status());
  auto runs = (*http)->ListRuns();
  if (!runs.ok()) return FailCommand("train list", runs.status());
  if (json) {
    std::cout << runs->dump(2) << "\n";
    return 0;
  }
  for (const auto& r : *runs) {
    std::cout << r["run_id"].get<std::string>() << "  " << r["name"].get<std::string>() << "  "
              << r["status"].get<std::string>() << "  attempt " << r["attempt"] << "  " << r["message"].get<std::string>()
              << "\n";
  }
  return 0;
}

}  // namespace torus::cli
