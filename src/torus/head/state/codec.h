// The journal's encoding of records and of whole-state snapshots: JSON text, one object per record with its type
// name in "type". Decoding checks types and names the record and field that do not fit.
//
//   {"type":"GroupEnded","group":"pg-4k1x0q9z2a","state":"REMOVED","message":"removed","wall_ms":1733050000000}
//
// Encoding is deterministic (object keys in order), so two equal states encode to equal text. JSON text is UTF-8:
// a byte of a string that is not UTF-8 is written as U+FFFD, so such a record does not decode to itself.
// StateStore therefore applies the record as it decodes from the journal (see Txn::Apply), and a replayed state
// always equals the live one.
//
// Thread-safety: pure functions.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "torus/head/state/cluster_state.h"
#include "torus/head/state/records.h"

namespace torus::head {

class StateCodec {
 public:
  static std::string EncodeRecord(const Record& record);
  // The record's text when every string in it is UTF-8; nullopt otherwise (EncodeRecord would replace bytes).
  static std::optional<std::string> EncodeRecordExact(const Record& record);
  // InvalidArgument naming the record type and the problem (unknown type, missing or mistyped field).
  static absl::StatusOr<Record> DecodeRecord(std::string_view text);

  // A snapshot of every fact of the state: a line of metadata, then one line per node, group, worker, job and run
  // (decoded in parallel). Errors name the line.
  static std::string EncodeState(const ClusterState& state);
  static absl::StatusOr<ClusterState> DecodeState(std::string_view text);
};

// Runs body(0..n-1) on up to min(cores, 8) threads, each a contiguous range; inline for small n. Returns when all
// are done.
void ParallelFor(size_t n, const std::function<void(size_t)>& body);

}  // namespace torus::head
