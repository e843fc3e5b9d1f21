// torus train: submit a gang run and stream every rank's output; torus train status | stop | list.
#include <chrono>
#include <iostream>
#include <map>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "torus/cli/commands.h"
#include "torus/cli/http_client.h"
#include "torus/cli/pg_spec.h"

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

// Reads what is new of each rank of `attempt` (or only rank `only`); returns whether anything came. An error is
// returned only for the one rank asked for; with all ranks, a lost host's log is skipped and the others go on.
absl::StatusOr<bool> Drain(HttpClient& http, const std::string& id, int attempt, int ranks, std::optional<int> only,
                           std::map<int, int64_t>& offsets, RankPrinter& printer) {
  bool any = false;
  for (int r = 0; r < (only ? *only + 1 : ranks); ++r) {
    if (only && *only != r) continue;
    auto chunk = http.Get(absl::StrCat("/api/v0/runs/", UrlEncode(id), "/logs?rank=", r, "&attempt=", attempt,
                                       "&offset=", offsets[r]));
    if (!chunk.ok()) {
      if (only) return chunk.status();
      continue;
    }
    std::string data = (*chunk)["data"].get<std::string>();
    offsets[r] = (*chunk)["next_offset"].get<int64_t>();
    if (!data.empty()) {
      printer.Feed(r, data, !only.has_value());
      any = true;
    }
  }
  return any;
}

}  // namespace

int FollowRunLogs(HttpClient& http, const std::string& id, bool follow, std::optional<int> rank, int only_attempt) {
  int shown_attempt = 0;
  std::map<int, int64_t> offsets;
  RankPrinter printer;
  while (true) {
    auto run = http.Get("/api/v0/runs/" + UrlEncode(id));
    if (!run.ok()) return FailCommand("logs", run.status());
    const int attempt = only_attempt > 0 ? only_attempt : (*run)["attempt"].get<int>();
    const std::string status = (*run)["status"].get<std::string>();
    if (attempt != shown_attempt && attempt > 0) {
      if (shown_attempt > 0) {
        auto drained = Drain(http, id, shown_attempt,
                             static_cast<int>((*run)["attempts"][shown_attempt - 1]["ranks"].size()), rank, offsets,
                             printer);
        if (!drained.ok()) return FailCommand("logs", drained.status());
        printer.Flush(!rank.has_value());
        const auto& ended = (*run)["attempts"][shown_attempt - 1];
        std::cerr << "[torus] attempt " << shown_attempt << " ended: " << ended["end_reason"].get<std::string>()
                  << "\n";
      }
      const auto& a = (*run)["attempts"][attempt - 1];
      std::string from = a["checkpoint_dir"].get<std::string>();
      std::cerr << "[torus] attempt " << attempt << ": " << a["ranks"].size() << " workers"
                << (from.empty() ? "" : ", resuming from " + from) << "\n";
      shown_attempt = attempt;
      offsets.clear();
    }
    bool any = false;
    if (shown_attempt > 0) {
      const int ranks = static_cast<int>((*run)["attempts"][shown_attempt - 1]["ranks"].size());
      auto drained = Drain(http, id, shown_attempt, ranks, rank, offsets, printer);
      if (!drained.ok()) return FailCommand("logs", drained.status());
      any = *drained;
    }
    if (!follow || (IsTerminalStatus(status) && !any)) {
      printer.Flush(!rank.has_value());
      if (follow || IsTerminalStatus(status)) {
        std::cerr << "[torus] run " << (*run)["name"].get<std::string>() << " (" << id << ") " << status << ": "
                  << (*run)["message"].get<std::string>() << "\n";
      }
      return status == "SUCCEEDED" || !follow ? 0 : 1;
    }
    if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
}

int CmdTrain(const HeadFlags& head, const TrainFlags& flags) {
  const std::string command = "train";
  if (flags.command.empty()) return FailCommand(command, absl::InvalidArgumentError("give the command after --"));
  nlohmann::json scaling = nlohmann::json::object();
  if (flags.num_workers) scaling["num_workers"] = *flags.num_workers;
  if (!flags.accelerator_type.empty() || !flags.topology.empty()) {
    scaling["use_tpu"] = true;
    scaling["accelerator_type"] = flags.accelerator_type;
    scaling["topology"] = flags.topology;
    scaling["num_slices"] = flags.num_slices;
  }
  if (flags.use_gpu) scaling["use_gpu"] = true;
  if (flags.chips_per_host) scaling["chips_per_host"] = *flags.chips_per_host;
  if (!flags.resources_per_worker.empty()) {
    auto parsed = nlohmann::json::parse(flags.resources_per_worker, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) {
      return FailCommand(command, absl::InvalidArgumentError("--resources-per-worker: must be a JSON object, e.g. '{\"TPU\": 1}'"));
    }
    scaling["resources_per_worker"] = parsed;
  }
  if (!flags.placement_strategy.empty()) scaling["placement_strategy"] = flags.placement_strategy;
  if (!flags.label_selector.empty()) {
    auto selector = ParseSelectorJson("--label-selector", flags.label_selector);
    if (!selector.ok()) return FailCommand(command, selector.status());
    scaling["label_selector"] = *selector;
  }
  nlohmann::json fallbacks = nlohmann::json::array();
  for (const std::string& text : flags.fallbacks) {
    auto shape = ParseFallbackShape(text);
    if (!shape.ok()) return FailCommand(command, shape.status());
    nlohmann::json f = {{"accelerator_type", shape->accelerator_type()}, {"topology", shape->topology()}};
    if (std::count(text.begin(), text.end(), ':') == 2) f["num_slices"] = shape->num_slices();
    fallbacks.push_back(f);
  }
  if (!fallbacks.empty()) scaling["fallbacks"] = fallbacks;
  nlohmann::json run_config = {{"max_failures", flags.max_failures}};
  if (!flags.name.empty()) run_config["name"] = flags.name;
  if (!flags.storage_path.empty()) run_config["storage_path"] = flags.storage_path;
  if (flags.checkpoints_to_keep) run_config["checkpoints_to_keep"] = *flags.checkpoints_to_keep;
  auto env = ParseEnvFlags(flags.env);
  if (!env.ok()) return FailCommand(command, env.status());
  nlohmann::json body = {{"scaling_config", scaling}, {"run_config", run_config}, {"entrypoint", flags.command},
                         {"env", *env}};
  if (!flags.working_dir.empty()) body["working_dir"] = flags.working_dir;

  auto http = ConnectHttp(head.dashboard_address, head.token);
  if (!http.ok()) return FailCommand(command, http.status());
  auto reply = (*http)->Post("/api/v0/runs", body);
  if (!reply.ok()) return FailCommand(command, reply.status());
  std::string id = (*reply)["run_id"].get<std::string>();
  std::cerr << "[torus] run " << (*reply)["name"].get<std::string>() << " submitted as " << id << "\n";
  if (flags.no_wait) {
    std::cout << id << "\n";
    return 0;
  }
  return FollowRunLogs(**http, id, /*follow=*/true, std::nullopt, 0);
}

int CmdTrainStatus(const HeadFlags& head, const std::string& id, bool json) {
  auto http = ConnectHttp(head.dashboard_address, head.token);
  if (!http.ok()) return FailCommand("train status", http.status());
  auto run = (*http)->Get("/api/v0/runs/" + UrlEncode(id));
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
  for (const auto& a : r["attempts"]) {
    std::cout << "  attempt " << a["attempt"] << ": " << a["ranks"].size() << " ranks"
              << (a["checkpoint_dir"].get<std::string>().empty() ? "" : ", from " + a["checkpoint_dir"].get<std::string>())
              << (a["end_reason"].get<std::string>().empty() ? "" : "; ended: " + a["end_reason"].get<std::string>())
              << "\n";
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
  auto http = ConnectHttp(head.dashboard_address, head.token);
  if (!http.ok()) return FailCommand("train stop", http.status());
  auto reply = (*http)->Post("/api/v0/runs/" + UrlEncode(id) + "/stop", {});
  if (!reply.ok()) return FailCommand("train stop", reply.status());
  std::cout << id << ((*reply)["stopped"].get<bool>() ? " stopped" : " had already ended") << "\n";
  return 0;
}

int CmdTrainList(const HeadFlags& head, bool json) {
  auto http = ConnectHttp(head.dashboard_address, head.token);
  if (!http.ok()) return FailCommand("train list", http.status());
  auto runs = (*http)->Get("/api/v0/runs");
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
