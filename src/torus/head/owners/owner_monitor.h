// OwnerMonitor: ends what belongs to owners that are gone (the processes that create actors and submit tasks).
// Every `period` it asks each owner of something live (`owners`: actors not DEAD, tasks not ended) whether it is
// there (`probe`: a cheap call to the owner's core worker); an owner that fails `failures` probes in a row
// (unreachable, or no answer within the probe's deadline) is gone, and `gone` ends its things with the cause
// "its owner <address> is gone (<the last probe's error>)". The agents stop such owners' workers themselves (a
// lease ends with its holder), so this only brings the head's views in line.
//
// Thread-safety: thread-safe; one thread of its own between Start and Stop.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"

namespace torus::head {

class OwnerMonitor {
 public:
  // OK when the owner at the address answered (whatever it said); an error when it could not be reached.
  using Probe = std::function<absl::Status(const std::string& owner_address)>;
  // The owners of live things now.
  using Owners = std::function<std::set<std::string>()>;
  // Ends the live things of `owner` with `cause`; returns how many.
  using Gone = std::function<int(const std::string& owner, const std::string& cause)>;

  OwnerMonitor(Owners owners, Gone gone, Probe probe, std::chrono::milliseconds period, int failures = 3)
      : owners_(std::move(owners)),
        gone_(std::move(gone)),
        probe_(std::move(probe)),
        period_(period),
        failures_needed_(failures) {}
  ~OwnerMonitor() { Stop(); }

  // One round: probes every owner of live things once; returns how many things it ended.
  int CheckOnce();

  void Start();
  void Stop();

 private:
  Owners owners_;
  Gone gone_;
  Probe probe_;
  const std::chrono::milliseconds period_;
  const int failures_needed_;
  std::map<std::string, int> failures_;  // owner -> probes failed in a row; only the monitor's thread touches it
  absl::Mutex mu_;
  absl::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// A Probe over gRPC: CoreWorkerService.ResolveActor of an empty id at the owner, with the cluster token and
// `deadline`, over `credentials` (the cluster's TLS; nullptr: plaintext). Any answer (NOT_FOUND included) means the
// owner is there.
OwnerMonitor::Probe GrpcOwnerProbe(std::string token, std::chrono::milliseconds deadline,
                                   std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

}  // namespace torus::head
