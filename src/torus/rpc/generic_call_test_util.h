// Test helper: one unary call of any method with raw bytes as its request, through grpc::GenericStub, for tests that
// send what a typed stub cannot (undecodable messages, made-up methods).
//
// Thread-safety: a free function; each call uses its own context.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "google/protobuf/descriptor.h"
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
  absl::Mutex mu;
  absl::CondVar cv;
  bool done = false;
  grpc::Status status;
  grpc::StubOptions options;
  generic.UnaryCall(&ctx, method, options, &request, &reply, [&](grpc::Status s) {
    absl::MutexLock lock(&mu);
    status = std::move(s);
    done = true;
    cv.SignalAll();
  });
  absl::MutexLock lock(&mu);
  while (!done) cv.Wait(&mu);  // the deadline ends the call
  return status;
}

// A request no message decodes from: a length-delimited field 1 whose declared length runs past the end.
inline const std::string kUndecodableMessage("\x0a\x7f\x01\x02", 4);

// The methods of `service` ("torus.rpc.HeadService"), from its descriptor, so that a test over them covers a method
// added later; empty when the service is unknown.
inline std::vector<const google::protobuf::MethodDescriptor*> ServiceMethods(const std::string& service) {
  std::vector<const google::protobuf::MethodDescriptor*> out;
  const google::protobuf::ServiceDescriptor* s =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
  for (int i = 0; s != nullptr && i < s->method_count(); ++i) out.push_back(s->method(i));
  return out;
}

// "/<service>/<method>", as gRPC names a method on the wire.
inline std::string MethodPath(const google::protobuf::MethodDescriptor* method) {
  return "/" + method->service()->full_name() + "/" + method->name();
}

// The methods of `service` that answer a call without a token, or with a wrong one, with anything but
// UNAUTHENTICATED ("<path> with token '<t>': <code> <message>" each); empty when every one refuses both.
inline std::vector<std::string> MethodsNotRefusingBadTokens(const std::shared_ptr<grpc::Channel>& channel,
                                                            const std::string& service) {
  std::vector<std::string> out;
  for (const google::protobuf::MethodDescriptor* m : ServiceMethods(service)) {
    const std::string method = MethodPath(m);
    for (const std::string token : {std::string(), std::string("wrong")}) {
      grpc::Status s = GenericUnaryCall(channel, method, "", token, std::chrono::seconds(5));
      if (s.error_code() != grpc::StatusCode::UNAUTHENTICATED) {
        out.push_back(method + " with token '" + token + "': " + std::to_string(s.error_code()) + " " +
                      s.error_message());
      }
    }
  }
  return out;
}

}  // namespace torus::rpc::testutil
