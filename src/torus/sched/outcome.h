// The outcomes every placement policy returns besides a placement (STYLE.md: outcomes are types).
//
//   Pending     not now, maybe later: resources busy, a slice reserved or degraded. The head retries on change.
//   Infeasible  no alternative could ever fit the cluster as it is known (nodes may still join, so the head keeps
//               the request waiting; only a timeout fails it, semantics.md §4).
//
// Reasons are sentences a user can act on; a request with fallbacks gets one line per alternative, joined by '\n'.
#pragma once

#include <string>

namespace torus::sched {

struct Pending {
  std::string reason;
  bool operator==(const Pending&) const = default;
};

struct Infeasible {
  std::string reason;
  bool operator==(const Infeasible&) const = default;
};

}  // namespace torus::sched
