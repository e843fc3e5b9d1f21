// BeatServer: the head's side of heartbeat datagrams (rpc/beat_datagram.h): a node's heartbeats that report nothing
// new, one UDP datagram each, for a fraction of what a stream message costs.
//
// One socket on the head's host and one thread. Datagrams are read in batches; each is checked against the key its
// node's latest registration was given (Issue): one of an unknown node, with a wrong MAC, for another incarnation,
// or with a sequence number not above the last one taken is dropped unanswered. Otherwise it counts as a heartbeat
// that reports nothing (Liveness::Heartbeat) and is answered OK, or REREGISTER when the head does not know that
// incarnation (it declared the node dead), or REFUSED when the node may no longer speak for itself (revoked, with
// node certificates) — answers signed with the same key, sent in batches.
//
// Thread-safety: Issue, Forget and counts from any thread; construct, Start and Stop from one.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "torus/head/api/node_callers.h"
#include "torus/head/state/liveness.h"
#include "torus/rpc/beat_datagram.h"

namespace torus::head {

class BeatServer {
 public:
  // Binds UDP `host`:`port` (0: any free port). UNAVAILABLE naming the address when it cannot.
  static absl::StatusOr<std::unique_ptr<BeatServer>> Bind(const std::string& host, int port, Liveness* liveness,
                                                          const NodeCallers* callers);
  ~BeatServer();  // Stop()
  BeatServer(const BeatServer&) = delete;
  BeatServer& operator=(const BeatServer&) = delete;

  int port() const { return port_; }

  // A new key for `node_id`'s registration as `incarnation`; the node's earlier key stops working.
  std::string Issue(const std::string& node_id, uint64_t incarnation);
  // The node unregistered: its datagrams are dropped from now on.
  void Forget(const std::string& node_id);

  void Start();
  void Stop();

  struct Counts {
    uint64_t applied = 0;  // taken as heartbeats (answered OK or REREGISTER)
    uint64_t refused = 0;  // answered REFUSED
    uint64_t dropped = 0;  // malformed, unknown node, wrong MAC or incarnation, replayed
  };
  Counts counts() const;

 private:
  BeatServer(int fd, int wake_fd, int port, Liveness* liveness, const NodeCallers* callers);
  void Serve();
  // A beat of `node_id` as `incarnation` that carries its key: REFUSED (revoked), or heard (OK, or REREGISTER when
  // Liveness does not know that incarnation).
  rpc::BeatAction Take(const std::string& node_id, uint64_t incarnation);

  struct Key {
    std::unique_ptr<rpc::BeatMac> mac;
    uint64_t incarnation = 0;
    uint64_t last_sequence = 0;
  };

  const int fd_;
  const int wake_fd_;  // an eventfd: Stop() ends Serve's wait
  const int port_;
  Liveness* const liveness_;
  const NodeCallers* const callers_;
  std::thread thread_;
  std::atomic<uint64_t> applied_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> dropped_{0};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Key> keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace torus::head
