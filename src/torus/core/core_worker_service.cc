// The core worker's gRPC service: each method checks the cluster token and hands the call to its CoreWorker.
#include "torus/core/core_worker.h"

#include <thread>

namespace torus::core {
namespace {

bool Authorized(const grpc::CallbackServerContext* ctx, const std::string& token) {
  auto it = ctx->client_metadata().find("authorization");
  return it != ctx->client_metadata().end() &&
         std::string_view(it->second.data(), it->second.size()) == "Bearer " + token;
}

grpc::Status Unauthenticated() {
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or wrong cluster token");
}

class Service final : public CoreWorkerService::CallbackService {
 public:
  Service(CoreWorker* worker, std::string token) : worker_(worker), token_(std::move(token)) {}
  grpc::ServerUnaryReactor* PushTask(grpc::CallbackServerContext* ctx, const PushTaskRequest* request,
                                     PushTaskReply* reply) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (!Authorized(ctx, token_)) {
      reactor->Finish(Unauthenticated());
    } else {
      worker_->HandlePush(reactor, *request, reply);
    }
    return reactor;
  }
  grpc::ServerUnaryReactor* ResolveActor(grpc::CallbackServerContext* ctx, const ResolveActorRequest* request,
                                         ActorInfo* reply) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (!Authorized(ctx, token_)) {
      reactor->Finish(Unauthenticated());
    } else {
      std::thread([this, reactor, request, reply] {
        *reply = worker_->HandleResolveActor(*request);
        reactor->Finish(grpc::Status::OK);
      }).detach();
    }
    return reactor;
  }
  grpc::ServerUnaryReactor* KillActor(grpc::CallbackServerContext* ctx, const KillActorRequest* request,
                                      KillActorReply*) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (!Authorized(ctx, token_)) {
      reactor->Finish(Unauthenticated());
    } else {
      std::thread([this, reactor, request] { reactor->Finish(worker_->HandleKillActor(*request)); }).detach();
    }
    return reactor;
  }
  grpc::ServerUnaryReactor* UpdateBorrowers(grpc::CallbackServerContext* ctx, const UpdateBorrowersRequest* request,
                                            UpdateBorrowersReply* reply) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (!Authorized(ctx, token_)) {
      reactor->Finish(Unauthenticated());
    } else {
      worker_->HandleUpdateBorrowers(*request, reply);
      reactor->Finish(grpc::Status::OK);
    }
    return reactor;
  }
  grpc::ServerUnaryReactor* CancelTask(grpc::CallbackServerContext* ctx, const CancelTaskRequest* request,
                                       CancelTaskReply* reply) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (!Authorized(ctx, token_)) {
      reactor->Finish(Unauthenticated());
    } else {
      reply->set_found(worker_->HandleCancel(request->task_id()));
      reactor->Finish(grpc::Status::OK);
    }
    return reactor;
  }
  grpc::ServerUnaryReactor* GetObject(grpc::CallbackServerContext* ctx, const GetObjectRequest* request,
                                      GetObjectReply* reply) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    if (!Authorized(ctx, token_)) {
      reactor->Finish(Unauthenticated());
    } else if (request->wait_ms() <= 0) {
      reactor->Finish(worker_->HandleGetObject(*request, reply));
    } else {
      // A borrower waits for a pending object: on its own thread, not gRPC's.
      std::thread([this, reactor, request, reply] { reactor->Finish(worker_->HandleGetObject(*request, reply)); })
          .detach();
    }
    return reactor;
  }

 private:
  CoreWorker* worker_;
  const std::string token_;
};

}  // namespace

std::unique_ptr<grpc::Service> NewCoreWorkerService(CoreWorker* worker, std::string token) {
  return std::make_unique<Service>(worker, std::move(token));
}

}  // namespace torus::core
