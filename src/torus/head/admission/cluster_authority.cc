#include "torus/head/admission/cluster_authority.h"

#include <arpa/inet.h>
#include <openssl/rand.h>

#include <filesystem>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"
#include "torus/head/nodes/membership.h"
#include "torus/tls/cluster_secrets.h"

namespace torus::head {
namespace {

bool IsIpAddress(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// The CA from `cert_file`/`key_file`, checked to be a pair.
absl::StatusOr<tls::KeyAndCertificate> LoadAuthority(const std::string& cert_file, const std::string& key_file) {
  auto cert = tls::ReadWholeFile(cert_file);
  if (!cert.ok()) return cert.status();
  auto key = tls::ReadWholeFile(key_file);
  if (!key.ok()) return key.status();
  if (absl::Status s = tls::CheckKeyMatches(*key, *cert); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(key_file, " and ", cert_file, ": ", s.message()));
  }
  return tls::KeyAndCertificate{.key_pem = *std::move(key), .cert_pem = *std::move(cert)};
}

}  // namespace

ClusterAuthority::ClusterAuthority(AuthorityOptions options, const Clock* clock, tls::KeyAndCertificate ca)
    : options_(std::move(options)), clock_(clock), ca_(std::move(ca)) {}

ClusterAuthority::~ClusterAuthority() { Stop(); }

absl::Status ClusterAuthority::Publish(const std::string& dir) const {
  auto join_token = tls::ReadWholeFile(join_token_path());
  if (!join_token.ok()) return join_token.status();
  if (absl::Status s = tls::WritePrivateFile(dir + "/ca.crt", ca_.cert_pem, 0644); !s.ok()) return s;
  return tls::WritePrivateFile(dir + "/join_token", *join_token, 0600);
}

void ClusterAuthority::StartRenewal(std::chrono::milliseconds check) {
  renewer_ = std::thread([this, check] {
    const absl::Duration period = absl::FromChrono(check);
    absl::MutexLock lock(&stop_mu_);
    while (!stop_mu_.AwaitWithTimeout(absl::Condition(&stopping_), period)) {
      stop_mu_.Unlock();
      auto renewed = RenewHeadIfDue();
      if (!renewed.ok()) spdlog::warn("renewing the head's certificate: {}", std::string(renewed.status().message()));
      if (renewed.ok() && *renewed) spdlog::info("the head's certificate was renewed");
      stop_mu_.Lock();
    }
  });
}

void ClusterAuthority::Stop() {
  {
    absl::MutexLock lock(&stop_mu_);
    stopping_ = true;
  }
  if (renewer_.joinable()) renewer_.join();
}

absl::StatusOr<std::unique_ptr<ClusterAuthority>> ClusterAuthority::Open(AuthorityOptions options,
                                                                         const Clock* clock) {
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", options.dir, ": ", ec.message()));
  std::filesystem::permissions(options.dir, std::filesystem::perms::owner_all, std::filesystem::perm_options::replace,
                               ec);
  if (options.ca_cert_file.empty() != options.ca_key_file.empty()) {
    return absl::InvalidArgumentError("--tls-ca and --tls-ca-key go together (the CA's certificate and its key)");
  }
  const int64_t now_s = clock->WallMillis() / 1000;
  tls::KeyAndCertificate ca;
  if (!options.ca_cert_file.empty()) {
    auto loaded = LoadAuthority(options.ca_cert_file, options.ca_key_file);
    if (!loaded.ok()) return loaded.status();
    ca = *std::move(loaded);
  } else if (std::filesystem::exists(options.dir + "/ca.crt", ec)) {
    auto loaded = LoadAuthority(options.dir + "/ca.crt", options.dir + "/ca.key");
    if (!loaded.ok()) return loaded.status();
    ca = *std::move(loaded);
  } else {
    auto created = tls::CreateAuthority("torus cluster CA", now_s, int64_t{10} * 365 * 86'400);
    if (!created.ok()) return created.status();
    ca = *std::move(created);
    if (absl::Status s = tls::WritePrivateFile(options.dir + "/ca.key", ca.key_pem, 0600); !s.ok()) return s;
    if (absl::Status s = tls::WritePrivateFile(options.dir + "/ca.crt", ca.cert_pem, 0644); !s.ok()) return s;
  }
  if (absl::Status s = tls::VerifyCertificate(ca.cert_pem, ca.cert_pem, now_s); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("the cluster CA cannot be used: ", s.message()));
  }
  if (!options.ca_cert_file.empty()) {
    // Nodes and clients are given the CA from the head's directory, whichever file it came from.
    if (absl::Status s = tls::WritePrivateFile(options.dir + "/ca.crt", ca.cert_pem, 0644); !s.ok()) return s;
  }
  std::unique_ptr<ClusterAuthority> authority(new ClusterAuthority(std::move(options), clock, std::move(ca)));
  if (absl::Status s = authority->IssueHead(); !s.ok()) return s;

  if (!authority->options_.join_token_file.empty()) {
    auto given = tls::ReadJoinToken(authority->options_.join_token_file);
    if (!given.ok()) return given.status();
    return authority;
  }
  // The join token survives restarts while it is valid, so that agents given it keep joining.
  auto text = tls::ReadWholeFile(authority->join_token_path());
  if (text.ok()) {
    std::vector<std::string> lines = absl::StrSplit(*text, '\n', absl::SkipEmpty());
    int64_t expires = 0;
    if (lines.size() >= 2 && absl::SimpleAtoi(absl::StripPrefix(lines[1], "expires "), &expires) &&
        expires > now_s + 60) {
      absl::MutexLock lock(&authority->mu_);
      authority->join_token_ = lines[0];
      authority->join_token_expires_s_ = expires;
    }
  }
  bool need_token;
  {
    absl::MutexLock lock(&authority->mu_);
    need_token = authority->join_token_.empty();
  }
  if (need_token) {
    auto token = authority->RotateJoinToken();
    if (!token.ok()) return token.status();
  }
  return authority;
}

tls::TlsFiles ClusterAuthority::head_files() const {
  return {.ca = options_.dir + "/ca.crt", .cert = options_.dir + "/head.crt", .key = options_.dir + "/head.key"};
}

absl::Status ClusterAuthority::IssueHead() {
  const tls::TlsFiles files = head_files();
  // The key stays across renewals and restarts: a file watcher never sees a certificate beside another key.
  std::string key;
  if (auto existing = tls::ReadWholeFile(files.key); existing.ok()) {
    key = *std::move(existing);
  } else {
    auto generated = tls::GeneratePrivateKey();
    if (!generated.ok()) return generated.status();
    key = *std::move(generated);
    if (absl::Status s = tls::WritePrivateFile(files.key, key, 0600); !s.ok()) return s;
  }
  auto csr = tls::CreateSigningRequest(key, tls::kHeadIdentity);
  if (!csr.ok()) return absl::InvalidArgumentError(absl::StrCat(files.key, ": ", csr.status().message()));
  tls::IssueOptions issue{.common_name = tls::kHeadIdentity,
                          .dns_names = {"localhost", tls::kMemberServerName},
                          .ip_addresses = {"127.0.0.1"},
                          .now_s = NowSeconds(),
                          .validity_s = options_.head_validity_s};
  for (const std::string& host : options_.head_hosts) {
    if (host.empty() || host == "localhost" || host == "127.0.0.1" || host == "0.0.0.0" || host == "::") continue;
    (IsIpAddress(host) ? issue.ip_addresses : issue.dns_names).push_back(host);
  }
  auto cert = tls::IssueCertificate(ca_, *csr, issue);
  if (!cert.ok()) return cert.status();
  if (absl::Status s = tls::WritePrivateFile(files.cert, *cert, 0644); !s.ok()) return s;
  auto info = tls::ReadCertificate(*cert);
  if (!info.ok()) return info.status();
  absl::MutexLock lock(&mu_);
  head_not_before_s_ = info->not_before_s;
  head_not_after_s_ = info->not_after_s;
  return absl::OkStatus();
}

absl::StatusOr<bool> ClusterAuthority::RenewHeadIfDue() {
  {
    absl::MutexLock lock(&mu_);
    const int64_t renew_at = head_not_before_s_ + (head_not_after_s_ - head_not_before_s_) * 2 / 3;
    if (NowSeconds() < renew_at) return false;
  }
  if (absl::Status s = IssueHead(); !s.ok()) return s;
  return true;
}

absl::StatusOr<std::string> ClusterAuthority::RotateJoinToken() {
  if (!options_.join_token_file.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the join token is given in ", options_.join_token_file, "; rewrite that file to rotate it"));
  }
  auto new_token = tls::NewJoinToken();
  if (!new_token.ok()) return new_token.status();
  const std::string& token = *new_token;
  const int64_t expires = NowSeconds() + options_.join_token_ttl_s;
  if (absl::Status s = tls::WritePrivateFile(join_token_path(), absl::StrCat(token, "\nexpires ", expires, "\n"), 0600);
      !s.ok()) {
    return s;
  }
  absl::MutexLock lock(&mu_);
  join_token_ = token;
  join_token_expires_s_ = expires;
  return token;
}

absl::StatusOr<NodeCertificate> ClusterAuthority::IssueForJoin(std::string_view join_token, std::string_view node_id,
                                                              std::string_view csr_pem) const {
  if (!options_.join_token_file.empty()) {
    auto given = tls::ReadJoinToken(options_.join_token_file);
    if (!given.ok()) {
      spdlog::warn("join token: {}", std::string(given.status().message()));
      return absl::UnavailableError("join_token: the head cannot read its join token file; see its log");
    }
    if (join_token.empty() || !tls::SecretsEqual(join_token, *given)) {
      return absl::PermissionDeniedError("join_token: not this cluster's join token");
    }
    return Issue(node_id, csr_pem);
  }
  {
    absl::MutexLock lock(&mu_);
    if (join_token.empty() || !tls::SecretsEqual(join_token, join_token_)) {
      return absl::PermissionDeniedError("join_token: not this cluster's join token");
    }
    if (NowSeconds() >= join_token_expires_s_) {
      return absl::PermissionDeniedError(
          "join_token: expired; the head writes a new one to its state directory's tls/join_token when it restarts");
    }
  }
  return Issue(node_id, csr_pem);
}

absl::StatusOr<NodeCertificate> ClusterAuthority::IssueForNode(std::string_view node_id,
                                                              std::string_view csr_pem) const {
  return Issue(node_id, csr_pem);
}

absl::StatusOr<NodeCertificate> ClusterAuthority::IssueForWorker(std::string_view csr_pem) const {
  unsigned char bytes[8];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return absl::InternalError("no random bytes for a worker identity");
  return IssueAs(absl::StrCat(tls::kWorkerIdentityPrefix,
                              absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(bytes), sizeof(bytes)))),
                 csr_pem);
}

absl::StatusOr<NodeCertificate> ClusterAuthority::Issue(std::string_view node_id, std::string_view csr_pem) const {
  if (absl::Status s = ValidateNodeId(node_id); !s.ok()) return s;
  return IssueAs(tls::NodeIdentity(node_id), csr_pem);
}

absl::StatusOr<NodeCertificate> ClusterAuthority::IssueAs(const std::string& identity,
                                                         std::string_view csr_pem) const {
  tls::IssueOptions issue{.common_name = identity,
                          .dns_names = {tls::kMemberServerName},
                          .now_s = NowSeconds(),
                          .validity_s = options_.node_validity_s};
  auto cert = tls::IssueCertificate(ca_, csr_pem, issue);
  if (!cert.ok()) {
    if (cert.status().code() == absl::StatusCode::kInvalidArgument) {
      return absl::InvalidArgumentError(absl::StrCat("csr_pem: ", cert.status().message()));
    }
    return cert.status();
  }
  auto info = tls::ReadCertificate(*cert);
  if (!info.ok()) return info.status();
  return NodeCertificate{.cert_pem = *std::move(cert), .ca_pem = ca_.cert_pem, .not_after_s = info->not_after_s};
}

}  // namespace torus::head
