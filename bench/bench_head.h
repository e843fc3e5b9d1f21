// What the benchmarks that load a real torus-head share: starting and stopping the head process, reading its CPU and
// memory from /proc, a bound on in-flight calls, and registering synthetic TPU v6e hosts the way agents do.
//
// Thread-safety: InFlight is thread-safe; the functions are for a benchmark's main thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/head.grpc.pb.h"

namespace torus::bench {

struct HeadProcess {
  pid_t pid = 0;
  std::string dir;        // its session directory (removed by StopHead)
  std::string address;    // gRPC host:port
  std::string http_host;  // the HTTP (dashboard) port's host and port
  int http_port = 0;
  std::string token;
};

// Starts build/bin/torus-head on ephemeral ports in a new temp session directory named `<dir_prefix>XXXXXX`, with
// `extra_args`, and waits (up to 10 s) for its addresses and token. The error names the head's log.
absl::StatusOr<HeadProcess> StartHead(const std::string& dir_prefix, const std::vector<std::string>& extra_args);
// SIGTERM, wait, remove the session directory. Does nothing for a head already stopped.
void StopHead(HeadProcess& head);
// The last `lines` lines of the head's log, for failure messages.
std::string HeadLogTail(const HeadProcess& head, int lines);

// User + system CPU seconds of a process, and its resident set in MB.
double CpuSeconds(pid_t pid);
double RssMb(pid_t pid);
// Pins every thread of `pid` (threads it starts later inherit it) to CPU `cpu`; false if any could not be.
bool PinToCpu(pid_t pid, int cpu);

// Limits in-flight calls and waits for all of them to finish.
class InFlight {
 public:
  explicit InFlight(int limit) : limit_(limit) {}
  void Acquire();
  void Release();
  void Drain();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
  const int limit_;
};

// `count` stubs to `address`, each on its own connection (channel ids from `first_id`).
std::vector<std::unique_ptr<rpc::HeadService::Stub>> MakeStubs(const std::string& address, int count, int first_id);

// The registration of synthetic host `i` ("bench-<i>"): a TPU v6e host of 4 chips, worker i % 4 of slice
// "slice-<i / 4>", with the labels an agent on such a host sends.
rpc::RegisterNodeRequest SyntheticV6eHost(int i);

// Registers hosts 0..n-1 (SyntheticV6eHost) over `stubs`, up to 2,000 calls in flight; returns each host's
// incarnation, 0 for a registration that failed; each registration's reply in `replies` when given.
std::vector<uint64_t> RegisterSyntheticHosts(const std::vector<std::unique_ptr<rpc::HeadService::Stub>>& stubs,
                                             const std::string& token, int n,
                                             std::vector<rpc::RegisterNodeReply>* replies = nullptr);

// Sends one heartbeat of `node_id` as `incarnation`, asynchronously, holding a slot of `inflight` until it answers;
// counts it in `failed` unless the head answers OK.
void SendHeartbeat(rpc::HeadService::Stub& stub, const std::string& bearer, const std::string& node_id,
                   uint64_t incarnation, InFlight& inflight, std::atomic<int64_t>& failed);

}  // namespace torus::bench
