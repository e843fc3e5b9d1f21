#include "torus/cli/http_client.h"

#include <httplib.h>

#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace torus::cli {
namespace {

absl::StatusOr<nlohmann::json> Interpret(const httplib::Result& result, const std::string& address) {
  if (!result) {
    return absl::UnavailableError(
        absl::StrCat("head HTTP API at ", address, " is not reachable: ", httplib::to_string(result.error())));
  }
  auto body = nlohmann::json::parse(result->body, nullptr, false);
  if (result->status >= 200 && result->status < 300) {
    if (body.is_discarded()) return absl::InternalError("the head answered with something that is not JSON");
    return body;
  }
  std::string message = !body.is_discarded() && body.is_object() && body.contains("error")
                            ? body["error"].get<std::string>()
                            : result->body;
  switch (result->status) {
    case 400: return absl::InvalidArgumentError(message);
    case 401: return absl::UnauthenticatedError(message);
    case 404: return absl::NotFoundError(message);
    case 409: return absl::FailedPreconditionError(message);
    default: return absl::InternalError(absl::StrCat("HTTP ", result->status, ": ", message));
  }
}

}  // namespace

HttpClient::HttpClient(const client::HeadEndpoint& endpoint)
    : address_(endpoint.address), client_(std::make_unique<httplib::Client>("http://" + endpoint.address)) {
  client_->set_bearer_token_auth(endpoint.token.c_str());
  client_->set_connection_timeout(5, 0);
  client_->set_read_timeout(60, 0);
  client_->set_keep_alive(true);
}

HttpClient::~HttpClient() = default;

absl::StatusOr<nlohmann::json> HttpClient::Get(const std::string& path) { return Interpret(client_->Get(path), address_); }

absl::StatusOr<nlohmann::json> HttpClient::Post(const std::string& path, const nlohmann::json& body) {
  return Interpret(client_->Post(path, body.dump(), "application/json"), address_);
}

absl::StatusOr<nlohmann::json> HttpClient::Delete(const std::string& path) {
  return Interpret(client_->Delete(path), address_);
}

std::string UrlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += absl::StrFormat("%%%02X", c);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<HttpClient>> ConnectHttp(const std::optional<std::string>& dashboard_address,
                                                        const std::optional<std::string>& token) {
  auto endpoint = client::ResolveHttp(dashboard_address, token, client::TempRoot());
  if (!endpoint.ok()) return endpoint.status();
  return std::make_unique<HttpClient>(*endpoint);
}

int FailCommand(const std::string& command, const absl::Status& status) {
  std::cerr << "torus " << command << ": " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

absl::StatusOr<nlohmann::json> ParseEnvFlags(const std::vector<std::string>& items) {
  nlohmann::json env = nlohmann::json::object();
  for (const std::string& kv : items) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat("--env \"", kv, "\": expected KEY=VALUE"));
    }
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

bool IsTerminalStatus(const std::string& status) {
  return status == "SUCCEEDED" || status == "FAILED" || status == "STOPPED";
}

}  // namespace torus::cli
