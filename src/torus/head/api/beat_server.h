// BeatServer: the head's side of heartbeat datagrams (rpc/beat_datagram.h): a node's heartbeats that report nothing
// new, one UDP datagram each, for a fraction of what a stream message costs.
//
// One socket per address of the head's host (one port) and one thread. Datagrams are read in batches; each is
// checked against the key its node's latest registration was given (Issue) and taken only while that node's
// heartbeat stream is open here (StreamOpened/StreamClosed): the stream ends when the agent's process does, so
// datagrams recorded earlier cannot keep a dead agent's node alive. One of an unknown node, with a wrong MAC, for
// another incarnation, with a sequence number not above the last one taken, or of a node with no open stream is
// dropped unanswered. Otherwise it counts as a heartbeat that reports nothing (Liveness::Heartbeat) and is answered
// OK, or REREGISTER when the head does not know that incarnation (it declared the node dead), or REFUSED when the
// node may no longer speak for itself (revoked, with node certificates) — answers signed with the same key, sent in
// batches.
//
// Thread-safety: Issue, Forget, StreamOpened/Closed and counts from any thread; construct, Start and Stop from one.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

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
  // The node unregistered as `incarnation`: its datagrams are dropped from now on (unless it registered again).
  void Forget(const std::string& node_id, uint64_t incarnation);
  // A heartbeat stream of `node_id` began / ended (HeartbeatStreamServer); datagrams are taken while one is open.
  void StreamOpened(const std::string& node_id);
  void StreamClosed(const std::string& node_id);

  void Start();
  void Stop();

  struct Counts {
    uint64_t ok = 0;          // taken as the node's heartbeat
    uint64_t reregister = 0;  // answered REREGISTER: the head does not know the incarnation
    uint64_t refused = 0;     // answered REFUSED: revoked
    uint64_t dropped = 0;     // malformed, unknown node, wrong MAC or incarnation, replayed, no open stream
  };
  Counts counts() const;

 private:
  BeatServer(std::vector<int> fds, int wake_fd, int port, Liveness* liveness, const NodeCallers* callers);
  void Serve();
  // Reads and answers what waits on `fd`.
  void Drain(int fd);
  // The signed answer to one datagram, or nullopt to drop it.
  std::optional<std::string> Answer(std::string_view bytes);

  struct Key {
    std::unique_ptr<rpc::BeatMac> mac;
    uint64_t incarnation = 0;
    uint64_t last_sequence = 0;
  };

  const std::vector<int> fds_;  // one UDP socket per address
  const int wake_fd_;           // an eventfd: Stop() ends Serve's wait
  const int port_;
  Liveness* const liveness_;
  const NodeCallers* const callers_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> ok_{0};
  std::atomic<uint64_t> reregister_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> dropped_{0};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Key> keys_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int> streams_ ABSL_GUARDED_BY(mu_);  // open heartbeat streams by node
};

}  // namespace torus::head
