#include "torus/tls/server_certificate.h"

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace torus::tls {
namespace {

// The file's identity and modification time: a file replaced by rename (a new inode) or rewritten shows a change,
// however soon after the last.
std::string Version(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return "";
  return absl::StrCat(st.st_ino, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, ":", st.st_size);
}

}  // namespace

ServerCertificate::~ServerCertificate() {
  X509_free(cert_);
  EVP_PKEY_free(key_);
}

absl::Status ServerCertificate::Load() {
  FILE* cert_file = fopen(files_.cert.c_str(), "r");
  if (cert_file == nullptr) return absl::NotFoundError(absl::StrCat("cannot read ", files_.cert));
  X509* cert = PEM_read_X509(cert_file, nullptr, nullptr, nullptr);
  fclose(cert_file);
  if (cert == nullptr) return absl::InvalidArgumentError(absl::StrCat(files_.cert, " is not a PEM certificate"));
  FILE* key_file = fopen(files_.key.c_str(), "r");
  EVP_PKEY* key = key_file == nullptr ? nullptr : PEM_read_PrivateKey(key_file, nullptr, nullptr, nullptr);
  if (key_file != nullptr) fclose(key_file);
  if (key == nullptr || X509_check_private_key(cert, key) != 1) {
    X509_free(cert);
    EVP_PKEY_free(key);
    return absl::InvalidArgumentError(absl::StrCat(files_.key, " is not the key of ", files_.cert));
  }
  absl::MutexLock lock(&mu_);
  X509_free(cert_);
  EVP_PKEY_free(key_);
  cert_ = cert;
  key_ = key;
  cert_version_ = Version(files_.cert);
  key_version_ = Version(files_.key);
  return absl::OkStatus();
}

void ServerCertificate::RefreshIfChanged() {
  {
    absl::MutexLock lock(&mu_);
    const time_t now = time(nullptr);
    if (now == checked_) return;
    checked_ = now;
    if (Version(files_.cert) == cert_version_ && Version(files_.key) == key_version_) return;
  }
  Load().IgnoreError();  // a half-written pair keeps the previous one until both files agree
}

int ServerCertificate::OnHandshake(SSL* ssl, void* self) {
  auto* me = static_cast<ServerCertificate*>(self);
  me->RefreshIfChanged();
  absl::MutexLock lock(&me->mu_);
  if (me->cert_ == nullptr) return 0;
  return SSL_use_certificate(ssl, me->cert_) == 1 && SSL_use_PrivateKey(ssl, me->key_) == 1 ? 1 : 0;
}

bool ServerCertificate::Install(SSL_CTX* ctx) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_cert_cb(ctx, &ServerCertificate::OnHandshake, this);
  return true;
}

}  // namespace torus::tls
