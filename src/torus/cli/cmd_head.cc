// torus head restart
#include <iostream>

#include "absl/strings/str_join.h"

#include "torus/cli/commands.h"
#include "torus/cli/launcher.h"
#include "torus/cli/session_dir.h"
#include "torus/client/session.h"

namespace torus::cli {

int CmdHeadRestart() {
  auto latest = client::LatestSessionDir(client::TempRoot());
  if (!latest.ok()) {
    std::cerr << "torus head restart: " << latest.status().message() << "\n";
    return 1;
  }
  if (HeadNames(*latest).size() > 1) {
    // Several heads (`torus up --ha`): the ones that stopped come back as standbys; the leader is left alone.
    auto restarted = RestartStoppedHeads(*latest);
    if (!restarted.ok()) {
      std::cerr << "torus head restart: " << restarted.status().message() << "\n";
      return 1;
    }
    if (restarted->empty()) {
      std::cout << "every head of " << *latest << " is running; nothing to restart\n";
    } else {
      std::cout << "started again: " << absl::StrJoin(*restarted, ", ")
                << " (each leads if no head does, else stands by)\n";
    }
    return 0;
  }
  auto address = RelaunchHead(*latest);
  if (!address.ok()) {
    std::cerr << "torus head restart: " << address.status().message() << "\n";
    return absl::IsNotFound(address.status()) || absl::IsInvalidArgument(address.status()) ? 2 : 1;
  }
  pid_t pid = 0;
  for (const ProcessRecord& r : ReadProcesses(*latest)) {
    if (r.role == "head") pid = r.pid;
  }
  std::cout << "torus head restarted at " << *address << " (pid " << pid << "); it recovered its state from "
            << *latest << "/state and agents are registering again\n";
  return 0;
}

}  // namespace torus::cli
