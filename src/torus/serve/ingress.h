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
// Thread-safety: Start and Stop from one thread; a thread per client connection.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/serve/route_table.h"

namespace torus::serve {

class Ingress {
 public:
  struct Options {
    std::string host = "0.0.0.0";
    int port = 8000;                    // 0: an ephemeral port
    int max_connections = 10000;        // more are closed at once
    int64_t header_timeout_ms = 30'000;
    int64_t idle_timeout_ms = 75'000;
    int64_t connect_timeout_ms = 2'000;
  };

  Ingress(RouteTable* routes, Options options);
  ~Ingress();  // stops

  // Binds and starts accepting; returns the port.
  absl::StatusOr<int> Start();
  // Stops accepting, shuts every connection down and waits for their threads.
  void Stop();

 private:
  class Pool;
  void Accept();
  void Serve(int fd, std::string peer);

  RouteTable* routes_;
  Options options_;
  std::unique_ptr<Pool> pool_;
  int listen_fd_ = -1;
  std::thread accept_thread_;
  std::mutex mu_;
  std::set<int> clients_;             // guarded by mu_
  int threads_ = 0;                   // guarded by mu_
  std::condition_variable_any done_;  // a connection thread ended
  std::atomic<bool> stopping_{false};
};

}  // namespace torus::serve
