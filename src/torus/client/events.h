// Watching the head's events (docs/rest.md, "Events"): where a watch stands, and which events it wants. Used by
// HttpApiClient (HTTP) and Client (gRPC) alike.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torus::client {

// Where a watch of the head's events stands: the head's epoch and the newest revision seen in it.
struct EventCursor {
  uint64_t epoch = 0;
  uint64_t revision = 0;
};

// Which events to watch: of these kinds ("node", "group", "job", "run", "worker"; none = all) and about these
// objects (none = all; an id matches its object and, for groups and workers, their owner).
struct EventSelector {
  std::vector<std::string> kinds;
  std::vector<std::string> ids;
};

}  // namespace torus::client
