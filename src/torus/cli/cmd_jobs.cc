// torus job submit | status | logs | stop | list | delete, over the head's HTTP API.
#include <chrono>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torus/cli/commands.h"
#include "torus/cli/http_client.h"
#include "torus/cli/pg_spec.h"
#include "torus/common/resources.h"

namespace torus::cli {
namespace {

// Single-quotes an argument for /bin/sh unless it is plainly safe.
std::string ShellQuote(const std::string& arg) {
  bool safe = !arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                                    "_-.,/:=+@%") == std::string::npos;
  if (safe) return arg;
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Streams a job's output until it ends; returns the final status.
absl::StatusOr<std::string> FollowJob(HttpClient& http, const std::string& id) {
  int64_t offset = 0;
  while (true) {
    auto chunk = http.Get(absl::StrCat("/api/v0/jobs/", UrlEncode(id), "/logs?offset=", offset));
    if (!chunk.ok()) return chunk.status();
    std::string data = (*chunk)["data"].get<std::string>();
    std::cout << data << std::flush;
    offset = (*chunk)["next_offset"].get<int64_t>();
    std::string status = (*chunk)["status"].get<std::string>();
    if (data.empty() && IsTerminalStatus(status) && ((*chunk)["finished"].get<bool>() || status != "SUCCEEDED")) {
      return status;
    }
    if (data.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

int CmdJobSubmit(const HeadFlags& head, const JobSubmitFlags& flags) {
  const std::string command = "job submit";
  if (flags.command.empty()) return FailCommand(command, absl::InvalidArgumentError("give the command after --"));
  std::vector<std::string> quoted;
  for (const auto& a : flags.command) quoted.push_back(ShellQuote(a));
  nlohmann::json body = {{"entrypoint", absl::StrJoin(quoted, " ")}};
  if (!flags.submission_id.empty()) body["submission_id"] = flags.submission_id;
  auto env = ParseEnvFlags(flags.env);
  if (!env.ok()) return FailCommand(command, env.status());
  nlohmann::json runtime_env = nlohmann::json::object();
  if (!env->empty()) runtime_env["env_vars"] = *env;
  if (!flags.working_dir.empty()) runtime_env["working_dir"] = flags.working_dir;
  if (!runtime_env.empty()) body["runtime_env"] = runtime_env;
  if (!flags.resources.empty()) {
    auto parsed = nlohmann::json::parse(flags.resources, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) {
      return FailCommand(command, absl::InvalidArgumentError("--resources: must be a JSON object, e.g. '{\"CPU\": 1}'"));
    }
    body["entrypoint_resources"] = parsed;
  }
  if (!flags.label_selector.empty()) {
    auto selector = ParseSelectorJson("--label-selector", flags.label_selector);
    if (!selector.ok()) return FailCommand(command, selector.status());
    body["entrypoint_label_selector"] = *selector;
  }
  auto http = ConnectHttp(head.dashboard_address, head.token);
  if (!http.ok()) return FailCommand(command, http.status());
  auto reply = (*http)->Post("/api/jobs/", body);
  if (!reply.ok()) return FailCommand(command, reply.status());
  std::string id = (*reply)["submission_id"].get<std::string>();
  std::cerr << "job " << id << " submitted\n";
  if (flags.no_wait) {
    std::cout << id << "\n";
    return 0;
  }
  auto status = FollowJob(**http, id);
  if (!status.ok()) return FailCommand(command, status.status());
  auto job = (*http)->Get("/api/jobs/" + UrlEncode(id));
  std::string message = job.ok() ? (*job)["message"].get<std::string>() : "";
  std::cerr << "job " << id << " " << *status << (message.empty() ? "" : ": " + message) << "\n";
  return *status == "SUCCEEDED" ? 0 : 1;
}

int CmdJobStatus(const HeadFlags& head, const std::string& id, bool json) {
  auto http = ConnectHttp(head.dashboard_address, head.token);
  if (!http.ok()) return FailCommand("job status", http.status());
  auto job = (*http)->Get("/api/jobs/" + UrlEncode(id));
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
  auto http = ConnectHttp(head.dashboard_address, head.token);
  if (!http.ok()) return FailCommand("job logs", http.status());
  if (id.rfind("run-", 0) == 0 || rank) return FollowRunLogs(**http, id, follow, rank, attempt);
  if (follow) {
    auto status = FollowJob(**http, id);
    return status.ok() ? 0 : FailCommand("job logs", status.status());
  }
  auto logs = (*http)->Get("/api/jobs/" + UrlEncode(id) + "/logs");
  if (!logs.ok()) return FailCommand("job logs", logs.status());
  std::cout << (*logs)["logs"].get<std::string>();
  return 0;
}

int CmdJobStop(const HeadFlags& head, const std::string& id) {
  auto http = ConnectHttp(head.dashboard_address, head.token);
  if (!http.ok()) return FailCommand("job stop", http.status());
  auto reply = id.rfind("run-", 0) == 0 ? (*http)->Post("/api/v0/runs/" + UrlEncode(id) + "/stop", {})
                                        : (*http)->Post("/api/jobs/" + UrlEncode(id) + "/stop", {});
  if (!reply.ok()) return FailCommand("job stop", reply.status());
  std::cout << id << ((*reply)["stopped"].get<bool>() ? " stopping" : " had already ended") << "\n";
  return 0;
}

int CmdJobList(const HeadFlags& head, bool json) {
  auto http = ConnectHttp(head.dashboard_address, head.token);
  if (!http.ok()) return FailCommand("job list", http.status());
  auto jobs = (*http)->Get("/api/jobs/");
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
  auto http = ConnectHttp(head.dashboard_address, head.token);
  if (!http.ok()) return FailCommand("job delete", http.status());
  auto reply = (*http)->Delete("/api/jobs/" + UrlEncode(id));
  if (!reply.ok()) return FailCommand("job delete", reply.status());
  std::cout << id << " deleted\n";
  return 0;
}

}  // namespace torus::cli
