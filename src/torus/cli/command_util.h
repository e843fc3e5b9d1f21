// What the job and train commands share: reaching the head's HTTP API, following a run's output, riding out a
// restart of the head while following, reporting a failure, and reading --env flags.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "torus/cli/commands.h"
#include "torus/client/head_waiter.h"
#include "torus/client/http_api_client.h"
#include "torus/client/run_follower.h"

namespace torus::cli {

// A client of the head's HTTP API found through --dashboard-address/--token, the environment, or the latest session.
absl::StatusOr<std::unique_ptr<client::HttpApiClient>> ConnectHttpApi(const HeadFlags& head);

// Prints a run's output (`torus train`, `torus job logs RUN`): every rank with a "[rank N] " prefix, or one rank
// bare; with `follow`, until the run ends, waiting out a restart of the head. Returns the exit code.
int FollowRunLogs(client::HttpApiClient& http, const std::string& id, bool follow, std::optional<int> rank,
                  int attempt);

// "torus COMMAND: message" on stderr; exit code 2 for bad input, else 1.
int FailCommand(const std::string& command, const absl::Status& status);

// The --working-dir and --py-module flags as the head takes them: local directories are packed (leaving out
// `excludes` and what .gitignore files name) and uploaded unless the head has them; package URIs pass as they are.
// Says on stderr what was uploaded.
struct Locations {
  std::string working_dir;
  std::vector<std::string> py_modules;
};
absl::StatusOr<Locations> UploadLocations(client::HttpApiClient& http, const std::string& working_dir,
                                          const std::vector<std::string>& py_modules,
                                          const std::vector<std::string>& excludes);

// Repeated `--env KEY=VALUE` flags as a map (a later KEY wins); InvalidArgument names a malformed item.
absl::StatusOr<std::map<std::string, std::string>> ParseEnvFlags(const std::vector<std::string>& items);

// One argument for /bin/sh: as it is when plainly safe (letters, digits and _-.,/:=+@%), else single-quoted.
std::string ShellQuote(const std::string& arg);

using client::HeadWaiter;
using client::IsTerminalStatus;

}  // namespace torus::cli
