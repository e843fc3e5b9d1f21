// torus list actors: the head's directory of actors, as a table or JSON.
#include <iostream>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "torus/cli/command_util.h"
#include "torus/cli/commands.h"

namespace torus::cli {

int CmdListActors(const HeadFlags& head, const std::string& state, const std::string& job_id, bool json) {
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand("list actors", http.status());
  auto actors = (*http)->ListActors(state, job_id);
  if (!actors.ok()) return FailCommand("list actors", actors.status());
  if (json) {
    std::cout << actors->dump(2) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat("%-32s  %-20s  %-16s  %-16s  %-12s  %7s  %8s  %s\n", "ACTOR_ID", "CLASS", "NAME",
                               "STATE", "NODE", "PID", "RESTARTS", "DEATH_CAUSE");
  for (const auto& a : *actors) {
    std::string name = a["name"].get<std::string>();
    if (!name.empty()) name = a["namespace"].get<std::string>() + "/" + name;
    std::cout << absl::StrFormat("%-32s  %-20s  %-16s  %-16s  %-12s  %7d  %8d  %s\n",
                                 a["actor_id"].get<std::string>(), a["class_name"].get<std::string>(), name,
                                 a["state"].get<std::string>(), a["node_id"].get<std::string>(),
                                 a["pid"].get<int64_t>(), a["restarts"].get<int>(),
                                 a["death_cause"].get<std::string>());
  }
  return 0;
}

}  // namespace torus::cli
