// A small client of the head's HTTP API (jobs and gang runs), with the cluster token.
// Thread-safety: not thread-safe; one per command.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "torus/client/session.h"

namespace httplib {
class Client;
}

namespace torus::cli {

class HttpClient {
 public:
  explicit HttpClient(const client::HeadEndpoint& endpoint);
  ~HttpClient();

  // JSON of a 2xx answer; otherwise an error with the head's message (from {"error"} or the text body):
  // NotFound for 404, InvalidArgument for 400, Unauthenticated for 401, Unavailable when unreachable.
  absl::StatusOr<nlohmann::json> Get(const std::string& path);
  absl::StatusOr<nlohmann::json> Post(const std::string& path, const nlohmann::json& body);
  absl::StatusOr<nlohmann::json> Delete(const std::string& path);

 private:
  std::string address_;
  std::unique_ptr<httplib::Client> client_;
};

// Percent-encodes a path segment or query value.
std::string UrlEncode(const std::string& text);

// A client of the head found through --dashboard-address/--token, the environment, or the latest session.
absl::StatusOr<std::unique_ptr<HttpClient>> ConnectHttp(const std::optional<std::string>& dashboard_address,
                                                        const std::optional<std::string>& token);

// "torus COMMAND: message" on stderr; exit code 2 for bad input, else 1.
int FailCommand(const std::string& command, const absl::Status& status);

// Repeated `--env KEY=VALUE` flags as a JSON object; InvalidArgument names a malformed item.
absl::StatusOr<nlohmann::json> ParseEnvFlags(const std::vector<std::string>& items);

// SUCCEEDED, FAILED or STOPPED: a job or run that will not change again.
bool IsTerminalStatus(const std::string& status);

}  // namespace torus::cli
