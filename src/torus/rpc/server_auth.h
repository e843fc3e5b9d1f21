// The token check of every gRPC handler, head or agent.
// Thread-safety: pure.
#pragma once

#include <string>

#include "grpcpp/grpcpp.h"

namespace torus::rpc {

// OK when the call carries `authorization: Bearer <token>`; UNAUTHENTICATED (saying what is wrong) otherwise.
grpc::Status CheckToken(const grpc::ServerContextBase* ctx, const std::string& token);

// Finishes a unary callback call with `status` and returns its reactor.
grpc::ServerUnaryReactor* FinishCall(grpc::CallbackServerContext* ctx, const grpc::Status& status);

}  // namespace torus::rpc
