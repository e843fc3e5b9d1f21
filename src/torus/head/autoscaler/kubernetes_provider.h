// The kubernetes provider: slices as pods in a GKE cluster with TPU node pools, created and deleted through the
// Kubernetes API with the head pod's service account (its token, read again for every call since projected tokens
// rotate, and its CA). The objects of a slice are kubernetes_objects.h's: a headless Service and one Pod per host.
//
// Launch creates the Service, then every Pod; if any creation fails, whatever of the slice was created is deleted
// again and the launch is refused with the API server's message, so a slice is never left partly created. Terminate
// deletes every pod of the slice (by label) and its Service. A pod that ends (phase Failed or Succeeded: a host lost,
// or its agent exited) fails its slice's launch: TakeFailures reports it, at most once per slice, from a list of the
// provider's pods made at most every 5 s. List finds the slices from the pods' labels after a head restart.
//
// Thread-safety: thread-safe (calls are made one at a time on one HTTP client).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "torus/autoscale/config.h"
#include "torus/common/clock.h"
#include "torus/head/autoscaler/slice_provider.h"

namespace httplib {
class Client;
}

namespace torus::head {

class KubernetesSliceProvider final : public SliceProvider {
 public:
  // Reads the namespace (when the config gives none) and checks the service account's token is there.
  static absl::StatusOr<std::unique_ptr<KubernetesSliceProvider>> Create(const autoscale::KubernetesProvider& config,
                                                                        const Clock* clock);
  ~KubernetesSliceProvider() override;

  absl::Status Launch(const LaunchRequest& request) override;
  absl::Status Terminate(const std::string& slice) override;
  std::map<std::string, std::string> TakeFailures() override;
  std::vector<Launched> List() override;

 private:
  KubernetesSliceProvider(autoscale::KubernetesProvider config, std::string ns, const Clock* clock);

  // One call; the answer's JSON, or an error naming the call and the API server's message.
  absl::StatusOr<nlohmann::json> Call(const std::string& method, const std::string& path,
                                      const nlohmann::json* body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<nlohmann::json> ListPods() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes the slice's pods and Service; NotFound counts as done.
  absl::Status DeleteSlice(const std::string& slice) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const autoscale::KubernetesProvider config_;
  const std::string ns_;
  const Clock* clock_;
  absl::Mutex mu_;
  std::unique_ptr<httplib::Client> client_ ABSL_GUARDED_BY(mu_);
  int64_t last_check_micros_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<std::string> reported_ ABSL_GUARDED_BY(mu_);  // slices whose failure was reported
};

}  // namespace torus::head
