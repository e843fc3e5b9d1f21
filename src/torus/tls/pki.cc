#include "torus/tls/pki.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace torus::tls {
namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Req = std::unique_ptr<X509_REQ, Deleter<X509_REQ, X509_REQ_free>>;
using Store = std::unique_ptr<X509_STORE, Deleter<X509_STORE, X509_STORE_free>>;
using StoreCtx = std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX, X509_STORE_CTX_free>>;
using Names = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES, GENERAL_NAMES_free>>;

// The last OpenSSL error as text, the error queue cleared.
std::string OpenSslError() {
  unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(code, buf, sizeof(buf));
  return buf;
}

absl::Status Failed(std::string_view what) {
  return absl::InternalError(absl::StrCat(std::string(what), ": ", OpenSslError()));
}

Bio ReadBio(std::string_view pem) { return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()))); }

std::string DrainBio(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::StatusOr<Key> ParseKey(std::string_view pem) {
  Bio bio = ReadBio(pem);
  Key key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) return absl::InvalidArgumentError(absl::StrCat("not a PEM private key: ", OpenSslError()));
  return key;
}

absl::StatusOr<Cert> ParseCert(std::string_view pem) {
  Bio bio = ReadBio(pem);
  Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!cert) return absl::InvalidArgumentError(absl::StrCat("not a PEM certificate: ", OpenSslError()));
  return cert;
}

absl::StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  Bio out(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_PrivateKey(out.get(), key, nullptr, nullptr, 0, nullptr, nullptr)) return Failed("write key");
  return DrainBio(out.get());
}

absl::StatusOr<std::string> CertPem(X509* cert) {
  Bio out(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_X509(out.get(), cert)) return Failed("write certificate");
  return DrainBio(out.get());
}

absl::Status SetCommonName(X509_NAME* name, std::string_view common_name) {
  if (common_name.empty() || common_name.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("common name must be 1-64 characters (got ", common_name.size(), ")"));
  }
  if (!X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(common_name.data()),
                                  static_cast<int>(common_name.size()), -1, 0)) {
    return Failed("set common name");
  }
  return absl::OkStatus();
}

std::string CommonNameOf(X509_NAME* name) {
  int index = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
  if (index < 0) return "";
  ASN1_STRING* data = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, index));
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(data)),
                     static_cast<size_t>(ASN1_STRING_length(data)));
}

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) return Failed(absl::StrCat("extension ", OBJ_nid2sn(nid), "=", value));
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (!added) return Failed("add extension");
  return absl::OkStatus();
}

absl::Status SetRandomSerial(X509* cert) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return Failed("random serial");
  bytes[0] &= 0x7f;  // positive
  bytes[0] |= 0x40;  // and 16 bytes long
  BIGNUM* bn = BN_bin2bn(bytes, sizeof(bytes), nullptr);
  const bool ok = bn != nullptr && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert)) != nullptr;
  BN_free(bn);
  if (!ok) return Failed("set serial");
  return absl::OkStatus();
}

absl::Status SetValidity(X509* cert, int64_t from_s, int64_t to_s) {
  if (ASN1_TIME_set(X509_getm_notBefore(cert), static_cast<time_t>(from_s)) == nullptr ||
      ASN1_TIME_set(X509_getm_notAfter(cert), static_cast<time_t>(to_s)) == nullptr) {
    return Failed("set validity");
  }
  return absl::OkStatus();
}

int64_t SecondsOf(const ASN1_TIME* time) {
  struct tm tm {};
  if (ASN1_TIME_to_tm(time, &tm) != 1) return 0;
  return static_cast<int64_t>(timegm(&tm));
}

}  // namespace

std::string NodeIdentity(std::string_view node_id) { return absl::StrCat(kNodeIdentityPrefix, std::string(node_id)); }

std::string NodeIdOfIdentity(std::string_view identity) {
  const std::string_view prefix = kNodeIdentityPrefix;
  if (identity.size() <= prefix.size() || identity.substr(0, prefix.size()) != prefix) return "";
  return std::string(identity.substr(prefix.size()));
}

absl::StatusOr<std::string> GeneratePrivateKey() {
  Key key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (!key) return Failed("generate key");
  return KeyPem(key.get());
}

absl::StatusOr<KeyAndCertificate> CreateAuthority(std::string_view common_name, int64_t now_s, int64_t validity_s) {
  auto key_pem = GeneratePrivateKey();
  if (!key_pem.ok()) return key_pem.status();
  auto key = ParseKey(*key_pem);
  if (!key.ok()) return key.status();
  Cert cert(X509_new());
  if (!cert || !X509_set_version(cert.get(), 2)) return Failed("new certificate");
  if (absl::Status s = SetRandomSerial(cert.get()); !s.ok()) return s;
  if (absl::Status s = SetValidity(cert.get(), now_s - 3600, now_s + validity_s); !s.ok()) return s;
  X509_NAME* name = X509_get_subject_name(cert.get());
  if (absl::Status s = SetCommonName(name, common_name); !s.ok()) return s;
  if (!X509_set_issuer_name(cert.get(), name) || !X509_set_pubkey(cert.get(), key->get())) return Failed("CA names");
  for (auto [nid, value] : {std::pair<int, const char*>{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                            {NID_key_usage, "critical,keyCertSign,cRLSign"},
                            {NID_subject_key_identifier, "hash"}}) {
    if (absl::Status s = AddExtension(cert.get(), cert.get(), nid, value); !s.ok()) return s;
  }
  if (X509_sign(cert.get(), key->get(), EVP_sha256()) == 0) return Failed("sign CA");
  auto cert_pem = CertPem(cert.get());
  if (!cert_pem.ok()) return cert_pem.status();
  return KeyAndCertificate{.key_pem = *std::move(key_pem), .cert_pem = *std::move(cert_pem)};
}

absl::StatusOr<std::string> CreateSigningRequest(std::string_view key_pem, std::string_view common_name) {
  auto key = ParseKey(key_pem);
  if (!key.ok()) return key.status();
  Req req(X509_REQ_new());
  if (!req || !X509_REQ_set_version(req.get(), 0)) return Failed("new request");
  X509_NAME* name = X509_REQ_get_subject_name(req.get());
  if (absl::Status s = SetCommonName(name, common_name); !s.ok()) return s;
  if (!X509_REQ_set_pubkey(req.get(), key->get()) || X509_REQ_sign(req.get(), key->get(), EVP_sha256()) == 0) {
    return Failed("sign request");
  }
  Bio out(BIO_new(BIO_s_mem()));
  if (!PEM_write_bio_X509_REQ(out.get(), req.get())) return Failed("write request");
  return DrainBio(out.get());
}

absl::StatusOr<std::string> IssueCertificate(const KeyAndCertificate& authority, std::string_view csr_pem,
                                             const IssueOptions& options) {
  auto ca_key = ParseKey(authority.key_pem);
  if (!ca_key.ok()) return absl::InvalidArgumentError(absl::StrCat("CA key: ", ca_key.status().message()));
  auto ca_cert = ParseCert(authority.cert_pem);
  if (!ca_cert.ok()) return absl::InvalidArgumentError(absl::StrCat("CA certificate: ", ca_cert.status().message()));
  if (X509_check_private_key(ca_cert->get(), ca_key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the CA key is not the key of the CA certificate");
  }
  Bio bio = ReadBio(csr_pem);
  Req req(PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr));
  if (!req) return absl::InvalidArgumentError(absl::StrCat("not a PEM certificate signing request: ", OpenSslError()));
  Key public_key(X509_REQ_get_pubkey(req.get()));
  if (!public_key || X509_REQ_verify(req.get(), public_key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the signing request's signature does not verify with its own key");
  }
  if (options.validity_s <= 0) return absl::InvalidArgumentError("validity must be positive");

  Cert cert(X509_new());
  if (!cert || !X509_set_version(cert.get(), 2)) return Failed("new certificate");
  if (absl::Status s = SetRandomSerial(cert.get()); !s.ok()) return s;
  // Valid from a little before now, for clocks behind the issuer's: 5 minutes, or a tenth of a short validity.
  const int64_t skew_s = std::min<int64_t>(300, options.validity_s / 10);
  if (absl::Status s = SetValidity(cert.get(), options.now_s - skew_s, options.now_s + options.validity_s); !s.ok()) {
    return s;
  }
  if (absl::Status s = SetCommonName(X509_get_subject_name(cert.get()), options.common_name); !s.ok()) return s;
  if (!X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert->get())) ||
      !X509_set_pubkey(cert.get(), public_key.get())) {
    return Failed("certificate names");
  }
  for (auto [nid, value] : {std::pair<int, const char*>{NID_basic_constraints, "critical,CA:FALSE"},
                            {NID_key_usage, "critical,digitalSignature,keyEncipherment"},
                            {NID_ext_key_usage, "serverAuth,clientAuth"},
                            {NID_authority_key_identifier, "keyid"}}) {
    if (absl::Status s = AddExtension(cert.get(), ca_cert->get(), nid, value); !s.ok()) return s;
  }
  if (!options.dns_names.empty() || !options.ip_addresses.empty()) {
    std::vector<std::string> names;
    for (const std::string& dns : options.dns_names) {
      if (dns.empty() || dns.find_first_of(",: \t") != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("'", dns, "' is not a DNS name"));
      }
      names.push_back("DNS:" + dns);
    }
    for (const std::string& ip : options.ip_addresses) {
      unsigned char buf[16];
      if (inet_pton(AF_INET, ip.c_str(), buf) != 1 && inet_pton(AF_INET6, ip.c_str(), buf) != 1) {
        return absl::InvalidArgumentError(absl::StrCat("'", ip, "' is not an IPv4 or IPv6 address"));
      }
      names.push_back("IP:" + ip);
    }
    if (absl::Status s = AddExtension(cert.get(), ca_cert->get(), NID_subject_alt_name, absl::StrJoin(names, ","));
        !s.ok()) {
      return s;
    }
  }
  if (X509_sign(cert.get(), ca_key->get(), EVP_sha256()) == 0) return Failed("sign certificate");
  return CertPem(cert.get());
}

absl::StatusOr<CertificateInfo> ReadCertificate(std::string_view cert_pem) {
  auto cert = ParseCert(cert_pem);
  if (!cert.ok()) return cert.status();
  CertificateInfo info;
  info.common_name = CommonNameOf(X509_get_subject_name(cert->get()));
  info.issuer_common_name = CommonNameOf(X509_get_issuer_name(cert->get()));
  BIGNUM* bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert->get()), nullptr);
  if (bn != nullptr) {
    char* hex = BN_bn2hex(bn);
    info.serial_hex = hex;
    OPENSSL_free(hex);
    BN_free(bn);
  }
  info.not_before_s = SecondsOf(X509_get0_notBefore(cert->get()));
  info.not_after_s = SecondsOf(X509_get0_notAfter(cert->get()));
  Names names(static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert->get(), NID_subject_alt_name, nullptr, nullptr)));
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type == GEN_DNS) {
      info.dns_names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(name->d.dNSName)),
                                  static_cast<size_t>(ASN1_STRING_length(name->d.dNSName)));
    } else if (name->type == GEN_IPADD) {
      const int length = ASN1_STRING_length(name->d.iPAddress);
      char text[INET6_ADDRSTRLEN] = {0};
      if (inet_ntop(length == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(name->d.iPAddress), text,
                    sizeof(text)) != nullptr) {
        info.ip_addresses.emplace_back(text);
      }
    }
  }
  return info;
}

absl::Status VerifyCertificate(std::string_view ca_pem, std::string_view cert_pem, int64_t now_s) {
  auto ca = ParseCert(ca_pem);
  if (!ca.ok()) return absl::InvalidArgumentError(absl::StrCat("CA certificate: ", ca.status().message()));
  auto cert = ParseCert(cert_pem);
  if (!cert.ok()) return cert.status();
  Store store(X509_STORE_new());
  StoreCtx ctx(X509_STORE_CTX_new());
  if (!store || !ctx || !X509_STORE_add_cert(store.get(), ca->get()) ||
      !X509_STORE_CTX_init(ctx.get(), store.get(), cert->get(), nullptr)) {
    return Failed("verify");
  }
  X509_STORE_CTX_set_time(ctx.get(), 0, static_cast<time_t>(now_s));
  if (X509_verify_cert(ctx.get()) != 1) {
    const int error = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return absl::UnauthenticatedError(
        absl::StrCat("certificate does not verify: ", X509_verify_cert_error_string(error)));
  }
  return absl::OkStatus();
}

absl::Status CheckKeyMatches(std::string_view key_pem, std::string_view cert_pem) {
  auto key = ParseKey(key_pem);
  if (!key.ok()) return key.status();
  auto cert = ParseCert(cert_pem);
  if (!cert.ok()) return cert.status();
  if (X509_check_private_key(cert->get(), key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the key is not the certificate's key");
  }
  return absl::OkStatus();
}

bool SecretsEqual(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

absl::Status WritePrivateFile(const std::string& path, std::string_view contents, int mode) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return absl::InternalError(absl::StrCat("create ", tmp, ": ", strerror(errno)));
  bool ok = fchmod(fd, static_cast<mode_t>(mode)) == 0;
  ok = ok && write(fd, contents.data(), contents.size()) == static_cast<ssize_t>(contents.size());
  ok = (fsync(fd) == 0) && ok;
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = strerror(errno);
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("write ", path, ": ", why));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    return absl::PermissionDeniedError(absl::StrCat("cannot read ", path, ": ", strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace torus::tls
