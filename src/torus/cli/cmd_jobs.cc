// torus job submit | status | logs | stop | list | delete, over the head's HTTP API.
#include <chrono>
#include <iostream>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "torus/cli/command_util.h"
#include "torus/cli/commands.h"
#include "torus/cli/pg_spec.h"

namespace torus::cli {
namespace {

// Parses `--resources '{"CPU": 1}'`: resource name -> amount (the head checks the names and amounts).
absl::StatusOr<std::map<std::string, double>> ParseJobResources(const std::string& text) {
  const std::string flag = "--resources";
  auto parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError(flag + ": must be a JSON object, e.g. '{\"CPU\": 1}'");
  }
  std::map<std::string, double> resources;
  for (const auto& [name, value] : parsed.items()) {
    if (!value.is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": \"", name, "\" must be a number, e.g. '{\"CPU\": 1}'"));
    }
    resources[name] = value.get<double>();
  }
  return resources;
}

// Streams a job's output until it ends, waiting out a restart of the head; returns the final status. Each read
// waits at the head for output or the job's end, so output shows as it is written and the end at once.
absl::StatusOr<std::string> FollowJob(client::HttpApiClient& http, const std::string& id, HeadWaiter& waiter) {
  constexpr int64_t kWaitMs = 20'000;
  int64_t offset = 0;
  while (true) {
    const auto asked = std::chrono::steady_clock::now();
    auto chunk = waiter.Retry([&] { return http.ReadJobLog(id, offset, kWaitMs); });
    if (!chunk.ok()) return chunk.status();
    std::cout << chunk->data << std::flush;
    offset = chunk->next_offset;
    if (chunk->data.empty() && IsTerminalStatus(chunk->status) &&
        (chunk->finished || chunk->status != "SUCCEEDED")) {
      return chunk->status;
    }
    // An empty answer that came at once is from a head that does not wait (an older one): do not ask it again at
    // once.
    if (chunk->data.empty() && std::chrono::steady_clock::now() - asked < std::chrono::milliseconds(20)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

}  // namespace

int CmdJobSubmit(const HeadFlags& head, const JobSubmitFlags& flags) {
  const std::string command = "job submit";
  if (flags.command.empty()) return FailCommand(command, absl::InvalidArgumentError("give the command after --"));
  client::JobSubmission job;
  std::vector<std::string> quoted;
  for (const auto& a : flags.command) quoted.push_back(ShellQuote(a));
  job.entrypoint = absl::StrJoin(quoted, " ");
  job.submission_id = flags.submission_id;
  auto env = ParseEnvFlags(flags.env);
  if (!env.ok()) return FailCommand(command, env.status());
  job.env_vars = *std::move(env);
  if (!flags.resources.empty()) {
    auto resources = ParseJobResources(flags.resources);
    if (!resources.ok()) return FailCommand(command, resources.status());
    job.resources = *std::move(resources);
  }
  if (!flags.label_selector.empty()) {
    auto selector = ParseSelectorJson("--label-selector", flags.label_selector);
    if (!selector.ok()) return FailCommand(command, selector.status());
    job.label_selector = *std::move(selector);
  }
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand(command, http.status());
  auto locations = UploadLocations(**http, flags.working_dir, flags.py_modules, flags.excludes);
  if (!locations.ok()) return FailCommand(command, locations.status());
  job.working_dir = locations->working_dir;
  job.py_modules = locations->py_modules;
  auto id = (*http)->SubmitJob(job);
  if (!id.ok()) return FailCommand(command, id.status());
  std::cerr << "job " << *id << " submitted\n";
  if (flags.no_wait) {
    std::cout << *id << "\n";
    return 0;
  }
  HeadWaiter waiter("");
  auto status = FollowJob(**http, *id, waiter);
  if (!status.ok()) return FailCommand(command, status.status());
  auto details = waiter.Retry([&] { return (*http)->GetJob(*id); });
  std::string message = details.ok() ? details->value("message", "") : "";
  std::cerr << "job " << *id << " " << *status << (message.empty() ? "" : ": " + message) << "\n";
  return *status == "SUCCEEDED" ? 0 : 1;
}

int CmdJobStatus(const HeadFlags& head, const std::string& id, bool json) {
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand("job status", http.status());
  auto job = (*http)->GetJob(id);
  if (!job.ok()) return FailCommand("job status", job.status());
  if (json) {
    std::cout << job->dump(2) << "\n";
  } else {
    std::cout << id << "  " << (*job)["status"].get<std::string>() << "  " << (*job)["message"].get<std::string>()
              << "\n";
  }
  return 0;
}

int CmdJobLogs(const HeadFlags& head, const std::string& id, bool follow, std::optional<int> rank, int attempt) {
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand("job logs", http.status());
  if (id.rfind("run-", 0) == 0 || rank) return FollowRunLogs(**http, id, follow, rank, attempt);
  if (follow) {
    HeadWaiter waiter("");
    auto status = FollowJob(**http, id, waiter);
    return status.ok() ? 0 : FailCommand("job logs", status.status());
  }
  auto logs = (*http)->JobLogs(id);
  if (!logs.ok()) return FailCommand("job logs", logs.status());
  std::cout << *logs;
  return 0;
}

int CmdJobStop(const HeadFlags& head, const std::string& id) {
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand("job stop", http.status());
  auto stopped = id.rfind("run-", 0) == 0 ? (*http)->StopRun(id) : (*http)->StopJob(id);
  if (!stopped.ok()) return FailCommand("job stop", stopped.status());
  std::cout << id << (*stopped ? " stopping" : " had already ended") << "\n";
  return 0;
}

int CmdJobList(const HeadFlags& head, bool json) {
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand("job list", http.status());
  auto jobs = (*http)->ListJobs();
  if (!jobs.ok()) return FailCommand("job list", jobs.status());
  if (json) {
    std::cout << jobs->dump(2) << "\n";
    return 0;
  }
  for (const auto& job : *jobs) {
    std::cout << job["submission_id"].get<std::string>() << "  " << job["status"].get<std::string>() << "  "
              << job["entrypoint"].get<std::string>() << "\n";
  }
  return 0;
}

int CmdJobDelete(const HeadFlags& head, const std::string& id) {
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand("job delete", http.status());
  absl::Status deleted = (*http)->DeleteJob(id);
  if (!deleted.ok()) return FailCommand("job delete", deleted);
  std::cout << id << " deleted\n";
  return 0;
}

}  // namespace torus::cli
