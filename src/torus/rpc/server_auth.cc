#include "torus/rpc/server_auth.h"

#include "torus/rpc/auth.h"

namespace torus::rpc {

grpc::Status CheckToken(const grpc::ServerContextBase* ctx, const std::string& token) {
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find(kAuthMetadataKey);
  if (it == metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing cluster token; pass it as metadata 'authorization: Bearer <token>'");
  }
  if (!BearerMatches(std::string_view(it->second.data(), it->second.size()), token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "wrong cluster token");
  }
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* FinishCall(grpc::CallbackServerContext* ctx, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

}  // namespace torus::rpc
