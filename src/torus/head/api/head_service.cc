#include "torus/head/api/head_service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/common/well_known_labels.h"
#include "torus/head/api/heartbeat_stream.h"
#include "torus/head/api/views.h"
#include "torus/head/placement/group_requests.h"
#include "torus/rpc/convert.h"
#include "torus/rpc/server_auth.h"

namespace torus::head {
namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* ctx, const grpc::Status& status) {
  return rpc::FinishCall(ctx, status);
}

// What an agent reports holding, in domain form.
AgentReport ReportOf(const rpc::RegisterNodeRequest& request, NodeRegistration info, ResourceSet available) {
  AgentReport report{std::move(info), std::move(available), {}, {}};
  for (const rpc::LedgerEntryView& e : request.bundles()) {
    report.bundles.push_back({e.group_id(), e.bundle().index(), e.attempt(), e.committed()});
  }
  for (const rpc::WorkerView& w : request.workers()) {
    report.workers.push_back(
        {WorkerId(w.worker_id()), w.pid(), w.running(), w.exit_code(), w.signal(), w.end_time_ms(), w.stopped()});
  }
  return report;
}

}  // namespace

HeadServiceImpl::HeadServiceImpl(StateStore* store, Membership* membership, Liveness* liveness,
                                 PlacementService* groups, const Clock* clock, HeadServiceOptions options)
    : store_(store),
      membership_(membership),
      liveness_(liveness),
      groups_(groups),
      clock_(clock),
      options_(std::move(options)),
      start_time_ms_(clock->WallMillis()) {}

grpc::Status HeadServiceImpl::Authenticate(const grpc::CallbackServerContext* ctx) const {
  return rpc::CheckToken(ctx, options_.token);
}

grpc::Status HeadServiceImpl::AuthenticateNode(const grpc::CallbackServerContext* ctx,
                                               const std::string& node_id) const {
  if (options_.node_callers == nullptr) return Authenticate(ctx);
  return options_.node_callers->Check(ctx, node_id);
}

grpc::Status HeadServiceImpl::AuthenticateChange(const grpc::CallbackServerContext* ctx) const {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return auth;
  return rpc::ToGrpc(store_->Writable());
}

grpc::ServerUnaryReactor* HeadServiceImpl::RegisterNode(grpc::CallbackServerContext* ctx,
                                                        const rpc::RegisterNodeRequest* request,
                                                        rpc::RegisterNodeReply* reply) {
  if (grpc::Status auth = AuthenticateNode(ctx, request->node().node_id()); !auth.ok()) return Finish(ctx, auth);
  if (absl::Status writable = store_->Writable(); !writable.ok()) return Finish(ctx, rpc::ToGrpc(writable));
  const rpc::NodeInfo& node = request->node();
  auto total = rpc::FromProto(node.resources_total(), "resources_total");
  if (!total.ok()) return Finish(ctx, rpc::ToGrpc(total.status()));
  auto available = rpc::FromProto(request->resources_available(), "resources_available");
  if (!available.ok()) return Finish(ctx, rpc::ToGrpc(available.status()));
  NodeRegistration info{
      .node_id = node.node_id(),
      .address = node.address(),
      .hostname = node.hostname(),
      .total = *std::move(total),
      .labels = rpc::FromProto(node.labels()),
      .pid = node.pid(),
      .start_time_ms = node.start_time_ms(),
      .agent_port = node.agent_port(),
  };
  auto registered = membership_->Register(ReportOf(*request, std::move(info), *std::move(available)));
  if (!registered.ok()) return Finish(ctx, rpc::ToGrpc(registered.status()));
  reply->set_incarnation(registered->incarnation);
  reply->set_heartbeat_period_ms(options_.heartbeat_period_ms);
  reply->set_cluster_id(options_.cluster_id);
  if (beats_ != nullptr) {
    reply->set_beat_port(beats_->port());
    reply->set_beat_key(beats_->Issue(node.node_id(), registered->incarnation));
  }
  for (const auto& [group, index] : registered->release) {
    rpc::BundleRef* ref = reply->add_release();
    ref->set_group_id(group);
    ref->set_index(index);
  }
  for (const WorkerId& w : registered->stop) reply->add_stop_workers(w.str());
  return Finish(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HeadServiceImpl::Heartbeat(grpc::CallbackServerContext* ctx,
                                                     const rpc::HeartbeatRequest* request,
                                                     rpc::HeartbeatReply* reply) {
  if (grpc::Status auth = AuthenticateNode(ctx, request->node_id()); !auth.ok()) return Finish(ctx, auth);
  auto action = ApplyHeartbeat(*request, *liveness_);
  if (!action.ok()) return Finish(ctx, rpc::ToGrpc(action.status()));
  reply->set_action(*action);
  return Finish(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HeadServiceImpl::UnregisterNode(grpc::CallbackServerContext* ctx,
                                                          const rpc::UnregisterNodeRequest* request,
                                                          rpc::UnregisterNodeReply* reply) {
  if (grpc::Status auth = AuthenticateNode(ctx, request->node_id()); !auth.ok()) return Finish(ctx, auth);
  absl::Status s = membership_->Unregister(NodeId(request->node_id()), request->incarnation(), request->reason());
  if (s.ok()) {
    spdlog::info("node {} unregistered: {}", request->node_id(), request->reason());
    if (beats_ != nullptr) beats_->Forget(request->node_id(), request->incarnation());
  }
  return Finish(ctx, rpc::ToGrpc(s));
}

grpc::ServerUnaryReactor* HeadServiceImpl::MarkNodeDead(grpc::CallbackServerContext* ctx,
                                                        const rpc::MarkNodeDeadRequest* request,
                                                        rpc::MarkNodeDeadReply* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  auto was_alive = membership_->MarkDead(NodeId(request->node_id()), request->reason(), request->revoke());
  if (!was_alive.ok()) return Finish(ctx, rpc::ToGrpc(was_alive.status()));
  reply->set_was_alive(*was_alive);
  return Finish(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HeadServiceImpl::GetClusterStatus(grpc::CallbackServerContext* ctx,
                                                            const rpc::GetClusterStatusRequest* request,
                                                            rpc::ClusterStatus* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  const int64_t wall = clock_->WallMillis();
  store_->Read([&](const ClusterState& s) { BuildClusterStatus(s, *liveness_, request->include_dead(), wall, reply); });
  reply->set_cluster_id(options_.cluster_id);
  reply->set_head_start_time_ms(start_time_ms_);
  {
    absl::MutexLock lock(&http_mu_);
    reply->set_http_address(http_address_);
  }
  return Finish(ctx, grpc::Status::OK);
}

void HeadServiceImpl::SetHttpAddress(std::string address) {
  absl::MutexLock lock(&http_mu_);
  http_address_ = std::move(address);
}

grpc::ServerUnaryReactor* HeadServiceImpl::CreatePlacementGroup(grpc::CallbackServerContext* ctx,
                                                                const rpc::PlacementGroupSpec* request,
                                                                rpc::PlacementGroupView* reply) {
  if (grpc::Status auth = AuthenticateChange(ctx); !auth.ok()) return Finish(ctx, auth);
  auto bundles = BundleRequestFromProto(*request);
  if (!bundles.ok()) return Finish(ctx, rpc::ToGrpc(bundles.status()));
  auto group = groups_->CreateBundles(*std::move(bundles), request->name(), request->timeout_s());
  if (!group.ok()) return Finish(ctx, rpc::ToGrpc(group.status()));
  if (request->wait_ready_ms() > 0) return AnswerWhenSettled(ctx, group->id.str(), request->wait_ready_ms(), reply);
  *reply = store_->Read([&](const ClusterState& s) { return GroupView(s, *group); });
  return Finish(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HeadServiceImpl::ReserveSlices(grpc::CallbackServerContext* ctx,
                                                         const rpc::SliceGroupSpec* request,
                                                         rpc::PlacementGroupView* reply) {
  if (grpc::Status auth = AuthenticateChange(ctx); !auth.ok()) return Finish(ctx, auth);
  auto slices = SliceRequestFromProto(*request);
  if (!slices.ok()) return Finish(ctx, rpc::ToGrpc(slices.status()));
  auto group = groups_->CreateSlices(*std::move(slices), request->name(), request->timeout_s());
  if (!group.ok()) return Finish(ctx, rpc::ToGrpc(group.status()));
  if (request->wait_ready_ms() > 0) return AnswerWhenSettled(ctx, group->id.str(), request->wait_ready_ms(), reply);
  *reply = store_->Read([&](const ClusterState& s) { return GroupView(s, *group); });
  return Finish(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HeadServiceImpl::GetPlacementGroup(grpc::CallbackServerContext* ctx,
                                                             const rpc::GetPlacementGroupRequest* request,
                                                             rpc::PlacementGroupView* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  return AnswerWhenSettled(ctx, request->id(), request->wait_ready_ms(), reply);
}

grpc::ServerUnaryReactor* HeadServiceImpl::AnswerWhenSettled(grpc::CallbackServerContext* ctx,
                                                             const std::string& id_or_name, int64_t wait_ms,
                                                             rpc::PlacementGroupView* reply) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  // Answered when the group settles or the wait ends, without holding a thread in between.
  groups_->WaitSettled(id_or_name, std::clamp<int64_t>(wait_ms, 0, 3'600'000),
                       [this, reactor, reply](absl::StatusOr<Group> group) {
                         if (!group.ok()) {
                           reactor->Finish(rpc::ToGrpc(group.status()));
                           return;
                         }
                         *reply = store_->Read([&](const ClusterState& s) { return GroupView(s, *group); });
                         reactor->Finish(grpc::Status::OK);
                       });
  return reactor;
}

grpc::ServerUnaryReactor* HeadServiceImpl::RemovePlacementGroup(grpc::CallbackServerContext* ctx,
                                                                const rpc::RemovePlacementGroupRequest* request,
                                                                rpc::PlacementGroupView* reply) {
  if (grpc::Status auth = AuthenticateChange(ctx); !auth.ok()) return Finish(ctx, auth);
  auto group = groups_->Remove(request->id());
  if (!group.ok()) return Finish(ctx, rpc::ToGrpc(group.status()));
  *reply = store_->Read([&](const ClusterState& s) { return GroupView(s, *group); });
  return Finish(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HeadServiceImpl::ListPlacementGroups(grpc::CallbackServerContext* ctx,
                                                               const rpc::ListPlacementGroupsRequest* request,
                                                               rpc::PlacementGroupList* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  const std::vector<Group> groups = groups_->List(request->include_removed());
  store_->Read([&](const ClusterState& s) {
    for (const Group& g : groups) *reply->add_groups() = GroupView(s, g);
  });
  return Finish(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HeadServiceImpl::WorkerExited(grpc::CallbackServerContext* ctx,
                                                        const rpc::WorkerExitedRequest* request,
                                                        rpc::WorkerExitedReply* reply) {
  if (grpc::Status auth = AuthenticateNode(ctx, request->node_id()); !auth.ok()) return Finish(ctx, auth);
  absl::StatusOr<ParsedExits> parsed = ParseWorkerExits(*request);
  if (!parsed.ok()) return Finish(ctx, rpc::ToGrpc(parsed.status()));
  std::vector<absl::Status> results(request->exits_size());
  for (auto& [i, why] : parsed->refused) results[i] = std::move(why);
  if (!parsed->exits.empty()) {
    std::vector<absl::Status> done = membership_->ReportWorkerExits(NodeId(request->node_id()), std::move(parsed->exits));
    for (size_t k = 0; k < done.size(); ++k) results[parsed->index[k]] = std::move(done[k]);
  }
  for (const absl::Status& s : results) {
    rpc::WorkerExitResult* r = reply->add_results();
    r->set_error_code(static_cast<int>(s.code()));
    r->set_error(std::string(s.message()));
  }
  return Finish(ctx, grpc::Status::OK);
}

absl::StatusOr<ParsedExits> ParseWorkerExits(const rpc::WorkerExitedRequest& request) {
  constexpr int kMaxExits = 1000;
  if (request.exits_size() == 0) {
    // An agent of an older version sends one exit per call in fields this head no longer reads: not taken (and
    // not lost: the agent keeps it and tries again), and said so.
    return absl::FailedPreconditionError(
        "exits: no report in the call (an agent older than this head reports exits one per call; upgrade it)");
  }
  if (request.exits_size() > kMaxExits) {
    return absl::InvalidArgumentError(
        absl::StrCat("exits: at most ", kMaxExits, " reports per call, not ", request.exits_size()));
  }
  // What the agent says about why, bounded: the head keeps it with the worker.
  constexpr size_t kMaxTail = 4096;
  constexpr size_t kMaxErrorLine = 1024;
  ParsedExits out;
  for (int i = 0; i < request.exits_size(); ++i) {
    const rpc::WorkerExitReport& r = request.exits(i);
    if (r.worker_id().empty()) {
      out.refused.emplace_back(i, absl::InvalidArgumentError(absl::StrCat("exits[", i, "].worker_id is required")));
      continue;
    }
    const std::string& tail = r.output_tail();
    out.exits.push_back({WorkerId(r.worker_id()),
                         WorkerExit{.exit_code = r.exit_code(),
                                    .signal = r.signal(),
                                    .wall_ms = r.end_time_ms(),
                                    .stopped = r.stopped(),
                                    .oom_killed = r.oom_killed(),
                                    .peak_rss_bytes = std::max<int64_t>(0, r.peak_rss_bytes()),
                                    .output_tail = tail.substr(tail.size() > kMaxTail ? tail.size() - kMaxTail : 0),
                                    .accelerator_error = r.accelerator_error().substr(0, kMaxErrorLine)},
                         r.pid(), r.start_time_ms()});
    out.index.push_back(i);
  }
  return out;
}

grpc::ServerUnaryReactor* HeadServiceImpl::ReadPackage(grpc::CallbackServerContext* ctx,
                                                       const rpc::ReadPackageRequest* request,
                                                       rpc::ReadPackageReply* reply) {
  if (grpc::Status auth = Authenticate(ctx); !auth.ok()) return Finish(ctx, auth);
  if (packages_ == nullptr) return Finish(ctx, grpc::Status(grpc::StatusCode::UNAVAILABLE, "this head keeps no packages"));
  if (absl::Status s = PackageStore::CheckName(request->name()); !s.ok()) return Finish(ctx, rpc::ToGrpc(s));
  constexpr uint32_t kMaxChunk = 4u << 20;
  const uint32_t max_bytes = request->max_bytes() == 0 ? kMaxChunk : std::min(request->max_bytes(), kMaxChunk);
  Package info;
  auto data = packages_->Read(request->name(), request->offset(), max_bytes, &info);
  if (!data.ok()) return Finish(ctx, rpc::ToGrpc(data.status()));
  *reply->mutable_data() = *std::move(data);
  reply->set_size(info.size);
  reply->set_sha256(info.sha256);
  return Finish(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* HeadServiceImpl::ReportMetrics(grpc::CallbackServerContext* ctx,
                                                         const rpc::MetricsReport* request,
                                                         rpc::MetricsReportReply* reply) {
  if (grpc::Status auth = AuthenticateNode(ctx, request->node_id()); !auth.ok()) return Finish(ctx, auth);
  std::optional<Labels> labels = store_->Read([&](const ClusterState& s) -> std::optional<Labels> {
    const Node* n = s.FindNode(NodeId(request->node_id()));
    if (n == nullptr || !n->alive() || n->incarnation != request->incarnation()) return std::nullopt;
    return n->info.labels;
  });
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
