// IngressLoop: one event-loop thread of the ingress, with its client connections (ClientConn) and its connections
// to replicas (UpstreamPool). One loop also holds the listening socket: it accepts connections and hands them to
// the loops in turn (itself included), so that each loop serves an even share.
//
// Thread-safety: Adopt, OnRoutesChanged and Stop are thread-safe; Listen before Run; the rest on the loop's thread
// (Run).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "torus/serve/event_loop.h"
#include "torus/serve/ingress.h"
#include "torus/serve/ingress_conn.h"
#include "torus/serve/route_table.h"
#include "torus/serve/upstream.h"

namespace torus::serve {

class IngressLoop {
 public:
  // `connections`: the open client connections of every loop together (max_connections bounds it).
  static absl::StatusOr<std::unique_ptr<IngressLoop>> Create(RouteTable* routes, const Ingress::Options* options,
                                                             std::atomic<int>* connections);
  ~IngressLoop();

  // Makes this the accepting loop: it takes `listen_fd` (non-blocking, listening) and hands connections to `loops`
  // in turn. REQUIRES: before Run.
  absl::Status Listen(int listen_fd, std::vector<IngressLoop*> loops);
  // Serves until Stop.
  void Run();

  // Serves the accepted connection `fd` from `peer` (counted in `connections` already). Thread-safe.
  void Adopt(int fd, std::string peer);
  // Queued requests try again for a replica. Thread-safe.
  void OnRoutesChanged();
  // Closes the listening socket and every connection; Run returns. Thread-safe.
  void Stop();

 private:
  class Acceptor;
  IngressLoop(RouteTable* routes, const Ingress::Options* options, std::atomic<int>* connections,
              std::unique_ptr<EventLoop> loop);
  void Accept();
  void AddClient(int fd, std::string peer);
  void OnClosed(ClientConn* conn);
  void CloseAll();

  const Ingress::Options* const options_;
  std::atomic<int>* const connections_;
  const std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<char[]> scratch_;
  UpstreamPool pool_;
  ConnContext context_;
  std::unordered_map<ClientConn*, std::unique_ptr<ClientConn>> conns_;
  std::atomic<bool> routes_changed_{false};  // a wake-up for OnRoutesChanged is posted and not yet run

  // The accepting loop's.
  int listen_fd_ = -1;
  std::unique_ptr<Acceptor> acceptor_;
  std::vector<IngressLoop*> loops_;
  size_t next_loop_ = 0;
  Timer accept_retry_;  // after running out of fds or memory
};

}  // namespace torus::serve
