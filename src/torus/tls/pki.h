// The cluster's certificates: a certificate authority, private keys, signing requests, certificates issued for
// the head and for each node, and what a certificate says about its holder.
//
// Keys are ECDSA P-256; certificates X.509 v3, signed with SHA-256. Identities are the subject's common name:
//   "torus-head"           the head (it is also a server: its certificate names the hosts clients reach it at)
//   "torus-node:<node id>" an agent (server for the head and other agents, client of the head)
//   "torus-worker:<id>"    a core worker's port (a driver's or a task worker's: task calls, object ownership); it
//                          grants nothing a holder of the cluster token could not do
// Every PEM string here is text as OpenSSL writes it ("-----BEGIN ...").
//
// Thread-safety: pure functions (OpenSSL 3 is thread-safe for these calls).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace torus::tls {

inline constexpr char kHeadIdentity[] = "torus-head";
inline constexpr char kNodeIdentityPrefix[] = "torus-node:";
inline constexpr char kWorkerIdentityPrefix[] = "torus-worker:";
// The one DNS name in the certificates of nodes and core workers (and also in the head's): members are reached by
// address, and an address in a certificate is a claim a caller could choose, so torus's channels to members ask for
// this name instead (NameMembersByIdentity, credentials.h) and check the identity.
inline constexpr char kMemberServerName[] = "torus-member";

// "torus-node:<node_id>".
std::string NodeIdentity(std::string_view node_id);
// The node id of a node identity; "" for any other identity.
std::string NodeIdOfIdentity(std::string_view identity);

struct KeyAndCertificate {
  std::string key_pem;   // PKCS#8 private key
  std::string cert_pem;
};

// A new self-signed CA ("<common_name>") valid from now - 1 h for `validity_s`.
absl::StatusOr<KeyAndCertificate> CreateAuthority(std::string_view common_name, int64_t now_s, int64_t validity_s);

// A new P-256 private key.
absl::StatusOr<std::string> GeneratePrivateKey();

// A signing request for `key_pem`, with subject CN = `common_name`, signed by that key.
absl::StatusOr<std::string> CreateSigningRequest(std::string_view key_pem, std::string_view common_name);

struct IssueOptions {
  std::string common_name;                 // the identity the certificate states (the request's own is ignored)
  std::vector<std::string> dns_names;      // subject alternative names
  std::vector<std::string> ip_addresses;   // IPv4 or IPv6 literals
  int64_t now_s = 0;
  int64_t validity_s = 86'400;
};

// A certificate for the public key of `csr_pem` (whose signature must verify), issued by `authority`: usable as a TLS
// server and client certificate, valid from now - 5 min (clock skew; a tenth of `validity_s` when that is less)
// until now + `validity_s`, a random 128-bit serial.
// Errors: a malformed request, a bad signature, an IP that does not parse, or an authority whose key and
// certificate do not match (each named).
absl::StatusOr<std::string> IssueCertificate(const KeyAndCertificate& authority, std::string_view csr_pem,
                                             const IssueOptions& options);

struct CertificateInfo {
  std::string common_name;
  std::string issuer_common_name;
  std::string serial_hex;   // upper-case hex, no separators
  int64_t not_before_s = 0;
  int64_t not_after_s = 0;
  std::vector<std::string> dns_names;
  std::vector<std::string> ip_addresses;
};

// What a PEM certificate (the first one in `cert_pem`) says.
absl::StatusOr<CertificateInfo> ReadCertificate(std::string_view cert_pem);

// OK when `cert_pem` chains to `ca_pem` and is valid at `now_s`; the reason otherwise.
absl::Status VerifyCertificate(std::string_view ca_pem, std::string_view cert_pem, int64_t now_s);

// OK when `key_pem` is the private key of `cert_pem`.
absl::Status CheckKeyMatches(std::string_view key_pem, std::string_view cert_pem);

// True when the two secrets are equal; the time taken does not depend on where they differ.
bool SecretsEqual(std::string_view a, std::string_view b);

// Writes `contents` to `path` atomically with `mode` (0600 for keys), creating no directories.
absl::Status WritePrivateFile(const std::string& path, std::string_view contents, int mode);
// The whole file; NotFound when it does not exist.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace torus::tls
