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

int Fail(const std::string& command, const absl::Status& status) {
  std::cerr << "torus " << command << ": " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

absl::StatusOr<std::unique_ptr<HttpClient>> Connect(const HeadFlags& head) {
  auto endpoint = client::ResolveHttp(head.dashboard_address, head.token, client::TempRoot());
  if (!endpoint.ok()) return endpoint.status();
  return std::make_unique<HttpClient>(*endpoint);
}

// Single-quotes an argument for /bin/sh unless it is plainly safe.
std::string ShellQuote(const std::string& arg) {
  bool safe = !arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                                                    "_-.,/:=+@%") == std::string::npos;
  if (safe) return arg;
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool IsTerminal(const std::string& status) {
  return status == "SUCCEEDED" || status == "FAILED" || status == "STOPPED";
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
    if (data.empty() && IsTerminal(status) && ((*chunk)["finished"].get<bool>() || status != "SUCCEEDED")) {
      return status;
    }
    if (data.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace

int CmdJobSubmit(const HeadFlags& head, const JobSubmitFlags& flags) {
  const std::string command = "job submit";
  if (flags.command.empty()) return Fail(command, absl::InvalidArgumentError("give the command after --"));
  std::vector<std::string> quoted;
  for (const auto& a : flags.command) quoted.push_back(ShellQuote(a));
  nlohmann::json body = {{"entrypoint", absl::StrJoin(quoted, " ")}};
  if (!flags.submission_id.empty()) body["submission_id"] = flags.submission_id;
  nlohmann::json env = nlohmann::json::object();
  for (const std::string& kv : flags.env) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Fail(command, absl::InvalidArgumentError(absl::StrCat("--env \"", kv, "\": expected KEY=VALUE")));
    }
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  nlohmann::json runtime_env = nlohmann::json::object();
  if (!env.empty()) runtime_env["env_vars"] = env;
  if (!flags.working_dir.empty()) runtime_env["working_dir"] = flags.working_dir;
  if (!runtime_env.empty()) body["runtime_env"] = runtime_env;
  if (!flags.resources.empty()) {
    auto parsed = nlohmann::json::parse(flags.resources, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) {
      return Fail(command, absl::InvalidArgumentError("--resources: must be a JSON object, e.g. '{\"CPU\": 1}'"));
    }
    body["entrypoint_resources"] = parsed;
  }
  if (!flags.label_selector.empty()) {
    auto selector = ParseSelectorJson("--label-selector", flags.label_selector);
    if (!selector.ok()) return Fail(command, selector.status());
    body["entrypoint_label_selector"] = *selector;
  }
  auto http = Connect(head);
  if (!http.ok()) return Fail(command, http.status());
  auto reply = (*http)->Post("/api/jobs/", body);
  if (!reply.ok()) return Fail(command, reply.status());
  std::string id = (*reply)["submission_id"].get<std::string>();
  std::cerr << "job " << id << " submitted\n";
  if (flags.no_wait) {
    std::cout << id << "\n";
    return 0;
  }
  auto status = FollowJob(**http, id);
  if (!status.ok()) return Fail(command, status.status());
  auto job = (*http)->Get("/api/jobs/" + UrlEncode(id));
  std::string message = job.ok() ? (*job)["message"].get<std::string>() : "";
  std::cerr << "job " << id << " " << *status << (message.empty() ? "" : ": " + message) << "\n";
  return *status == "SUCCEEDED" ? 0 : 1;
}

int CmdJobStatus(const HeadFlags& head, const std::string& id, bool json) {
  auto http = Connect(head);
  if (!http.ok()) return Fail("job status", http.status());
  auto job = (*http)->Get("/api/jobs/" + UrlEncode(id));
  if (!job.ok()) return Fail("job status", job.status());
  if (json) {
    std::cout << job->dump(2) << "\n";
  } else {
    std::cout << id << "  " << (*job)["status"].get<std::string>() << "  " << (*job)["message"].get<std::string>()
              << "\n";
  }
  return 0;
}

int CmdJobLogs(const HeadFlags& head, const std::string& id, bool follow, std::optional<int> rank, int attempt) {
  auto http = Connect(head);
  if (!http.ok()) return Fail("job logs", http.status());
  if (id.rfind("run-", 0) == 0 || rank) return FollowRunLogs(**http, id, follow, rank, attempt);
  if (follow) {
    auto status = FollowJob(**http, id);
    return status.ok() ? 0 : Fail("job logs", status.status());
  }
  auto logs = (*http)->Get("/api/jobs/" + UrlEncode(id) + "/logs");
  if (!logs.ok()) return Fail("job logs", logs.status());
  std::cout << (*logs)["logs"].get<std::string>();
  return 0;
}

int CmdJobStop(const HeadFlags& head, const std::string& id) {
  auto http = Connect(head);
  if (!http.ok()) return Fail("job stop", http.status());
  auto reply = id.rfind("run-", 0) == 0 ? (*http)->Post("/api/v0/runs/" + UrlEncode(id) + "/stop", {})
                                        : (*http)->Post("/api/jobs/" + UrlEncode(id) + "/stop", {});
  if (!reply.ok()) return Fail("job stop", reply.status());
  std::cout << id << ((*reply)["stopped"].get<bool>() ? " stopping" : " had already ended") << "\n";
  return 0;
}

int CmdJobList(const HeadFlags& head, bool json) {
  auto http = Connect(head);
  if (!http.ok()) return Fail("job list", http.status());
  auto jobs = (*http)->Get("/api/jobs/");
  if (!jobs.ok()) return Fail("job list", jobs.status());
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
  auto http = Connect(head);
  if (!http.ok()) return Fail("job delete", http.status());
  auto reply = (*http)->Delete("/api/jobs/" + UrlEncode(id));
  if (!reply.ok()) return Fail("job delete", reply.status());
  std::cout << id << " deleted\n";
  return 0;
}

}  // namespace torus::cli
