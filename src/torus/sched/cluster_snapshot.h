// The read-only view of the cluster that every scheduling decision is made against.
//
// Thread-safety: value types; a snapshot is immutable once built and may be read from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "torus/common/labels.h"
#include "torus/common/resources.h"

namespace torus::sched {

// One node as the scheduler sees it.
struct NodeSnapshot {
  std::string node_id;
  std::string address;
  bool alive = false;
  Labels labels;
  ResourceSet total;
  ResourceSet available;
};

}  // namespace torus::sched
