// The gRPC target for a head address list, "HOST:PORT[,HOST:PORT...]" (`--address`, TORUS_ADDRESS): one address
// stays as it is; several become one channel over all of them ("ipv4:A:P,B:Q", each name resolved now), which
// connects to the first that accepts — the leading head, where standby heads do not listen — and moves on to the next
// when that one goes. A list with an entry that does not resolve to IPv4 is returned unchanged (gRPC then says what
// is wrong with it).
#pragma once

#include <string>

namespace torus {

std::string HeadTarget(const std::string& addresses);

// How long a channel's attempt to connect to one address may take (GRPC_ARG_MIN_RECONNECT_BACKOFF_MS; gRPC's default
// is 20 s) before it moves on: a head whose machine is cut off drops packets, and the channel must reach the next
// head of the list before its callers' deadlines pass.
inline constexpr int kHeadConnectTimeoutMs = 1000;

}  // namespace torus
