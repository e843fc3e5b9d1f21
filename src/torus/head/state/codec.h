// The journal's encoding of records and of whole-state snapshots: JSON text, one object per record with its type
// name in "type". Decoding checks types and names the record and field that do not fit.
//
//   {"type":"GroupEnded","group":"pg-4k1x0q9z2a","state":"REMOVED","message":"removed","wall_ms":1733050000000}
//
// Encoding is deterministic (object keys in order), so two equal states encode to equal text.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "torus/head/state/cluster_state.h"
#include "torus/head/state/records.h"

namespace torus::head {

class StateCodec {
 public:
  static std::string EncodeRecord(const Record& record);
  // InvalidArgument naming the record type and the problem (unknown type, missing or mistyped field).
  static absl::StatusOr<Record> DecodeRecord(std::string_view text);

  // A snapshot of every fact of the state.
  static std::string EncodeState(const ClusterState& state);
  static absl::StatusOr<ClusterState> DecodeState(std::string_view text);
};

}  // namespace torus::head
