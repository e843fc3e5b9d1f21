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
#include "torus/client/http_api_client.h"

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

// SUCCEEDED, FAILED or STOPPED: a job or run that will not change again.
bool IsTerminalStatus(const std::string& status);

// Rides out a restart of the head while a command follows a job's or run's output. A call that fails with
// Unavailable is repeated, with a back-off doubling from 100 ms to 2 s, until the head answers or the outage has
// lasted `max_wait`; stderr says once when the outage starts ("<prefix>the head is unreachable (<reason>); waiting
// for it") and once when it ends ("<prefix>the head is back"). The caller keeps its offsets, so no output is lost
// or repeated. Not thread-safe; one per follower.
class HeadWaiter {
 public:
  static constexpr std::chrono::milliseconds kFirstDelay{100};
  static constexpr std::chrono::milliseconds kMaxDelay{2000};
  static constexpr std::chrono::milliseconds kMaxWait{120'000};

  // `prefix` starts each message ("[torus] " for runs, "" for jobs); a zero `max_wait` never waits.
  explicit HeadWaiter(std::string prefix, std::chrono::milliseconds max_wait = kMaxWait)
      : prefix_(std::move(prefix)), max_wait_(max_wait) {}

  // call()'s result (an absl::StatusOr or absl::Status) once it is anything but Unavailable, or its last
  // Unavailable error when the head stayed away for max_wait.
  template <typename Call>
  auto Retry(Call call) -> decltype(call()) {
    while (true) {
      auto result = call();
      if (!WaitAgain(StatusOf(result))) return result;
    }
  }

 private:
  template <typename T>
  static absl::Status StatusOf(const absl::StatusOr<T>& result) { return result.status(); }
  static absl::Status StatusOf(const absl::Status& result) { return result; }

  // After a call's status: whether to call again (having slept); says when an outage starts and ends.
  bool WaitAgain(const absl::Status& status);

  std::string prefix_;
  std::chrono::milliseconds max_wait_;
  std::optional<std::chrono::steady_clock::time_point> outage_since_;  // set while the head is unreachable
  std::chrono::milliseconds delay_ = kFirstDelay;
};

}  // namespace torus::cli
