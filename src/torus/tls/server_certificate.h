// ServerCertificate: the certificate and key an OpenSSL server context presents (the head's HTTPS API), read again
// when either file changes (a new inode, modification time or size) — checked at a handshake at most once a second —
// so that a renewed certificate is served without a restart. A key and certificate that do not match (one of the
// pair written, not yet the other) keep the previous pair.
//
// Thread-safety: thread-safe; the handshake callback runs on the server's connection threads.
#pragma once

#include <openssl/ssl.h>

#include <ctime>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "torus/tls/credentials.h"

namespace torus::tls {

class ServerCertificate {
 public:
  explicit ServerCertificate(TlsFiles files) : files_(std::move(files)) {}
  ~ServerCertificate();
  ServerCertificate(const ServerCertificate&) = delete;
  ServerCertificate& operator=(const ServerCertificate&) = delete;

  // Reads the files; the error names the one that does not load.
  absl::Status Load();
  // Makes `ctx` serve TLS 1.2 or later with this certificate. REQUIRES: Load() succeeded; this outlives `ctx`.
  bool Install(SSL_CTX* ctx);

 private:
  static int OnHandshake(SSL* ssl, void* self);
  void RefreshIfChanged();

  const TlsFiles files_;
  absl::Mutex mu_;
  X509* cert_ ABSL_GUARDED_BY(mu_) = nullptr;
  EVP_PKEY* key_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string cert_version_ ABSL_GUARDED_BY(mu_);  // inode, modification time and size of the file loaded
  std::string key_version_ ABSL_GUARDED_BY(mu_);
  time_t checked_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace torus::tls
