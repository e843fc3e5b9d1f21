// HeadServiceImpl: the head's gRPC handlers. Each handler checks the cluster token, converts the request to domain
// types, calls the owning component and converts the answer back. No state of its own.
//
// Thread-safety: thread-safe; handlers run on gRPC's callback threads and touch only thread-safe components.
#pragma once

#include <string>

#include "absl/synchronization/mutex.h"

#include "torus/common/clock.h"
#include "torus/head/actors/actor_directory.h"
#include "torus/head/actors/detached_actors.h"
#include "torus/head/tasks/task_table.h"
#include "torus/head.grpc.pb.h"
#include "torus/head/api/beat_server.h"
#include "torus/head/api/heartbeat_stream.h"
#include "torus/head/api/node_callers.h"
#include "torus/head/metrics/metrics_store.h"
#include "torus/head/nodes/membership.h"
#include "torus/head/packages/package_store.h"
#include "torus/head/placement/placement_service.h"
#include "torus/head/state/liveness.h"
#include "torus/head/state/state_store.h"

namespace torus::head {

struct HeadServiceOptions {
  std::string token;
  // Who may make a node's calls (register, heartbeat, unregister, worker exits, metrics); null: the token.
  const NodeCallers* node_callers = nullptr;
  std::string cluster_id;
  int64_t heartbeat_period_ms = 500;
};

// HeartbeatStream is served by a HeartbeatStreamServer over this service (heartbeat_stream.h).
class HeadServiceImpl final : public HeadServiceBase {
 public:
  HeadServiceImpl(StateStore* store, Membership* membership, Liveness* liveness, PlacementService* groups,
                  const Clock* clock, HeadServiceOptions options);

  grpc::ServerUnaryReactor* RegisterNode(grpc::CallbackServerContext* ctx, const rpc::RegisterNodeRequest* request,
                                         rpc::RegisterNodeReply* reply) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* ctx, const rpc::HeartbeatRequest* request,
                                      rpc::HeartbeatReply* reply) override;
  grpc::ServerUnaryReactor* UnregisterNode(grpc::CallbackServerContext* ctx,
                                           const rpc::UnregisterNodeRequest* request,
                                           rpc::UnregisterNodeReply* reply) override;
  grpc::ServerUnaryReactor* MarkNodeDead(grpc::CallbackServerContext* ctx, const rpc::MarkNodeDeadRequest* request,
                                         rpc::MarkNodeDeadReply* reply) override;
  grpc::ServerUnaryReactor* GetClusterStatus(grpc::CallbackServerContext* ctx,
                                             const rpc::GetClusterStatusRequest* request,
                                             rpc::ClusterStatus* reply) override;
  grpc::ServerUnaryReactor* CreatePlacementGroup(grpc::CallbackServerContext* ctx,
                                                 const rpc::PlacementGroupSpec* request,
                                                 rpc::PlacementGroupView* reply) override;
  grpc::ServerUnaryReactor* ReserveSlices(grpc::CallbackServerContext* ctx, const rpc::SliceGroupSpec* request,
                                          rpc::PlacementGroupView* reply) override;
  grpc::ServerUnaryReactor* GetPlacementGroup(grpc::CallbackServerContext* ctx,
                                              const rpc::GetPlacementGroupRequest* request,
                                              rpc::PlacementGroupView* reply) override;
  grpc::ServerUnaryReactor* RemovePlacementGroup(grpc::CallbackServerContext* ctx,
                                                 const rpc::RemovePlacementGroupRequest* request,
                                                 rpc::PlacementGroupView* reply) override;
  grpc::ServerUnaryReactor* ListPlacementGroups(grpc::CallbackServerContext* ctx,
                                                const rpc::ListPlacementGroupsRequest* request,
                                                rpc::PlacementGroupList* reply) override;
  grpc::ServerUnaryReactor* WorkerExited(grpc::CallbackServerContext* ctx, const rpc::WorkerExitedRequest* request,
                                         rpc::WorkerExitedReply* reply) override;

  // Adds the report to the metrics store (set by SetMetricsStore) when its node is alive as that incarnation.
  grpc::ServerUnaryReactor* ReportMetrics(grpc::CallbackServerContext* ctx, const rpc::MetricsReport* request,
                                          rpc::MetricsReportReply* reply) override;

  // A piece of a package, for an agent about to start a worker in it: NOT_FOUND when the head does not hold it,
  // OUT_OF_RANGE for an offset past its end, INVALID_ARGUMENT for a bad name.
  grpc::ServerUnaryReactor* ReadPackage(grpc::CallbackServerContext* ctx, const rpc::ReadPackageRequest* request,
                                        rpc::ReadPackageReply* reply) override;

  // Where agents' metric reports go; set before serving (reports are dropped without one).
  void SetMetricsStore(MetricsStore* store) { metrics_ = store; }
  // Where packages are read from; set before serving (ReadPackage answers UNAVAILABLE without one).
  void SetPackageStore(const PackageStore* packages) { packages_ = packages; }
  // The actor directory the actor methods serve (head_service_actors.cc); without it they answer UNAVAILABLE.
  void SetActorDirectory(ActorDirectory* actors) { actors_ = actors; }
  grpc::ServerUnaryReactor* RegisterActor(grpc::CallbackServerContext* ctx, const rpc::RegisterActorRequest* request,
                                          rpc::ActorView* reply) override;
  grpc::ServerUnaryReactor* UpdateActor(grpc::CallbackServerContext* ctx, const rpc::UpdateActorRequest* request,
                                        rpc::ActorView* reply) override;
  // Detached actors, which the head owns (actors/detached_actors.h); without them CreateActor answers UNAVAILABLE.
  void SetDetachedActors(DetachedActors* detached) { detached_ = detached; }
  grpc::ServerUnaryReactor* CreateActor(grpc::CallbackServerContext* ctx, const rpc::CreateActorRequest* request,
                                        rpc::ActorView* reply) override;
  grpc::ServerUnaryReactor* GetActor(grpc::CallbackServerContext* ctx, const rpc::GetActorRequest* request,
                                     rpc::ActorView* reply) override;
  grpc::ServerUnaryReactor* ListActors(grpc::CallbackServerContext* ctx, const rpc::ListActorsRequest* request,
                                       rpc::ActorList* reply) override;
  // The task table ReportTasks fills (head_service_actors.cc); without it reports are dropped.
  void SetTaskTable(TaskTable* tasks) { tasks_ = tasks; }
  grpc::ServerUnaryReactor* ReportTasks(grpc::CallbackServerContext* ctx, const rpc::ReportTasksRequest* request,
                                        rpc::ReportTasksReply* reply) override;
  // Heartbeat datagrams: each registration is given a key and the port (RegisterNodeReply.beat_port, beat_key);
  // set before serving (without it agents heartbeat on their streams only).
  void SetBeatServer(BeatServer* beats) { beats_ = beats; }
  // The HTTP API's host:port, given in ClusterStatus.http_address once the HTTP server listens.
  void SetHttpAddress(std::string address) ABSL_LOCKS_EXCLUDED(http_mu_);


 private:
  // OK when the call carries the cluster token; UNAUTHENTICATED otherwise.
  grpc::Status Authenticate(const grpc::CallbackServerContext* ctx) const;
  // Authenticate, then refuse (UNAVAILABLE, saying why) while the journal cannot commit: for calls that change state.
  grpc::Status AuthenticateChange(const grpc::CallbackServerContext* ctx) const;
  // Answers with group `id_or_name` once it is CREATED, FAILED or REMOVED, or after `wait_ms` (0: at once) with its
  // state then; NOT_FOUND for an unknown group.
  grpc::ServerUnaryReactor* AnswerWhenSettled(grpc::CallbackServerContext* ctx, const std::string& id_or_name,
                                              int64_t wait_ms, rpc::PlacementGroupView* reply);
  // For a node's calls about `node_id`: its certificate with TLS, the token without (NodeCallers).
  grpc::Status AuthenticateNode(const grpc::CallbackServerContext* ctx, const std::string& node_id) const;

  StateStore* store_;
  Membership* membership_;
  Liveness* liveness_;
  PlacementService* groups_;
  MetricsStore* metrics_ = nullptr;
  const PackageStore* packages_ = nullptr;
  ActorDirectory* actors_ = nullptr;
  DetachedActors* detached_ = nullptr;
  TaskTable* tasks_ = nullptr;
  BeatServer* beats_ = nullptr;
  const Clock* clock_;
  const HeadServiceOptions options_;
  const int64_t start_time_ms_;
  absl::Mutex http_mu_;
  std::string http_address_ ABSL_GUARDED_BY(http_mu_);
};

// The tags the head adds to a node's samples: node_id, and slice and worker_id when the node is a TPU slice host.
MetricLabels NodeMetricTags(const std::string& node_id, const Labels& labels);

// A WorkerExited call's reports as the head records them: each well-formed one (its output tail cut to the last
// 4 KiB, its accelerator error to 1 KiB) with its index in the call, and an error naming the field for each other.
// Refuses a call of more than 1,000 reports as a whole, and one of none (FAILED_PRECONDITION: what an older agent
// sends, which then keeps its report and tries again).
struct ParsedExits {
  std::vector<Membership::ReportedExit> exits;
  std::vector<int> index;                           // exits[k] is report index[k]
  std::vector<std::pair<int, absl::Status>> refused;  // (report index, why)
};
absl::StatusOr<ParsedExits> ParseWorkerExits(const rpc::WorkerExitedRequest& request);

}  // namespace torus::head
