// HeadServiceImpl's actor and task methods: the directory of actors (actors/actor_directory.h) and the task table
// (tasks/task_table.h) over gRPC.
#include "torus/head/api/head_service.h"
#include "torus/rpc/convert.h"
#include "torus/rpc/server_auth.h"

namespace torus::head {
namespace {

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  return rpc::FinishCall(ctx, rpc::ToGrpc(status));
}

}  // namespace

grpc::ServerUnaryReactor* HeadServiceImpl::RegisterActor(grpc::CallbackServerContext* ctx,
                                                         const rpc::RegisterActorRequest* request,
                                                         rpc::ActorView* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return rpc::FinishCall(ctx, auth);
  if (actors_ == nullptr) return Done(ctx, absl::UnavailableError("the head keeps no actor directory"));
  auto actor = actors_->Register(ActorFromProto(request->actor()));
  if (!actor.ok()) return Done(ctx, actor.status());
  ActorToProto(*actor, reply);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* HeadServiceImpl::CreateActor(grpc::CallbackServerContext* ctx,
                                                       const rpc::CreateActorRequest* request,
                                                       rpc::ActorView* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return rpc::FinishCall(ctx, auth);
  if (detached_ == nullptr) return Done(ctx, absl::UnavailableError("the head keeps no detached actors"));
  auto actor = detached_->Create(request->actor(), request->creation());
  if (!actor.ok()) return Done(ctx, actor.status());
  ActorToProto(*actor, reply);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* HeadServiceImpl::UpdateActor(grpc::CallbackServerContext* ctx,
                                                       const rpc::UpdateActorRequest* request,
                                                       rpc::ActorView* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return rpc::FinishCall(ctx, auth);
  if (actors_ == nullptr) return Done(ctx, absl::UnavailableError("the head keeps no actor directory"));
  auto state = ParseActorState("state", request->state());
  if (!state.ok()) return Done(ctx, state.status());
  auto actor = actors_->Update({.actor = ActorId(request->actor_id()),
                                .state = *state,
                                .node = NodeId(request->node_id()),
                                .pid = request->pid(),
                                .worker_address = request->worker_address(),
                                .restarts = request->restarts(),
                                .death_cause = request->death_cause()});
  if (!actor.ok()) return Done(ctx, actor.status());
  ActorToProto(*actor, reply);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* HeadServiceImpl::GetActor(grpc::CallbackServerContext* ctx,
                                                    const rpc::GetActorRequest* request, rpc::ActorView* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return rpc::FinishCall(ctx, auth);
  if (actors_ == nullptr) return Done(ctx, absl::UnavailableError("the head keeps no actor directory"));
  if (request->actor_id().empty() && request->name().empty()) {
    return Done(ctx, absl::InvalidArgumentError("give actor_id, or name (and namespace)"));
  }
  auto actor = request->actor_id().empty() ? actors_->GetNamed(request->namespace_(), request->name())
                                           : actors_->Get(ActorId(request->actor_id()));
  if (!actor.ok()) return Done(ctx, actor.status());
  ActorToProto(*actor, reply);
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* HeadServiceImpl::ListActors(grpc::CallbackServerContext* ctx,
                                                      const rpc::ListActorsRequest* request, rpc::ActorList* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return rpc::FinishCall(ctx, auth);
  if (actors_ == nullptr) return Done(ctx, absl::UnavailableError("the head keeps no actor directory"));
  ActorFilter filter{.job_id = request->job_id()};
  if (!request->state().empty()) {
    auto state = ParseActorState("state", request->state());
    if (!state.ok()) return Done(ctx, state.status());
    filter.state = *state;
  }
  for (const Actor& a : actors_->List(filter)) ActorToProto(a, reply->add_actors());
  return Done(ctx, absl::OkStatus());
}

grpc::ServerUnaryReactor* HeadServiceImpl::ReportTasks(grpc::CallbackServerContext* ctx,
                                                       const rpc::ReportTasksRequest* request,
                                                       rpc::ReportTasksReply* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return rpc::FinishCall(ctx, auth);
  if (request->owner_address().empty()) return Done(ctx, absl::InvalidArgumentError("owner_address: required"));
  if (tasks_ != nullptr) tasks_->Apply(request->owner_address(), request->events());
  return Done(ctx, absl::OkStatus());
}

}  // namespace torus::head
