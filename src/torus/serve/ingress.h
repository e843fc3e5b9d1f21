// Ingress: the HTTP/1.1 reverse proxy in front of services (DESIGN.md §9). It routes each request by the longest
// matching path prefix (RouteTable) to a READY replica, with the prefix removed from the path (X-Forwarded-Prefix
// carries it), and relays the answer as its bytes arrive: chunked and text/event-stream answers reach the client
// chunk by chunk, never buffered whole.
//
// Answers of its own (JSON {"error": "..."}):
//   404 no service's prefix matches the path (the message lists the prefixes)
//   400 a malformed request; 431 a head over 64 KiB; 408 a head not received within header_timeout
//   413 a body over the service's max_request_bytes
//   503 the service has no READY replica within its queue_timeout, or max_queued_requests already wait
//   502 every READY replica failed before sending a byte of an answer (each is tried once: a request that failed
//       before its first byte is sent again to another replica)
//   504 no answer head within the service's request_timeout (an answer already streaming is cut off instead)
// Connections to replicas are kept alive and reused. A connection to a client is kept alive between requests and
// closed after idle_timeout.
//
// Inside: a few event-loop threads (epoll, non-blocking sockets; IngressLoop), each with its own client connections
// (ClientConn: one state machine per connection) and kept-alive connections to replicas (UpstreamPool). One of them
// accepts and hands connections to each in turn. An answer is relayed no faster than its client reads it: the
// replica is not read while 256 KiB wait for the client.
//
// Thread-safety: Start and Stop from one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/serve/route_table.h"

namespace torus::serve {

class IngressLoop;

class Ingress {
 public:
  struct Options {
    std::string host = "0.0.0.0";
    int port = 8000;                    // 0: an ephemeral port
    int max_connections = 10000;        // more are closed at once
    int64_t header_timeout_ms = 30'000;
    int64_t idle_timeout_ms = 75'000;
    int64_t connect_timeout_ms = 2'000;
    int threads = 0;                    // event-loop threads; 0: one per CPU, at most 4
  };

  Ingress(RouteTable* routes, Options options);
  ~Ingress();  // stops

  // Binds and starts accepting; returns the port. At most once.
  absl::StatusOr<int> Start();
  // Stops accepting, closes every connection (requests in flight end: released, not recorded unless their answer had
  // begun) and waits for the loop threads. Safe to call twice, or without Start.
  void Stop();

 private:
  RouteTable* routes_;
  Options options_;
  std::atomic<int> connections_{0};  // open client connections, over every loop
  std::vector<std::unique_ptr<IngressLoop>> loops_;  // loops_[0] accepts
  std::vector<std::thread> threads_;                 // threads_[i] runs loops_[i]
  std::optional<int> subscription_;                  // to route changes
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace torus::serve
