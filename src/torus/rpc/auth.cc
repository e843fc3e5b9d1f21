#include "torus/rpc/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace torus::rpc {

absl::StatusOr<std::string> GenerateToken() {
  unsigned char bytes[32];
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open /dev/urandom: ", strerror(errno)));
  ssize_t n = read(fd, bytes, sizeof(bytes));
  close(fd);
  if (n != static_cast<ssize_t>(sizeof(bytes))) return absl::InternalError("short read from /dev/urandom");
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(bytes), sizeof(bytes)));
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read token file ", path, ": ", strerror(errno)));
  std::string line;
  std::getline(in, line);
  std::string token(absl::StripAsciiWhitespace(line));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  return token;
}

absl::StatusOr<std::string> LoadOrCreateTokenFile(const std::string& path) {
  if (access(path.c_str(), F_OK) == 0) return ReadTokenFile(path);
  auto token = GenerateToken();
  if (!token.ok()) return token.status();
  std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("create ", tmp, ": ", strerror(errno)));
  std::string line = *token + "\n";
  bool ok = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ok = (fsync(fd) == 0) && ok;
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("write token file ", path, ": ", strerror(errno)));
  }
  return *token;
}

bool BearerMatches(std::string_view header, std::string_view token) {
  constexpr std::string_view kPrefix = "Bearer ";
  if (header.size() != kPrefix.size() + token.size() || header.substr(0, kPrefix.size()) != kPrefix) return false;
  std::string_view given = header.substr(kPrefix.size());
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ token[i]);
  return diff == 0 && !token.empty();
}

}  // namespace torus::rpc
