// Test helpers for events.
#pragma once

#include <string>

#include "torus/head/api/event_log.h"

namespace torus::head::testutil {

// A JobUpdated event about job `id` with `status` (revision 0: the log numbers it).
inline Event JobEvent(const std::string& id, const std::string& status) {
  Event e;
  e.kind = "job";
  e.id = id;
  e.type = "JobUpdated";
  e.status = status;
  return e;
}

}  // namespace torus::head::testutil
