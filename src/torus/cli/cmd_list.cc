// torus list actors | tasks: the head's directory of actors and its table of tasks, as tables or JSON.
#include <iostream>
#include <map>

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
  std::cout << absl::StrFormat("%-32s  %-20s  %-16s  %-16s  %-8s  %-12s  %7s  %8s  %s\n", "ACTOR_ID", "CLASS", "NAME",
                               "STATE", "LIFETIME", "NODE", "PID", "RESTARTS", "DEATH_CAUSE");
  for (const auto& a : *actors) {
    std::string name = a["name"].get<std::string>();
    if (!name.empty()) name = a["namespace"].get<std::string>() + "/" + name;
    // A detached actor is the head's; the others live as long as the program that created them.
    const bool detached = a.contains("is_detached") && a["is_detached"].get<bool>();
    std::cout << absl::StrFormat("%-32s  %-20s  %-16s  %-16s  %-8s  %-12s  %7d  %8d  %s\n",
                                 a["actor_id"].get<std::string>(), a["class_name"].get<std::string>(), name,
                                 a["state"].get<std::string>(), detached ? "detached" : "owner",
                                 a["node_id"].get<std::string>(),
                                 a["pid"].get<int64_t>(), a["restarts"].get<int>(),
                                 a["death_cause"].get<std::string>());
  }
  return 0;
}

int CmdListTasks(const HeadFlags& head, const ListTasksFlags& flags) {
  auto http = ConnectHttpApi(head);
  if (!http.ok()) return FailCommand("list tasks", http.status());
  if (flags.summary) {
    auto summary = (*http)->TaskSummary();
    if (!summary.ok()) return FailCommand("list tasks", summary.status());
    if (flags.json) {
      std::cout << summary->dump(2) << "\n";
      return 0;
    }
    // One row per function: its count in each state.
    std::map<std::string, std::map<std::string, int64_t>> rows;
    for (const auto& s : *summary) rows[s["name"].get<std::string>()][s["state"].get<std::string>()] = s["count"];
    std::cout << absl::StrFormat("%-40s  %8s  %8s  %9s  %8s\n", "FUNCTION", "PENDING", "RUNNING", "FINISHED", "FAILED");
    for (const auto& [name, counts] : rows) {
      auto n = [&counts = counts](const char* state) { return counts.contains(state) ? counts.at(state) : 0; };
      std::cout << absl::StrFormat("%-40s  %8d  %8d  %9d  %8d\n", name, n("PENDING"), n("RUNNING"), n("FINISHED"),
                                   n("FAILED"));
    }
    return 0;
  }
  auto tasks = (*http)->ListTasks(flags.state, flags.job_id, flags.name, flags.limit);
  if (!tasks.ok()) return FailCommand("list tasks", tasks.status());
  if (flags.json) {
    std::cout << tasks->dump(2) << "\n";
    return 0;
  }
  std::cout << absl::StrFormat("%-32s  %-32s  %-8s  %7s  %-12s  %7s  %s\n", "TASK_ID", "NAME", "STATE", "ATTEMPT",
                               "NODE", "PID", "ERROR");
  for (const auto& t : *tasks) {
    std::cout << absl::StrFormat("%-32s  %-32s  %-8s  %7d  %-12s  %7d  %s\n", t["task_id"].get<std::string>(),
                                 t["name"].get<std::string>(), t["state"].get<std::string>(), t["attempt"].get<int>(),
                                 t["node_id"].get<std::string>(), t["pid"].get<int64_t>(),
                                 t["error"].get<std::string>());
  }
  return 0;
}

}  // namespace torus::cli
