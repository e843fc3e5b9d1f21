// The host a server gives others to reach it at. A server bound to a wildcard (0.0.0.0, ::) cannot hand out the
// bind address: drivers, the CLI and workers on other hosts would dial 0.0.0.0. It gives the advertised host it was
// told, else this machine's name resolved to an IPv4 address (what a GKE pod or a VM is reached at), else
// 127.0.0.1. A server bound to one address gives that address, unless told to advertise another (a NAT, a DNS name).
//
// Thread-safety: thread-safe (resolution through getaddrinfo).
#pragma once

#include <string>

namespace torus::rpc {

bool IsWildcardHost(const std::string& host);

// `advertise` when not empty; `bind_host` when it is not a wildcard; else this machine's address as above.
std::string AdvertisedHost(const std::string& bind_host, const std::string& advertise);

}  // namespace torus::rpc
