// TLS on a connected TCP socket (OpenSSL), for connections that are not gRPC: the object store's transfer port.
// Both sides present certificates of the cluster CA and verify the other's against it (mutual TLS, 1.2 or later);
// the identity checked is the peer certificate's common name ("torus-node:<id>", pki.h), not the host dialled, as
// with the gRPC credentials (credentials.h).
//
// A server context presents a ServerCertificate (a renewed certificate is served from the next handshake); a client
// context reads its certificate when it is made (make one per connection, or per renewal).
//
// The process must ignore SIGPIPE (the agent does): a write to a peer that left fails instead of raising it.
//
// Thread-safety: a TlsSocketContext is thread-safe once made; a TlsSocket is used by one thread.
#pragma once

#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "torus/tls/credentials.h"
#include "torus/tls/server_certificate.h"

namespace torus::tls {

class TlsSocket {
 public:
  ~TlsSocket();  // closes the TLS session (not the socket)
  TlsSocket(const TlsSocket&) = delete;
  TlsSocket& operator=(const TlsSocket&) = delete;

  // The peer's identity (its certificate's common name), verified against the CA.
  const std::string& peer_identity() const { return peer_identity_; }
  // Reads exactly `n` bytes; false when the peer stops first (or on an error).
  bool ReadAll(char* out, size_t n);
  // Reads up to `n` bytes; 0 at the end, -1 on an error (the session is then broken: every later call fails too).
  long Read(char* out, size_t n);
  bool WriteAll(const char* data, size_t n);

 private:
  friend class TlsSocketContext;
  TlsSocket(SSL* ssl, std::string peer_identity) : ssl_(ssl), peer_identity_(std::move(peer_identity)) {}
  SSL* const ssl_;
  const std::string peer_identity_;
  bool broken_ = false;  // a fatal error was seen: no close_notify
};

class TlsSocketContext {
 public:
  // A server presenting `files.cert`/`files.key` (watched), requiring a client certificate of `files.ca`.
  static absl::StatusOr<std::unique_ptr<TlsSocketContext>> ForServer(const TlsFiles& files);
  // A client presenting `files.cert`/`files.key` (read now), verifying the server against `files.ca`.
  static absl::StatusOr<std::unique_ptr<TlsSocketContext>> ForClient(const TlsFiles& files);
  ~TlsSocketContext();
  TlsSocketContext(const TlsSocketContext&) = delete;
  TlsSocketContext& operator=(const TlsSocketContext&) = delete;

  // The handshake on connected socket `fd` (which stays the caller's to close, after the TlsSocket), checking that
  // the peer's identity starts with `identity_prefix` ("" = any the CA issued). UNAVAILABLE when the handshake fails,
  // PERMISSION_DENIED naming the identity when it is not the one expected.
  absl::StatusOr<std::unique_ptr<TlsSocket>> Accept(int fd, const std::string& identity_prefix) const;
  absl::StatusOr<std::unique_ptr<TlsSocket>> Connect(int fd, const std::string& identity_prefix) const;

 private:
  TlsSocketContext(SSL_CTX* ctx, std::unique_ptr<ServerCertificate> certificate)
      : ctx_(ctx), certificate_(std::move(certificate)) {}
  absl::StatusOr<std::unique_ptr<TlsSocket>> Handshake(int fd, bool server, const std::string& identity_prefix) const;

  SSL_CTX* const ctx_;
  const std::unique_ptr<ServerCertificate> certificate_;  // servers only
};

}  // namespace torus::tls
