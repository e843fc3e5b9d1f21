#include "torus/common/head_target.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace torus {

std::string HeadTarget(const std::string& addresses) {
  if (addresses.find(',') == std::string::npos) return addresses;
  std::vector<std::string> resolved;
  for (absl::string_view entry : absl::StrSplit(addresses, ',', absl::SkipWhitespace())) {
    const size_t colon = entry.rfind(':');
    if (colon == absl::string_view::npos) return addresses;
    const std::string host(entry.substr(0, colon));
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return addresses;
    char ip[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, ip, sizeof(ip));
    freeaddrinfo(found);
    resolved.push_back(absl::StrCat(ip, entry.substr(colon)));
  }
  return absl::StrCat("ipv4:", absl::StrJoin(resolved, ","));
}

}  // namespace torus
