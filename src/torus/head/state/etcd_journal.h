// EtcdJournal: the head's journal in etcd (v3, through the JSON gateway every etcd serves under /v3/ on its client
// port), for a head whose state must outlive its machine: etcd keeps it on a quorum of its members.
//
// Layout under the URL's prefix P (default /torus):
//   P/owner            the head holding the journal (its host, pid and a random id), attached to an etcd lease
//   P/log/<seq>        the records of one transaction, framed in one value (so a transaction is one put: all or
//                      none), seq from 1 in commit order, zero-padded so that keys sort as numbers; a transaction
//                      over 1 MiB is written to P/logpart/<seq>/<lease>/<i> first and its entry names those parts
//   P/snapshot         "<generation> <through> <chunks> <bytes>": the latest snapshot covers the log up to `through`
//   P/snap/<gen>/<i>   its bytes, in chunks of at most 1 MiB (one etcd request carries at most 1.5 MiB by default)
//
// Ownership and fencing: opening takes P/owner with a lease of `lease_ttl` (refused, naming the holder, while
// another head's lease lives) and keeps the lease alive from a thread of its own. Every write is an etcd
// transaction conditioned on P/owner still being this head's: once the lease has expired (this head stalled or was
// cut off longer than the TTL) and another head took the journal, this one's writes fail (FailedPrecondition "this
// head no longer holds the journal ...") instead of overwriting the new owner's state.
//
// Durability: an Append returns once etcd committed it, that is, once a quorum of its members has it on disk.
//
// Thread-safety: not thread-safe (StateStore calls it under its mutex); the keep-alive thread is internal.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torus/head/state/journal.h"

namespace torus::head {

// An etcd address as `--state-store` takes it: etcd://HOST:PORT[,HOST:PORT...][/PREFIX].
struct EtcdTarget {
  std::vector<std::string> endpoints;  // host:port
  std::string prefix = "/torus";       // keys live under it, no trailing slash
  std::string url;                     // as given, for messages
};
// InvalidArgument naming the part that is wrong and the accepted form.
absl::StatusOr<EtcdTarget> ParseEtcdTarget(const std::string& url);

struct EtcdJournalOptions {
  std::chrono::seconds lease_ttl{4};
  // Per request; an endpoint that does not answer within it gives way to the next.
  std::chrono::milliseconds request_timeout{5000};
  // Called once (on the keep-alive thread, or the writer's) when this head learns it no longer holds the journal.
  std::function<void(const std::string&)> on_lost;
};

// Waits, up to `wait`, until the journal at `target` has no holder (its owner key goes: the holder stopped, or its
// lease ran out), watching the key; OK at once when it has none, DeadlineExceeded when `wait` passed first. A standby
// head calls it between attempts to open the journal.
absl::Status WaitForJournalRelease(const EtcdTarget& target, std::chrono::milliseconds wait);

// Opens the journal at `target`, taking its ownership (see above). FailedPrecondition naming the holder when another
// head holds it; Unavailable naming every endpoint when none answers.
absl::StatusOr<std::unique_ptr<Journal>> OpenEtcdJournal(const EtcdTarget& target, EtcdJournalOptions options = {});

}  // namespace torus::head
