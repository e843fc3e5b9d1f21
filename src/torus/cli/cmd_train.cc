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
#include "torus/common/resources.h"
#include "torus/common/status.h"
#include "torus/train/run_spec.h"

namespace torus::cli {
namespace {

// Prints whole lines of each rank with a "[rank N] " prefix; keeps partial lines until they end.
class RankPrinter {
 public:
  void Feed(int rank, const std::string& data, bool prefix) {
    std::string& buffer = partial_[rank];
    buffer += data;
    size_t start = 0, nl;
    while ((nl = buffer.find('\n', start)) != std::string::npos) {
      if (prefix) std::cout << "[rank " << rank << "] ";
      std::cout << buffer.substr(start, nl - start + 1);
      start = nl + 1;
    }
    buffer.erase(0, start);
    std::cout.flush();
  }
  void Flush(bool prefix) {
    for (auto& [rank, buffer] : partial_) {
      if (buffer.empty()) continue;
      if (prefix) std::cout << "[rank " << rank << "] ";
      std::cout << buffer << "\n";
      buffer.clear();
    }
  }

 private:
  std::map<int, std::string> partial_;
};

struct Drained {
  bool any = false;       // something came
  bool complete = false;  // every rank read was read to its worker's end
};

// Reads what is new of each rank of `attempt` (or only rank `only`). An error is returned only for the one rank
// asked for; with all ranks, a lost host's log is skipped and the others go on. An unreachable head is waited for
// (`waiter`); if it stays away, that error is returned whatever the ranks.
absl::StatusOr<Drained> Drain(client::HttpApiClient& http, HeadWaiter& waiter, const std::string& id, int attempt,
                              int ranks, std::optional<int> only, std::map<int, int64_t>& offsets,
                              RankPrinter& printer) {
  if (only) {
    auto chunk = waiter.Retry([&] { return http.ReadRunLog(id, *only, attempt, offsets[*only]); });
    if (!chunk.ok()) return chunk.status();
    offsets[*only] = chunk->next_offset;
    if (!chunk->data.empty()) printer.Feed(*only, chunk->data, false);
    return Drained{!chunk->data.empty(), chunk->finished};
  }
  // Every rank in one request (the head reads them from their agents in parallel).
  std::vector<int64_t> from(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) from[static_cast<size_t>(r)] = offsets[r];
  auto logs = waiter.Retry([&] { return http.ReadRunLogs(id, attempt, from); });
  if (!logs.ok()) return logs.status();
  Drained drained{false, true};
  for (int r = 0; r < static_cast<int>(logs->ranks.size()); ++r) {
    const auto& chunk = logs->ranks[static_cast<size_t>(r)];
    if (!chunk.ok()) continue;  // that rank's host is unreachable: the others go on
    offsets[r] = chunk->next_offset;
    drained.complete = drained.complete && chunk->finished;
    if (!chunk->data.empty()) {
      printer.Feed(r, chunk->data, true);
      drained.any = true;
    }
  }
  return drained;
}

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

// "<prefix>| line" for each line of a failed rank's evidence (its last output, libtpu's error).
void PrintDetails(std::ostream& out, const std::string& prefix, const nlohmann::json& attempt) {
  const std::string details = attempt.value("end_details", "");
  std::istringstream lines(details);
  for (std::string line; std::getline(lines, line);) out << prefix << "| " << line << "\n";
}

// "goodput 87.3%: productive 52.1 s of 59.7 s (queued 1.0 s, startup 3.2 s, lost 2.0 s, restart 1.4 s)".
std::string GoodputLine(const nlohmann::json& goodput) {
  auto s = [&](const char* key) { return absl::StrFormat("%.1f s", goodput.value(key, 0.0)); };
  return absl::StrFormat("goodput %.1f%%: productive %s of %s (queued %s, startup %s, lost %s, restart %s)",
                         100.0 * goodput.value("goodput", 0.0), s("productive_s"), s("wall_s"), s("queued_s"),
                         s("startup_s"), s("lost_s"), s("restart_s"));
}

// A failed or stopped run's last attempt may still be waiting for its root cause (the failure window).
bool Settled(const nlohmann::json& run) {
  const auto& attempts = run["attempts"];
  return attempts.empty() || run["status"] == "SUCCEEDED" || attempts.back().value("explained", true);
}

}  // namespace

int FollowRunLogs(client::HttpApiClient& http, const std::string& id, bool follow, std::optional<int> rank,
                  int only_attempt) {
  // Ranks' output is read again at each change of the run, and at least this often while it runs.
  constexpr int64_t kOutputWaitMs = 1000;
  HeadWaiter waiter("[torus] ", follow ? HeadWaiter::kMaxWait : std::chrono::milliseconds(0));
  int shown_attempt = 0;
  std::map<int, int64_t> offsets;
  RankPrinter printer;
  // Where the wait for the run's next change resumes; read before the run, so that no change is missed.
  std::optional<client::EventCursor> cursor;
  while (true) {
    if (follow && !cursor) {
      auto now = waiter.Retry([&] { return http.EventsNow(); });
      if (!now.ok()) return FailCommand("logs", now.status());
      cursor = *now;
    }
    auto run = waiter.Retry([&] { return http.GetRun(id); });
    if (!run.ok()) return FailCommand("logs", run.status());
    const int attempt = only_attempt > 0 ? only_attempt : (*run)["attempt"].get<int>();
    const std::string status = (*run)["status"].get<std::string>();
    if (attempt != shown_attempt && attempt > 0) {
      if (shown_attempt > 0) {
        auto drained = Drain(http, waiter, id, shown_attempt,
                             static_cast<int>((*run)["attempts"][shown_attempt - 1]["ranks"].size()), rank, offsets,
                             printer);
        if (!drained.ok()) return FailCommand("logs", drained.status());
        printer.Flush(!rank.has_value());
        const auto& ended = (*run)["attempts"][shown_attempt - 1];
        std::cerr << "[torus] attempt " << shown_attempt << " ended: " << ended["end_reason"].get<std::string>()
                  << "\n";
        PrintDetails(std::cerr, "[torus]   ", ended);
      }
      const auto& a = (*run)["attempts"][attempt - 1];
      std::string from = a["checkpoint_dir"].get<std::string>();
      std::cerr << "[torus] attempt " << attempt << ": " << a["ranks"].size() << " workers"
                << (from.empty() ? "" : ", resuming from " + from) << "\n";
      shown_attempt = attempt;
      offsets.clear();
    }
    Drained drained;
    if (shown_attempt > 0) {
      const int ranks = static_cast<int>((*run)["attempts"][shown_attempt - 1]["ranks"].size());
      auto read = Drain(http, waiter, id, shown_attempt, ranks, rank, offsets, printer);
      if (!read.ok()) return FailCommand("logs", read.status());
      drained = *read;
    }
    const bool any = drained.any && !drained.complete;  // more may follow at once
    if (!follow || (IsTerminalStatus(status) && !any && Settled(*run))) {
      printer.Flush(!rank.has_value());
      if (follow || IsTerminalStatus(status)) {
        std::cerr << "[torus] run " << (*run)["name"].get<std::string>() << " (" << id << ") " << status << ": "
                  << (*run)["message"].get<std::string>() << "\n";
        if (status != "SUCCEEDED" && !(*run)["attempts"].empty()) {
          PrintDetails(std::cerr, "[torus]   ", (*run)["attempts"].back());
        }
        if (run->contains("goodput")) std::cerr << "[torus] " << GoodputLine((*run)["goodput"]) << "\n";
      }
      return status == "SUCCEEDED" || !follow ? 0 : 1;
    }
    if (any) continue;
    // Nothing new: wait for the run's next change (a worker's start or exit, a report, its status), or a second
    // for more output.
    const std::string run_id = (*run)["run_id"].get<std::string>();
    auto changes = waiter.Retry([&] { return http.WaitEvents(&*cursor, {.ids = {run_id}}, kOutputWaitMs); });
    if (changes.status().code() == absl::StatusCode::kOutOfRange) {
      cursor.reset();  // the head restarted (or dropped the events): read the run again
    } else if (!changes.ok()) {
      return FailCommand("logs", changes.status());
    }
  }
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
  if (r.contains("goodput")) std::cout << "  " << GoodputLine(r["goodput"]) << "\n";
  for (const auto& a : r["attempts"]) {
    std::cout << "  attempt " << a["attempt"] << ": " << a["ranks"].size() << " ranks"
              << (a["checkpoint_dir"].get<std::string>().empty() ? "" : ", from " + a["checkpoint_dir"].get<std::string>())
              << (a["end_reason"].get<std::string>().empty() ? "" : "; ended: " + a["end_reason"].get<std::string>())
              << "\n";
    PrintDetails(std::cout, "    ", a);
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
