// OwnerMonitor: marks DEAD the actors whose owner is gone. Every `period` it asks each owner of actors not DEAD
// whether it is there (`probe`: a cheap call to the owner's core worker); an owner that fails `failures` probes in a
// row (unreachable, or no answer within the probe's deadline) is gone, and its actors are DEAD with the cause
// "its owner <address> is gone (<the last probe's error>)". The agents stop such actors' workers themselves (a
// lease ends with its holder), so this only brings the directory in line.
//
// Thread-safety: thread-safe; one thread of its own between Start and Stop.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "torus/head/actors/actor_directory.h"

namespace torus::head {

class OwnerMonitor {
 public:
  // OK when the owner at the address answered (whatever it said); an error when it could not be reached.
  using Probe = std::function<absl::Status(const std::string& owner_address)>;

  OwnerMonitor(ActorDirectory* actors, Probe probe, std::chrono::milliseconds period, int failures = 3)
      : actors_(actors), probe_(std::move(probe)), period_(period), failures_needed_(failures) {}
  ~OwnerMonitor() { Stop(); }

  // One round: probes every owner of live actors once; returns how many actors it marked DEAD.
  int CheckOnce();

  void Start();
  void Stop();

 private:
  ActorDirectory* actors_;
  Probe probe_;
  const std::chrono::milliseconds period_;
  const int failures_needed_;
  std::map<std::string, int> failures_;  // owner -> probes failed in a row; only the monitor's thread touches it
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// A Probe over gRPC: CoreWorkerService.ResolveActor of an empty id at the owner, with the cluster token and
// `deadline`. Any answer (NOT_FOUND included) means the owner is there.
OwnerMonitor::Probe GrpcOwnerProbe(std::string token, std::chrono::milliseconds deadline);

}  // namespace torus::head
