// The cluster token: creation, storage and the check every RPC and HTTP request goes through.
// Thread-safety: pure functions, except the file helpers which touch only the named path.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace torus::rpc {

// gRPC metadata key carrying "Bearer <token>".
inline constexpr char kAuthMetadataKey[] = "authorization";
// Initial metadata key the head sends on a heartbeat stream it accepted (a refused call ends without it).
inline constexpr char kHeartbeatAcceptedKey[] = "torus-heartbeat-accepted";

// 32 random bytes from /dev/urandom as 64 hex characters.
absl::StatusOr<std::string> GenerateToken();

// Reads the token at `path`; creates it (mode 0600, written atomically) when the file does not exist.
absl::StatusOr<std::string> LoadOrCreateTokenFile(const std::string& path);
// Reads a token file; the token is the first line, trimmed. Errors name the path.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// True when `header` is exactly "Bearer <token>". Compares in constant time for equal lengths.
bool BearerMatches(std::string_view header, std::string_view token);

}  // namespace torus::rpc
