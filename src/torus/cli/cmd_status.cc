// torus status | nodes | node mark-dead
#include <chrono>
#include <iostream>
#include <map>

#include "absl/strings/str_cat.h"

#include "torus/cli/commands.h"
#include "torus/cli/format.h"
#include "torus/client/client.h"
#include "torus/client/http_api_client.h"
#include "torus/rpc/status_json.h"

namespace torus::cli {
namespace {

absl::StatusOr<std::unique_ptr<client::Client>> ConnectFromFlags(const HeadFlags& head) {
  auto endpoint = client::ResolveHead(head.address, head.token, client::TempRoot());
  if (!endpoint.ok()) return endpoint.status();
  return client::Client::Connect(*endpoint);
}

int Fail(const absl::Status& status) {
  std::cerr << "torus: " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

// "Tasks: ..." and "Actors: ..." lines from the head's HTTP API: counts by state, and what pending tasks wait for
// (grouped by function and reason). Empty when there are none; a line saying why when the API does not answer.
std::string TasksAndActors(const std::string& http_address, const client::HeadEndpoint& head) {
  if (http_address.empty()) return "";
  auto http = client::HttpApiClient::Connect({.address = http_address, .token = head.token, .tls_ca = head.tls_ca});
  if (!http.ok()) return "";
  auto summary = (*http)->TaskSummary();
  auto actors = summary.ok() ? (*http)->ListActors() : summary.status();
  if (!summary.ok() || !actors.ok()) {
    return absl::StrCat("\nTasks and actors: the head's HTTP API at ", http_address, " did not answer (",
                        (summary.ok() ? actors.status() : summary.status()).message(), ")\n");
  }
  std::map<std::string, int64_t> tasks = {{"PENDING", 0}, {"RUNNING", 0}, {"FINISHED", 0}, {"FAILED", 0}};
  for (const auto& s : *summary) tasks[s["state"].get<std::string>()] += s["count"].get<int64_t>();
  std::map<std::string, int64_t> by_state = {{"PENDING_CREATION", 0}, {"ALIVE", 0}, {"RESTARTING", 0}, {"DEAD", 0}};
  for (const auto& a : *actors) ++by_state[a["state"].get<std::string>()];
  std::string out;
  if (!summary->empty()) {
    absl::StrAppend(&out, "\nTasks (since the head started): ", tasks["PENDING"], " pending, ", tasks["RUNNING"],
                    " running, ", tasks["FINISHED"], " finished, ", tasks["FAILED"], " failed\n");
    if (tasks["PENDING"] > 0) {
      auto pending = (*http)->ListTasks("PENDING", "", "", 1000);
      std::map<std::pair<std::string, std::string>, int> waits;
      if (pending.ok()) {
        for (const auto& t : *pending) ++waits[{t["name"].get<std::string>(), t["error"].get<std::string>()}];
      }
      for (const auto& [key, n] : waits) {
        absl::StrAppend(&out, "  ", key.first, " (", n, "): ",
                        key.second.empty() ? "waiting for its arguments or a worker" : key.second, "\n");
      }
    }
  }
  if (!actors->empty()) {
    absl::StrAppend(&out, "\nActors: ", by_state["ALIVE"], " alive, ", by_state["PENDING_CREATION"],
                    " pending creation, ", by_state["RESTARTING"], " restarting, ", by_state["DEAD"], " dead\n");
  }
  return out;
}

// The autoscaler's section (empty when it is off or the API does not answer).
std::string AutoscalerSection(const std::string& http_address, const client::HeadEndpoint& head) {
  if (http_address.empty()) return "";
  auto http = client::HttpApiClient::Connect({.address = http_address, .token = head.token, .tls_ca = head.tls_ca});
  if (!http.ok()) return "";
  auto a = (*http)->Autoscaler();
  if (!a.ok()) return "";
  const int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  return FormatAutoscaler(*a, now_ms);
}

}  // namespace

int CmdStatus(const HeadFlags& head, bool json) {
  auto endpoint = client::ResolveHead(head.address, head.token, client::TempRoot());
  if (!endpoint.ok()) return Fail(endpoint.status());
  auto client = client::Client::Connect(*endpoint);
  if (!client.ok()) return Fail(client.status());
  auto status = (*client)->GetClusterStatus(/*include_dead=*/true);
  if (!status.ok()) return Fail(status.status());
  if (json) {
    std::cout << rpc::StatusToJson(*status).dump(2) << "\n";
  } else {
    std::cout << FormatStatus(*status, (*client)->address()) << TasksAndActors(status->http_address(), *endpoint)
              << AutoscalerSection(status->http_address(), *endpoint);
  }
  return 0;
}


int CmdNodes(const HeadFlags& head, bool json, bool alive_only) {
  auto client = ConnectFromFlags(head);
  if (!client.ok()) return Fail(client.status());
  auto status = (*client)->GetClusterStatus(/*include_dead=*/!alive_only);
  if (!status.ok()) return Fail(status.status());
  if (json) {
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& n : status->nodes()) nodes.push_back(rpc::NodeToJson(n));
    std::cout << nodes.dump(2) << "\n";
  } else {
    std::cout << FormatNodes(*status);
  }
  return 0;
}

int CmdNodeMarkDead(const HeadFlags& head, const std::string& node_id, const std::string& reason, bool revoke) {
  auto client = ConnectFromFlags(head);
  if (!client.ok()) return Fail(client.status());
  auto was_alive = (*client)->MarkNodeDead(node_id, reason, revoke);
  if (!was_alive.ok()) return Fail(was_alive.status());
  std::cout << "node " << node_id << (*was_alive ? " marked DEAD" : " was already DEAD")
            << (revoke ? " and revoked" : "") << "\n";
  return 0;
}

int CmdNodeLedger(const HeadFlags& head, const std::string& node_id, bool json) {
  auto client = ConnectFromFlags(head);
  if (!client.ok()) return Fail(client.status());
  auto ledger = (*client)->GetNodeLedger(node_id);
  if (!ledger.ok()) return Fail(ledger.status());
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& e : ledger->entries()) {
    entries.push_back({{"group_id", e.group_id()},
                       {"attempt", e.attempt()},
                       {"index", e.bundle().index()},
                       {"committed", e.committed()},
                       {"resources", rpc::ResourcesToJson(e.bundle().resources())},
                       {"chips", std::vector<int>(e.bundle().chips().begin(), e.bundle().chips().end())}});
  }
  nlohmann::json out = {{"node_id", node_id},
                        {"resources_total", rpc::ResourcesToJson(ledger->resources_total())},
                        {"resources_available", rpc::ResourcesToJson(ledger->resources_available())},
                        {"busy_chips", std::vector<int>(ledger->busy_chips().begin(), ledger->busy_chips().end())},
                        {"entries", entries}};
  if (json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << "node " << node_id << ": available " << out["resources_available"].dump() << " of "
            << out["resources_total"].dump() << "\n";
  if (entries.empty()) std::cout << "  holds nothing\n";
  for (const auto& e : entries) {
    std::cout << "  " << e["group_id"].get<std::string>() << " #" << e["index"] << "  "
              << (e["committed"].get<bool>() ? "committed" : "prepared") << "  " << e["resources"].dump()
              << (e["chips"].empty() ? "" : "  chips " + e["chips"].dump()) << "\n";
  }
  return 0;
}

}  // namespace torus::cli
