// HeartbeatStream: the agent's side of one HeadService.HeartbeatStream call. Open() starts the call and waits until
// the head accepts it (its initial metadata) or the call fails; Send() writes one heartbeat; a thread reads what the
// head writes back (REREGISTER) and notices the stream's end, calling `wake` for each, so that the agent's loop need
// not block on reads. Close() ends the call and says how it ended.
//
// Thread-safety: Open, Send and Close from one thread (the agent's loop); Cancel, reregister() and ended() from any.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "grpcpp/grpcpp.h"
#include "torus/head.grpc.pb.h"

namespace torus::node {

class HeartbeatStream {
 public:
  // `bearer` is the authorization metadata value; `wake` is called (from the reader thread) when the head asks to
  // register again or the stream ends.
  HeartbeatStream(rpc::HeadService::Stub* stub, const std::string& bearer, std::function<void()> wake);
  ~HeartbeatStream();  // Close()s if still open
  HeartbeatStream(const HeartbeatStream&) = delete;
  HeartbeatStream& operator=(const HeartbeatStream&) = delete;

  // Starts the call and waits for the head to accept it. False when it refused or could not be reached (Close()
  // then says why).
  bool Open();
  // Writes one heartbeat; false when the stream is broken.
  bool Send(const rpc::HeartbeatRequest& request);
  // Cancels the call (Stop(), or giving up on a head that stopped reading); Close() still must be called.
  void Cancel();
  // The head answered REREGISTER.
  bool reregister() const { return reregister_.load(); }
  // The head ended the stream, or it broke.
  bool ended() const { return ended_.load(); }
  // Cancels the call unless it ended by itself, waits for the reader, and returns the call's status (OK after
  // REREGISTER; UNIMPLEMENTED from a head without streamed heartbeats).
  grpc::Status Close();

 private:
  void ReadReplies();

  rpc::HeadService::Stub* stub_;
  std::function<void()> wake_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<rpc::HeartbeatRequest, rpc::HeartbeatReply>> stream_;
  std::thread reader_;
  std::atomic<bool> reregister_{false};
  std::atomic<bool> ended_{false};
  bool closed_ = false;
  grpc::Status status_;
};

}  // namespace torus::node
