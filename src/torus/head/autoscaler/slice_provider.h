// Where whole slices come from: a provider starts every host of a slice (the local provider as simulated hosts on
// this machine) and removes them all again. Calls return at once; provisioning goes on in the background, and the
// autoscaler sees a slice start when all its hosts have registered with the head.
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "torus/autoscale/config.h"

namespace torus::head {

class SliceProvider {
 public:
  struct LaunchRequest {
    std::string slice;  // "<node type>-<5 hex digits>"; its hosts are "<slice>-w<worker id>"
    const autoscale::NodeType* type = nullptr;
    autoscale::CapacityClass capacity_class = autoscale::CapacityClass::kOnDemand;
    int64_t wall_ms = 0;
  };
  struct Launched {
    std::string slice;
    std::string node_type;
    autoscale::CapacityClass capacity_class = autoscale::CapacityClass::kOnDemand;
    int64_t wall_ms = 0;  // when it was launched
  };

  virtual ~SliceProvider() = default;
  // Starts provisioning the slice. An error is a refusal (quota, no such capacity) whose message says why.
  virtual absl::Status Launch(const LaunchRequest& request) = 0;
  // Removes every host of the slice, provisioned or not.
  virtual absl::Status Terminate(const std::string& slice) = 0;
  // Launches that failed after they were accepted, since the last call: slice -> why.
  virtual std::map<std::string, std::string> TakeFailures() = 0;
  // The slices launched and not removed, also by an earlier head: the autoscaler takes them up when it starts.
  virtual std::vector<Launched> List() = 0;
};

}  // namespace torus::head
