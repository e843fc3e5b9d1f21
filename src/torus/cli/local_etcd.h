// A local etcd cluster for `torus up --ha`: `members` etcd processes on loopback, each with ports free a moment
// before, data under <session>/etcd/<name>, log <session>/logs/etcd-<name>.log, recorded in the session's
// `processes` file with role "etcd" (so that `torus down` stops them after the heads). It is for trying high
// availability on one machine; a real deployment runs etcd on three machines of its own (docs/deploy-ha.md).
//
// Thread-safety: used from the CLI's main thread.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/statusor.h"

namespace torus::cli {

// Starts the members (Debian: etcd-server) and waits until each answers /health; returns the client endpoints,
// "HOST:P1,HOST:P2,...", where HOST is `client_host` (127.0.0.1, or the bridge of `torus up --netns`, which heads in
// namespaces of their own reach). On failure the error names the member and ends with its log.
absl::StatusOr<std::string> StartLocalEtcd(const std::string& session, int members, std::chrono::milliseconds timeout,
                                           const std::string& client_host = "127.0.0.1");

}  // namespace torus::cli
