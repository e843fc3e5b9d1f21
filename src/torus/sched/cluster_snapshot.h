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
  // Changes whenever the node's address, labels or total change (the head's registration incarnation); 0 when the
  // source does not say. Two snapshots of one generation have the same address, labels and total.
  uint64_t generation = 0;
};

}  // namespace torus::sched
