#include "torus/node/leftovers.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace torus::node {

int KillLeftoverWorkers(const std::string& work_dir, const std::string& proc_root) {
  const std::string mark = std::string(kWorkerMarkVariable) + "=" + work_dir;
  int killed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(proc_root, ec)) {
    const std::string name = entry.path().filename().string();
    char* end = nullptr;
    long pid = std::strtol(name.c_str(), &end, 10);
    if (end == name.c_str() || *end != '\0' || pid <= 1 || pid == getpid()) continue;
    std::ifstream environ_file(entry.path() / "environ", std::ios::binary);
    if (!environ_file) continue;
    std::string variable;
    while (std::getline(environ_file, variable, '\0')) {
      if (variable != mark) continue;
      if (kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++killed;
      break;
    }
  }
  return killed;
}

}  // namespace torus::node
