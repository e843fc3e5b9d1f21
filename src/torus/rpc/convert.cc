#include "torus/rpc/convert.h"

namespace torus::rpc {

void ToProto(const ResourceSet& resources, ProtoResources* out) {
  out->clear();
  for (const auto& [name, amount] : resources.amounts()) (*out)[name] = amount;
}

ResourceSet FromProto(const ProtoResources& resources) {
  ResourceSet out;
  // REQUIRES: no negative amounts; callers reject them first so that the error can name the field.
  for (const auto& [name, amount] : resources) {
    if (amount != 0) out.SetFixed(name, amount);
  }
  return out;
}

void ToProto(const Labels& labels, ProtoLabels* out) {
  out->clear();
  for (const auto& [key, value] : labels) (*out)[key] = value;
}

Labels FromProto(const ProtoLabels& labels) { return Labels(labels.begin(), labels.end()); }

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace torus::rpc
