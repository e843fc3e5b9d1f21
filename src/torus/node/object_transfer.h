// Object transfer between agents: the bytes of a stored object over a TCP connection, received straight into the
// reader's mapped file (no framing). On a plaintext cluster they are sent from the store's file with sendfile(2)
// (one copy on each side); on a cluster with TLS the connection is mutual TLS between the two agents' node
// certificates (tls_socket.h: either side refuses a peer that is not "torus-node:...") and the file is read and
// encrypted in pieces.
//
// The holder's agent issues a one-time ticket (16 random bytes, valid for 60 s) to a caller that its gRPC service
// authenticated with the cluster token; the reader connects to the holder's transfer port, writes the ticket, and
// reads exactly the object's size. A connection with an unknown or expired ticket is closed without a byte.
//
// Thread-safety: thread-safe. The server serves each connection on a thread of its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "torus/tls/tls_socket.h"

namespace torus::node {

inline constexpr size_t kTicketBytes = 16;

class TransferServer {
 public:
  // Listens on `host` (an address of this machine), on any free port; over TLS with `tls` (this node's files).
  static absl::StatusOr<std::unique_ptr<TransferServer>> Start(const std::string& host,
                                                               const tls::TlsFiles* tls = nullptr);
  ~TransferServer();
  TransferServer(const TransferServer&) = delete;
  TransferServer& operator=(const TransferServer&) = delete;

  int port() const { return port_; }
  // A ticket to read `size` bytes of the file at `path` once, within 60 s.
  std::string Issue(const std::string& path, uint64_t size);
  // Stops listening and ends the connections being served. Idempotent.
  void Stop();

 private:
  TransferServer(int listen_fd, int port, std::unique_ptr<tls::TlsSocketContext> tls)
      : listen_fd_(listen_fd), port_(port), tls_(std::move(tls)) {}
  struct Grant {
    std::string path;
    uint64_t size = 0;
    std::chrono::steady_clock::time_point expires;
  };
  void AcceptLoop();
  void Serve(int fd);
  // The ticket read from `fd` (over `session` with TLS), or nullopt.
  std::optional<Grant> Redeem(int fd, tls::TlsSocket* session);

  const int listen_fd_;
  const int port_;
  const std::unique_ptr<tls::TlsSocketContext> tls_;  // null: plaintext
  std::thread acceptor_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, Grant> grants_ ABSL_GUARDED_BY(mu_);     // by ticket
  std::map<int, std::thread> connections_ ABSL_GUARDED_BY(mu_);  // by socket
  std::vector<std::thread> finished_ ABSL_GUARDED_BY(mu_);       // connection threads to join
};

// Reads the object behind `ticket` from the transfer server at host:port into the file `fd`, which is `size` bytes
// long (allocated); over TLS with `tls` (this node's files). Unavailable naming the peer when the connection fails
// or ends early; PERMISSION_DENIED when the peer is not an agent of the cluster.
absl::Status FetchTransfer(const std::string& host, int port, const std::string& ticket, int fd, uint64_t size,
                           const tls::TlsFiles* tls = nullptr);

}  // namespace torus::node
