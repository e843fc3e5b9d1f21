#include "torus/cli/command_util.h"

#include <algorithm>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "torus/client/session.h"

namespace torus::cli {

absl::StatusOr<std::unique_ptr<client::HttpApiClient>> ConnectHttpApi(const HeadFlags& head) {
  auto endpoint = client::ResolveHttp(head.dashboard_address, head.token, client::TempRoot());
  if (!endpoint.ok()) return endpoint.status();
  return client::HttpApiClient::Connect(*endpoint);
}

int FailCommand(const std::string& command, const absl::Status& status) {
  std::cerr << "torus " << command << ": " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

absl::StatusOr<std::map<std::string, std::string>> ParseEnvFlags(const std::vector<std::string>& items) {
  std::map<std::string, std::string> env;
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

bool HeadWaiter::WaitAgain(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kUnavailable) {
    if (outage_since_) {
      std::cerr << prefix_ << "the head is back\n";
      outage_since_.reset();
    }
    return false;
  }
  if (max_wait_.count() <= 0) return false;
  const auto now = std::chrono::steady_clock::now();
  if (!outage_since_) {
    std::cerr << prefix_ << "the head is unreachable (" << status.message() << "); waiting for it\n";
    outage_since_ = now;
    delay_ = kFirstDelay;
  }
  const auto left = *outage_since_ + max_wait_ - now;
  if (left <= std::chrono::steady_clock::duration::zero()) return false;
  std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(delay_, left));
  delay_ = std::min(delay_ * 2, kMaxDelay);
  return true;
}

}  // namespace torus::cli
