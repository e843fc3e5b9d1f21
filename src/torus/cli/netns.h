// Network namespaces for `torus up --netns`: every simulated host but the head's runs in a network namespace of its
// own, joined to a bridge in the machine's namespace by a veth pair, on a /24 subnet of the session's own,
// 10.213.S.0/24 (the bridge is .1 — the head and the head host's agent listen there — and the hosts are .2 and up).
// Hosts then reach each other and the head only over those links, so a link can be cut and healed
// (`torus node cut|heal NAME`: the host's veth end on the bridge goes down or up; its packets go nowhere, both ways)
// to see what a network partition does. In a host's namespace this machine's name resolves to the host's address
// (/etc/netns/NS/hosts, which `ip netns exec` mounts over /etc/hosts). The namespaces, links and bridge are recorded
// in `<session>/netns`
// ("bridge NAME SUBNET_INDEX" and "host NAME NAMESPACE LINK" lines) and removed by `torus down`.
//
// Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's `ip`. Errors name the `ip` command that failed and
// what it printed.
//
// Thread-safety: used from the CLI's main thread.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace torus::cli {

struct SessionBridge {
  std::string name;    // "torus-br17"
  int subnet = 0;      // S of 10.213.S.0/24
  std::string prefix;  // "10.213.17."
  std::string address; // "10.213.17.1": the bridge's, in the machine's namespace
};

// Creates the session's bridge on a subnet no interface of this machine uses yet, and records it.
absl::StatusOr<SessionBridge> CreateSessionBridge(const std::string& session);

// Creates host `name`'s namespace with its link to the bridge and the address `ip` (prefix + N), and records it.
// `index` (2..254) makes the namespace and link names unique within the session.
absl::Status AddHostNamespace(const std::string& session, const SessionBridge& bridge, const std::string& name,
                              const std::string& ip, int index);

// The argv prefix that runs a program in host `name`'s namespace ({"/usr/sbin/ip", "netns", "exec", NS}), or
// empty when the host has none. `ip netns exec` execs the program in its own process: the pid is the program's.
std::vector<std::string> NamespacePrefix(const std::string& session, const std::string& name);

// Takes host `name`'s link down (`up` false) or up. NotFound when the session has no such host in a namespace.
absl::Status SetHostLink(const std::string& session, const std::string& name, bool up);

// Removes every namespace and the bridge the session recorded (what is already gone is skipped).
void RemoveSessionNetwork(const std::string& session);

}  // namespace torus::cli
