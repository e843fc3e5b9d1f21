// Following a gang run as `torus train` and the Python trainers do: every rank's output as it comes (prefixed
// "[rank N] ", or one rank bare), a line per attempt ("[torus] attempt 2: 4 workers, resuming from ..."), the
// failed attempt's reason and evidence, and at the end the run's status, message and goodput. While ranks run, one
// read of all of them waits for the output of any or the end of all; otherwise the run's changes are waited for on
// the head's event stream (no polling). A restart of the head is waited out (HeadWaiter).
//
// Example:
//   auto run = torus::client::FollowRun(*http, "run-7037b84a20", {.follow = true});
//   if (run.ok() && (*run)["status"] == "SUCCEEDED") ...
//
// Thread-safety: one call per HttpApiClient at a time.
#pragma once

#include <functional>
#include <iostream>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "torus/client/http_api_client.h"

namespace torus::client {

struct FollowOptions {
  bool follow = true;            // until the run ends (and its cause is settled); false: what there is now
  std::optional<int> rank;       // only this rank, bare; default every rank, prefixed
  int attempt = 0;               // only this attempt; 0 = the current one, following new attempts
  std::ostream* out = &std::cout;  // the ranks' output
  std::ostream* err = &std::cerr;  // "[torus] ..." lines
  // Asked between reads (at least once a second); true stops the follow with Cancelled. The run goes on.
  std::function<bool()> cancelled;
};

// Prints the run's output until it ends (with `follow`), then returns the run's last view (GET /api/v0/runs/{id}).
// Errors: the head's (NotFound for an unknown run), Unavailable when the head stayed away for HeadWaiter::kMaxWait,
// Cancelled when options.cancelled said so.
absl::StatusOr<nlohmann::json> FollowRun(HttpApiClient& http, const std::string& id, const FollowOptions& options);

// SUCCEEDED, FAILED or STOPPED: a job or run that will not change again.
bool IsTerminalStatus(const std::string& status);

// "goodput 87.3%: productive 52.1 s of 59.7 s (queued 1.0 s, startup 3.2 s, lost 2.0 s, restart 1.4 s)".
std::string GoodputLine(const nlohmann::json& goodput);

// "<prefix>| line" for each line of a failed rank's evidence (its last output, libtpu's error).
void PrintDetails(std::ostream& out, const std::string& prefix, const nlohmann::json& attempt);

}  // namespace torus::client
