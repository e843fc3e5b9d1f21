#include "torus/head/head_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/common/well_known_labels.h"
#include "torus/rpc/server_auth.h"
#include "torus/rpc/convert.h"
#include "torus/sched/slices.h"

namespace torus::head {
namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx, const grpc::Status& status) {
  return rpc::FinishCall(ctx, status);
}

rpc::NodeState ToProtoState(NodeState s) { return s == NodeState::kAlive ? rpc::ALIVE : rpc::DEAD; }

rpc::SliceState ToProtoState(sched::SliceState s) {
  switch (s) {
    case sched::SliceState::kIncomplete: return rpc::INCOMPLETE;
    case sched::SliceState::kReady: return rpc::READY;
    case sched::SliceState::kReserved: return rpc::RESERVED;
    case sched::SliceState::kDegraded: return rpc::DEGRADED;
  }
  return rpc::SLICE_STATE_UNSPECIFIED;
}

}  // namespace

HeadServiceImpl::HeadServiceImpl(NodeRegistry* registry, PlacementGroupManager* groups, const Clock* clock,
                                 HeadServiceOptions options)
    : registry_(registry),
      groups_(groups),
      clock_(clock),
      options_(std::move(options)),
      start_time_ms_(clock->WallMillis()) {}

grpc::Status HeadServiceImpl::Authenticate(const grpc::CallbackServerContext* ctx) const {
  return rpc::CheckToken(ctx, options_.token);
}

grpc::ServerUnaryReactor* HeadServiceImpl::RegisterNode(grpc::CallbackServerContext* ctx,
                                                        const rpc::RegisterNodeRequest* request,
                                                        rpc::RegisterNodeReply* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  const rpc::NodeInfo& node = request->node();
  auto total = rpc::FromProto(node.resources_total(), "resources_total");
  if (!total.ok()) return Finish(ctx, rpc::ToGrpc(total.status()));
  auto available = rpc::FromProto(request->resources_available(), "resources_available");
  if (!available.ok()) return Finish(ctx, rpc::ToGrpc(available.status()));
  NodeRegistration registration{
      .node_id = node.node_id(),
      .address = node.address(),
      .hostname = node.hostname(),
      .total = *std::move(total),
      .available = *std::move(available),
      .labels = rpc::FromProto(node.labels()),
      .pid = node.pid(),
      .start_time_ms = node.start_time_ms(),
      .agent_port = node.agent_port(),
  };
  auto incarnation = registry_->Register(std::move(registration));
  if (!incarnation.ok()) return Finish(ctx, rpc::ToGrpc(incarnation.status()));
  spdlog::info("node {} registered from {} (incarnation {}, {} labels)", node.node_id(), node.address(),
               *incarnation, node.labels_size());
  reply->set_incarnation(*incarnation);
  reply->set_heartbeat_period_ms(options_.heartbeat_period_ms);
  reply->set_cluster_id(options_.cluster_id);
  return Finish(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HeadServiceImpl::Heartbeat(grpc::CallbackServerContext* ctx,
                                                     const rpc::HeartbeatRequest* request,
                                                     rpc::HeartbeatReply* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  ResourceSet available;
  if (request->has_resources_available()) {
    auto parsed = rpc::FromProto(request->resources_available(), "resources_available");
    if (!parsed.ok()) return Finish(ctx, rpc::ToGrpc(parsed.status()));
    available = *std::move(parsed);
  }
  auto outcome = registry_->Heartbeat(request->node_id(), request->incarnation(),
                                      request->has_resources_available() ? &available : nullptr);
  if (!outcome.ok()) return Finish(ctx, rpc::ToGrpc(outcome.status()));
  reply->set_action(*outcome == HeartbeatOutcome::kOk ? rpc::HeartbeatReply::OK : rpc::HeartbeatReply::REREGISTER);
  return Finish(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HeadServiceImpl::UnregisterNode(grpc::CallbackServerContext* ctx,
                                                          const rpc::UnregisterNodeRequest* request,
                                                          rpc::UnregisterNodeReply* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  absl::Status s = registry_->Unregister(request->node_id(), request->incarnation(), request->reason());
  if (s.ok()) spdlog::info("node {} unregistered: {}", request->node_id(), request->reason());
  return Finish(ctx, rpc::ToGrpc(s));
}

grpc::ServerUnaryReactor* HeadServiceImpl::MarkNodeDead(grpc::CallbackServerContext* ctx,
                                                        const rpc::MarkNodeDeadRequest* request,
                                                        rpc::MarkNodeDeadReply* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  auto was_alive = registry_->MarkDead(request->node_id(), request->reason());
  if (!was_alive.ok()) return Finish(ctx, rpc::ToGrpc(was_alive.status()));
  reply->set_was_alive(*was_alive);
  return Finish(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HeadServiceImpl::GetClusterStatus(grpc::CallbackServerContext* ctx,
                                                            const rpc::GetClusterStatusRequest* request,
                                                            rpc::ClusterStatus* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  BuildClusterStatus(*registry_, *groups_, *clock_, request->include_dead(), reply);
  reply->set_cluster_id(options_.cluster_id);
  reply->set_head_start_time_ms(start_time_ms_);
  return Finish(ctx, grpc::Status::OK);
}

void BuildClusterStatus(const NodeRegistry& registry, const PlacementGroupManager& groups, const Clock& clock,
                        bool include_dead, rpc::ClusterStatus* out) {
  const int64_t now = clock.NowMicros();
  ResourceSet total, available;
  for (const NodeRecord& r : registry.Records(/*include_dead=*/true)) {
    if (r.state == NodeState::kAlive) {
      total.Add(r.info.total);
      available.Add(r.available);
    } else if (!include_dead) {
      continue;
    }
    rpc::NodeView* view = out->add_nodes();
    rpc::NodeInfo* info = view->mutable_info();
    info->set_node_id(r.info.node_id);
    info->set_address(r.info.address);
    info->set_hostname(r.info.hostname);
    rpc::ToProto(r.info.total, info->mutable_resources_total());
    rpc::ToProto(r.info.labels, info->mutable_labels());
    info->set_pid(r.info.pid);
    info->set_start_time_ms(r.info.start_time_ms);
    info->set_agent_port(r.info.agent_port);
    view->set_state(ToProtoState(r.state));
    view->set_incarnation(r.incarnation);
    rpc::ToProto(r.available, view->mutable_resources_available());
    view->set_last_heartbeat_age_ms((now - r.last_heard_micros) / 1000);
    view->set_death_reason(r.death_reason);
    view->set_registered_time_ms(r.registered_wall_ms);
  }
  rpc::ToProto(total, out->mutable_resources_total());
  rpc::ToProto(available, out->mutable_resources_available());
  const std::map<std::string, std::string> holders = groups.SliceHolders();
  for (const sched::Slice& s : sched::BuildSlices(registry.Snapshot(/*include_dead=*/true))) {
    rpc::SliceView* view = out->add_slices();
    view->set_name(s.name);
    view->set_accelerator_type(s.accelerator_type);
    view->set_topology(s.topology);
    view->set_pod_type(s.pod_type);
    view->set_chips_per_host(s.chips_per_host);
    view->set_expected_hosts(s.expected_hosts);
    view->set_hosts_alive(s.hosts_alive);
    view->set_state(ToProtoState(s.state));
    view->set_reason(s.reason);
    if (auto it = holders.find(s.name); it != holders.end()) {
      view->set_reserved_by(it->second);
      if (s.state == sched::SliceState::kReady) view->set_state(rpc::RESERVED);
    }
    for (const sched::SliceHost& h : s.hosts) {
      rpc::SliceHost* host = view->add_hosts();
      host->set_worker_id(h.worker_id);
      host->set_node_id(h.node_id);
      host->set_node_state(h.alive ? rpc::ALIVE : rpc::DEAD);
      host->set_address(h.address);
      host->set_chips(h.chips);
    }
  }
  for (auto& view : groups.Waiting()) *out->add_pending() = std::move(view);
}

grpc::ServerUnaryReactor* HeadServiceImpl::CreatePlacementGroup(grpc::CallbackServerContext* ctx,
                                                                const rpc::PlacementGroupSpec* request,
                                                                rpc::PlacementGroupView* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  auto view = groups_->CreatePlacementGroup(*request);
  if (!view.ok()) return Finish(ctx, rpc::ToGrpc(view.status()));
  *reply = *std::move(view);
  return Finish(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HeadServiceImpl::ReserveSlices(grpc::CallbackServerContext* ctx,
                                                         const rpc::SliceGroupSpec* request,
                                                         rpc::PlacementGroupView* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  auto view = groups_->ReserveSlices(*request);
  if (!view.ok()) return Finish(ctx, rpc::ToGrpc(view.status()));
  *reply = *std::move(view);
  return Finish(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HeadServiceImpl::GetPlacementGroup(grpc::CallbackServerContext* ctx,
                                                             const rpc::GetPlacementGroupRequest* request,
                                                             rpc::PlacementGroupView* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // Answered when the group settles or the wait ends, without holding a thread in between.
  const int64_t wait_ms = std::clamp<int64_t>(request->wait_ready_ms(), 0, 3'600'000);
  groups_->WaitReady(request->id(), wait_ms, [reactor, reply](PlacementGroupManager::ViewOr view) {
    if (!view.ok()) {
      reactor->Finish(rpc::ToGrpc(view.status()));
      return;
    }
    *reply = *std::move(view);
    reactor->Finish(grpc::Status::OK);
  });
  return reactor;
}

grpc::ServerUnaryReactor* HeadServiceImpl::RemovePlacementGroup(grpc::CallbackServerContext* ctx,
                                                                const rpc::RemovePlacementGroupRequest* request,
                                                                rpc::PlacementGroupView* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  auto view = groups_->Remove(request->id());
  if (!view.ok()) return Finish(ctx, rpc::ToGrpc(view.status()));
  *reply = *std::move(view);
  return Finish(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HeadServiceImpl::ListPlacementGroups(grpc::CallbackServerContext* ctx,
                                                               const rpc::ListPlacementGroupsRequest* request,
                                                               rpc::PlacementGroupList* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  for (auto& view : groups_->List(request->include_removed())) *reply->add_groups() = std::move(view);
  return Finish(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HeadServiceImpl::WorkerExited(grpc::CallbackServerContext* ctx,
                                                        const rpc::WorkerExitedRequest* request,
                                                        rpc::WorkerExitedReply* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  if (request->worker_id().empty()) {
    return Finish(ctx, grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "worker_id is required"));
  }
  if (worker_exit_handler_) {
    worker_exit_handler_(request->node_id(), request->worker_id(), request->owner(), request->exit_code(),
                         request->signal());
  }
  return Finish(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HeadServiceImpl::ReportMetrics(grpc::CallbackServerContext* ctx,
                                                         const rpc::MetricsReport* request,
                                                         rpc::MetricsReportReply* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  std::optional<Labels> labels = registry_->CurrentLabels(request->node_id(), request->incarnation());
  if (!labels) {
    reply->set_unknown_node(true);
    return Finish(ctx, grpc::Status::OK);
  }
  if (metrics_ != nullptr) metrics_->Ingest(NodeMetricTags(request->node_id(), *labels), *request, clock_->WallMillis());
  return Finish(ctx, grpc::Status::OK);
}

MetricLabels NodeMetricTags(const std::string& node_id, const Labels& labels) {
  MetricLabels tags = {{"node_id", node_id}};
  auto slice = labels.find(std::string(kLabelTpuSliceName));
  auto worker = labels.find(std::string(kLabelTpuWorkerId));
  if (slice != labels.end()) tags.emplace_back("slice", slice->second);
  if (worker != labels.end()) tags.emplace_back("worker_id", worker->second);
  return tags;
}

}  // namespace torus::head
