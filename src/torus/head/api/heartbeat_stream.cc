#include "torus/head/api/heartbeat_stream.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "torus/common/status.h"
#include "torus/rpc/auth.h"
#include "torus/rpc/convert.h"
#include "torus/rpc/server_auth.h"

namespace torus::head {

// One stream, from the request for it to its finish. Exactly one operation is outstanding at any time (the request,
// the initial metadata, a read, or the finish), so its completion is the only one that may touch the call, and the
// call deletes itself when its finish completes.
class HeartbeatStreamServer::Call {
 public:
  Call(HeartbeatStreamServer* server, grpc::ServerCompletionQueue* cq) : server_(server), cq_(cq), stream_(&ctx_) {
    server_->service_->RequestHeartbeatStream(&ctx_, &stream_, cq_, cq_, this);
  }
  ~Call() {
    if (announced_) server_->beats_->StreamClosed(node_id_);
  }

  // The outstanding operation completed with `ok`.
  void Proceed(bool ok) {
    switch (step_) {
      case Step::kRequested:
        if (!ok) {  // the server is shutting down
          delete this;
          return;
        }
        server_->RequestNext(cq_);
        if (auto caller = server_->callers_->Admit(&ctx_); !caller.ok()) {
          Finish(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(caller.status().message())));
          return;
        } else {
          caller_node_ = *caller;
        }
        ctx_.AddInitialMetadata(rpc::kHeartbeatAcceptedKey, "1");
        step_ = Step::kMetadata;
        stream_.SendInitialMetadata(this);
        return;
      case Step::kMetadata:
        if (!ok) {
          Finish(grpc::Status::OK);
          return;
        }
        Read();
        return;
      case Step::kReading:
        OnRead(ok);
        return;
      case Step::kFinishing:
        delete this;
        return;
    }
  }

 private:
  enum class Step { kRequested, kMetadata, kReading, kFinishing };

  void Read() {
    step_ = Step::kReading;
    stream_.Read(&request_, this);
  }

  void OnRead(bool ok) {
    if (!ok) {  // the agent closed its side, or the stream broke
      Finish(grpc::Status::OK);
      return;
    }
    if (node_id_.empty()) {
      node_id_ = request_.node_id();
    } else if (request_.node_id() != node_id_) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("node_id: a heartbeat stream carries one node; it began as '", node_id_,
                                       "' and now names '", request_.node_id(), "'")));
      return;
    }
    if (grpc::Status may = server_->callers_->MaySpeakFor(caller_node_, node_id_); !may.ok()) {
      Finish(may);
      return;
    }
    ++server_->messages_;
    auto action = ApplyHeartbeat(request_, *server_->liveness_);
    if (!action.ok()) {
      Finish(rpc::ToGrpc(action.status()));
      return;
    }
    if (!announced_ && server_->beats_ != nullptr) {
      server_->beats_->StreamOpened(node_id_);
      announced_ = true;
    }
    if (*action == rpc::HeartbeatReply::OK) {
      Read();
      return;
    }
    reply_.set_action(*action);
    step_ = Step::kFinishing;
    stream_.WriteAndFinish(reply_, grpc::WriteOptions(), grpc::Status::OK, this);
  }

  void Finish(const grpc::Status& status) {
    step_ = Step::kFinishing;
    stream_.Finish(status, this);
  }

  HeartbeatStreamServer* server_;
  grpc::ServerCompletionQueue* cq_;
  grpc::ServerContext ctx_;
  grpc::ServerAsyncReaderWriter<rpc::HeartbeatReply, rpc::HeartbeatRequest> stream_;
  Step step_ = Step::kRequested;
  std::string node_id_;      // the node of the stream's first heartbeat
  std::string caller_node_;  // the node of the caller's certificate ("" without TLS)
  bool announced_ = false;   // beats_ was told this node's stream is open
  rpc::HeartbeatRequest request_;
  rpc::HeartbeatReply reply_;
};

absl::StatusOr<std::optional<HeartbeatReport>> ParseHeartbeat(const rpc::HeartbeatRequest& request) {
  if (request.node_id().empty()) return absl::InvalidArgumentError("node_id: required");
  if (!request.has_resources_available()) return std::optional<HeartbeatReport>();
  HeartbeatReport report;
  TORUS_ASSIGN_OR_RETURN(report.available, rpc::FromProto(request.resources_available(), "resources_available"));
  TORUS_ASSIGN_OR_RETURN(report.leased.resources, rpc::FromProto(request.leased().resources(), "leased.resources"));
  // Device indices: 0-4095 each, listed once; kept ascending.
  auto devices = [](const google::protobuf::RepeatedField<int32_t>& in, const char* field,
                    std::vector<int>* out) -> absl::Status {
    for (int32_t index : in) {
      if (index < 0 || index > 4095) {
        return absl::InvalidArgumentError(absl::StrCat(field, ": ", index, " is not a device index (0-4095)"));
      }
      out->push_back(index);
    }
    std::sort(out->begin(), out->end());
    if (std::adjacent_find(out->begin(), out->end()) != out->end()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": an index is listed twice"));
    }
    return absl::OkStatus();
  };
  TORUS_RETURN_IF_ERROR(devices(request.leased().chips(), "leased.chips", &report.leased.chips));
  TORUS_RETURN_IF_ERROR(devices(request.leased().gpus(), "leased.gpus", &report.leased.gpus));
  return std::optional<HeartbeatReport>(std::move(report));
}

absl::StatusOr<rpc::HeartbeatReply::Action> ApplyHeartbeat(const rpc::HeartbeatRequest& request,
                                                           Liveness& liveness) {
  auto report = ParseHeartbeat(request);
  if (!report.ok()) return report.status();
  const HeartbeatReport* r = report->has_value() ? &**report : nullptr;
  const Liveness::Beat beat = liveness.Heartbeat(NodeId(request.node_id()), request.incarnation(),
                                                 r != nullptr ? &r->available : nullptr,
                                                 r != nullptr ? &r->leased : nullptr);
  return beat == Liveness::Beat::kOk ? rpc::HeartbeatReply::OK : rpc::HeartbeatReply::REREGISTER;
}

HeartbeatStreamServer::HeartbeatStreamServer(HeadServiceBase* service, Liveness* liveness,
                                             const NodeCallers* callers, BeatServer* beats,
                                             grpc::ServerBuilder& builder, int queues)
    : service_(service), liveness_(liveness), callers_(callers), beats_(beats) {
  for (int i = 0; i < queues; ++i) queues_.push_back(builder.AddCompletionQueue());
}

HeartbeatStreamServer::~HeartbeatStreamServer() { Stop(); }

void HeartbeatStreamServer::RequestNext(grpc::ServerCompletionQueue* cq) {
  absl::MutexLock lock(&mu_);
  if (!stopping_) new Call(this, cq);
}

void HeartbeatStreamServer::Start() {
  for (auto& cq : queues_) {
    RequestNext(cq.get());
    threads_.emplace_back([this, q = cq.get()] { Drain(q); });
  }
}

void HeartbeatStreamServer::Drain(grpc::ServerCompletionQueue* cq) {
  void* tag = nullptr;
  bool ok = false;
  while (cq->Next(&tag, &ok)) static_cast<Call*>(tag)->Proceed(ok);
}

void HeartbeatStreamServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (threads_.empty()) return;  // never started (the server did not build): the queues end with it
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;  // no request may be added to a queue after its Shutdown
  }
  for (auto& cq : queues_) cq->Shutdown();
  for (std::thread& t : threads_) t.join();
}

}  // namespace torus::head
