#include "torus/rpc/convert.h"

#include "absl/strings/str_cat.h"

namespace torus::rpc {

void ToProto(const ResourceSet& resources, ProtoResources* out) {
  out->clear();
  for (const auto& [name, amount] : resources.amounts()) (*out)[name] = amount;
}

absl::StatusOr<ResourceSet> FromProto(const ProtoResources& resources, const std::string& field) {
  ResourceSet out;
  for (const auto& [name, amount] : resources) {
    if (amount < 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": resource \"", name.substr(0, 128),
                                                     "\" must not be negative"));
    }
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
