#include "torus/rpc/advertised_host.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>

namespace torus::rpc {
namespace {

// This machine's name resolved to its first IPv4 address; "" when it does not resolve.
std::string ResolveOwnName() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(name.data(), nullptr, &hints, &found) != 0 || found == nullptr) return "";
  std::string address;
  std::array<char, INET_ADDRSTRLEN> text{};
  const auto* in = reinterpret_cast<const sockaddr_in*>(found->ai_addr);
  if (inet_ntop(AF_INET, &in->sin_addr, text.data(), text.size()) != nullptr) address = text.data();
  freeaddrinfo(found);
  return address == "0.0.0.0" ? "" : address;
}

}  // namespace

bool IsWildcardHost(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

std::string AdvertisedHost(const std::string& bind_host, const std::string& advertise) {
  if (!advertise.empty()) return advertise;
  if (!IsWildcardHost(bind_host)) return bind_host;
  std::string own = ResolveOwnName();
  return own.empty() ? "127.0.0.1" : own;
}

}  // namespace torus::rpc
