// Test helper: one unary call of any method with raw bytes as its request, through grpc::GenericStub, for tests that
// send what a typed stub cannot (undecodable messages, made-up methods).
//
// Thread-safety: a free function; each call uses its own context.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "torus/rpc/auth.h"

namespace torus::rpc::testutil {

// Calls `method` ("/package.Service/Method") with `bytes` as the request, with `authorization: Bearer <token>`
// unless `token` is empty, and returns the call's status; DEADLINE_EXCEEDED after `timeout`.
inline grpc::Status GenericUnaryCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                                     const std::string& bytes, const std::string& token,
                                     std::chrono::seconds timeout = std::chrono::seconds(20)) {
  grpc::GenericStub generic(channel);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), reply;
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata(kAuthMetadataKey, "Bearer " + token);
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  grpc::StubOptions options;
  generic.UnaryCall(&ctx, method, options, &request, &reply, [&](grpc::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
    done = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });  // the deadline ends the call
  return status;
}

}  // namespace torus::rpc::testutil
