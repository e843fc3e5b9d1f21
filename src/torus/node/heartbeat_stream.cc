#include "torus/node/heartbeat_stream.h"

#include "torus/rpc/auth.h"

namespace torus::node {

HeartbeatStream::HeartbeatStream(rpc::HeadService::Stub* stub, const std::string& bearer,
                                 std::function<void()> wake)
    : stub_(stub), wake_(std::move(wake)) {
  ctx_.AddMetadata(rpc::kAuthMetadataKey, bearer);
}

HeartbeatStream::~HeartbeatStream() { Close(); }

bool HeartbeatStream::Open() {
  stream_ = stub_->HeartbeatStream(&ctx_);
  // Returns once the head has sent its initial metadata, or the call failed (then there is none).
  stream_->WaitForInitialMetadata();
  reader_ = std::thread([this] { ReadReplies(); });
  return ctx_.GetServerInitialMetadata().contains(rpc::kHeartbeatAcceptedKey);
}

void HeartbeatStream::ReadReplies() {
  rpc::HeartbeatReply reply;
  while (stream_->Read(&reply)) {
    if (reply.action() == rpc::HeartbeatReply::REREGISTER) {
      reregister_ = true;
      wake_();
    }
  }
  ended_ = true;
  wake_();
}

bool HeartbeatStream::Send(const rpc::HeartbeatRequest& request) {
  if (ended_.load()) return false;
  return stream_->Write(request);
}

void HeartbeatStream::Cancel() { ctx_.TryCancel(); }

grpc::Status HeartbeatStream::Close() {
  if (closed_) return status_;
  closed_ = true;
  if (!stream_) return status_ = grpc::Status(grpc::StatusCode::CANCELLED, "never opened");
  if (!ended_.load()) ctx_.TryCancel();
  if (reader_.joinable()) reader_.join();
  status_ = stream_->Finish();
  return status_;
}

}  // namespace torus::node
