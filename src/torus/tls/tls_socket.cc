#include "torus/tls/tls_socket.h"

#include <openssl/err.h>
#include <openssl/x509.h>

#include "absl/strings/str_cat.h"

namespace torus::tls {
namespace {

std::string LastTlsError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "the connection ended";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

std::string SubjectCommonName(X509* cert) {
  char name[256] = {0};
  const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, name, sizeof(name));
  return n > 0 ? std::string(name, static_cast<size_t>(n)) : "";
}

SSL_CTX* NewContext(const TlsFiles& files, bool server) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (ctx == nullptr) return nullptr;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION);
  if (SSL_CTX_load_verify_locations(ctx, files.ca.c_str(), nullptr) != 1) {
    SSL_CTX_free(ctx);
    return nullptr;
  }
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  // Every connection is a full handshake: no session tickets or cache (a transfer is one connection).
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  if (server) SSL_CTX_set_num_tickets(ctx, 0);
  return ctx;
}

}  // namespace

TlsSocket::~TlsSocket() {
  if (!broken_) SSL_shutdown(ssl_);  // a close_notify, not after a fatal error (OpenSSL forbids it)
  ERR_clear_error();
  SSL_free(ssl_);
}

long TlsSocket::Read(char* out, size_t n) {
  size_t got = 0;
  if (SSL_read_ex(ssl_, out, n, &got) == 1) return static_cast<long>(got);
  const int error = SSL_get_error(ssl_, 0);
  ERR_clear_error();
  if (error == SSL_ERROR_ZERO_RETURN) return 0;
  broken_ = true;
  return -1;
}

bool TlsSocket::ReadAll(char* out, size_t n) {
  size_t got = 0;
  while (got < n) {
    const long r = Read(out + got, n - got);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

bool TlsSocket::WriteAll(const char* data, size_t n) {
  size_t sent = 0;
  while (sent < n) {
    size_t written = 0;
    if (SSL_write_ex(ssl_, data + sent, n - sent, &written) != 1) {
      ERR_clear_error();
      broken_ = true;
      return false;
    }
    sent += written;
  }
  return true;
}

TlsSocketContext::~TlsSocketContext() { SSL_CTX_free(ctx_); }

absl::StatusOr<std::unique_ptr<TlsSocketContext>> TlsSocketContext::ForServer(const TlsFiles& files) {
  auto certificate = std::make_unique<ServerCertificate>(files);
  if (absl::Status s = certificate->Load(); !s.ok()) return s;
  SSL_CTX* ctx = NewContext(files, /*server=*/true);
  if (ctx == nullptr) return absl::InvalidArgumentError(absl::StrCat("cannot load the CA ", files.ca));
  certificate->Install(ctx);
  return std::unique_ptr<TlsSocketContext>(new TlsSocketContext(ctx, std::move(certificate)));
}

absl::StatusOr<std::unique_ptr<TlsSocketContext>> TlsSocketContext::ForClient(const TlsFiles& files) {
  SSL_CTX* ctx = NewContext(files, /*server=*/false);
  if (ctx == nullptr) return absl::InvalidArgumentError(absl::StrCat("cannot load the CA ", files.ca));
  if (SSL_CTX_use_certificate_file(ctx, files.cert.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_use_PrivateKey_file(ctx, files.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1) {
    SSL_CTX_free(ctx);
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(files.key, " and ", files.cert, " are not a key and its certificate"));
  }
  return std::unique_ptr<TlsSocketContext>(new TlsSocketContext(ctx, nullptr));
}

absl::StatusOr<std::unique_ptr<TlsSocket>> TlsSocketContext::Accept(int fd, const std::string& identity_prefix) const {
  return Handshake(fd, /*server=*/true, identity_prefix);
}

absl::StatusOr<std::unique_ptr<TlsSocket>> TlsSocketContext::Connect(int fd,
                                                                     const std::string& identity_prefix) const {
  return Handshake(fd, /*server=*/false, identity_prefix);
}

absl::StatusOr<std::unique_ptr<TlsSocket>> TlsSocketContext::Handshake(int fd, bool server,
                                                                       const std::string& identity_prefix) const {
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return absl::InternalError("cannot start a TLS session");
  }
  if ((server ? SSL_accept(ssl) : SSL_connect(ssl)) != 1) {
    const std::string why = LastTlsError();
    SSL_free(ssl);
    return absl::UnavailableError(absl::StrCat("TLS handshake: ", why));
  }
  X509* peer = SSL_get1_peer_certificate(ssl);
  const std::string identity = peer != nullptr ? SubjectCommonName(peer) : "";
  X509_free(peer);
  if (peer == nullptr || SSL_get_verify_result(ssl) != X509_V_OK) {
    SSL_free(ssl);
    return absl::PermissionDeniedError("the peer presented no certificate of the cluster CA");
  }
  if (identity.rfind(identity_prefix, 0) != 0) {
    SSL_shutdown(ssl);
    SSL_free(ssl);
    return absl::PermissionDeniedError(
        absl::StrCat("the peer is '", identity, "', not ", identity_prefix.empty() ? "a member" : identity_prefix));
  }
  return std::unique_ptr<TlsSocket>(new TlsSocket(ssl, identity));
}

}  // namespace torus::tls
