// Conversions between protobuf messages and torus value types, shared by the head, the agent and the client.
// Thread-safety: pure functions.
#pragma once

#include <google/protobuf/map.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/support/status.h"
#include "torus/common/labels.h"
#include "torus/common/resources.h"

namespace torus::rpc {

using ProtoResources = google::protobuf::Map<std::string, int64_t>;
using ProtoLabels = google::protobuf::Map<std::string, std::string>;

void ToProto(const ResourceSet& resources, ProtoResources* out);
// InvalidArgument naming `field` and the resource when an amount is negative.
absl::StatusOr<ResourceSet> FromProto(const ProtoResources& resources, const std::string& field);
void ToProto(const Labels& labels, ProtoLabels* out);
Labels FromProto(const ProtoLabels& labels);

// absl codes map 1:1 onto gRPC codes.
grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

}  // namespace torus::rpc
