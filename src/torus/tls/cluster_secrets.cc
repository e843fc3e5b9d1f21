#include "torus/tls/cluster_secrets.h"

#include <openssl/rand.h>

#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "torus/tls/pki.h"

namespace torus::tls {

ClusterSecretFiles ClusterSecretsIn(const std::string& dir) {
  return {.ca_cert = dir + "/ca.crt", .ca_key = dir + "/ca.key", .join_token = dir + "/join_token"};
}

absl::StatusOr<std::string> NewJoinToken() {
  unsigned char bytes[20];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) return absl::InternalError("no random bytes for a join token");
  return absl::StrCat("join-", absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(bytes),
                                                                         sizeof(bytes))));
}

absl::StatusOr<std::string> ReadJoinToken(const std::string& path) {
  auto text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  const std::string first_line = text->substr(0, text->find('\n'));
  const std::string token(absl::StripAsciiWhitespace(first_line));
  if (token.size() < 16) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a join token is one line of at least 16 characters (`torus tls init` writes one)"));
  }
  return token;
}

absl::StatusOr<ClusterSecretFiles> WriteClusterSecrets(const std::string& dir, int64_t now_s) {
  const ClusterSecretFiles files = ClusterSecretsIn(dir);
  std::error_code ec;
  for (const std::string& f : {files.ca_cert, files.ca_key, files.join_token}) {
    if (std::filesystem::exists(f, ec)) {
      return absl::AlreadyExistsError(absl::StrCat(f, " exists; remove it to make a new CA and join token"));
    }
  }
  if (!std::filesystem::exists(dir, ec)) {
    std::filesystem::create_directories(dir, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, std::filesystem::perm_options::replace, ec);
  }
  auto ca = CreateAuthority("torus cluster CA", now_s, int64_t{10} * 365 * 86'400);
  if (!ca.ok()) return ca.status();
  auto token = NewJoinToken();
  if (!token.ok()) return token.status();
  if (absl::Status s = WritePrivateFile(files.ca_key, ca->key_pem, 0600); !s.ok()) return s;
  if (absl::Status s = WritePrivateFile(files.ca_cert, ca->cert_pem, 0644); !s.ok()) return s;
  if (absl::Status s = WritePrivateFile(files.join_token, *token + "\n", 0600); !s.ok()) return s;
  return files;
}

}  // namespace torus::tls
