#include "torus/client/client.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "torus/rpc/auth.h"
#include "torus/rpc/convert.h"
#include "torus/common/head_target.h"
#include "torus/tls/credentials.h"
#include "torus/tls/pki.h"

namespace torus::client {
namespace {

absl::Status WithContext(const grpc::Status& status, const std::string& address) {
  absl::Status s = rpc::FromGrpc(status);
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE || status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::Status(s.code(), absl::StrCat("head at ", address, " is not reachable: ", s.message()));
  }
  return s;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const HeadEndpoint& endpoint) {
  if (endpoint.address.empty()) return absl::InvalidArgumentError("head address is empty; expected HOST:PORT");
  grpc::ChannelArguments args;
  // A 10,000-node cluster view is several megabytes; gRPC's default limit is 4 MB.
  args.SetMaxReceiveMessageSize(512 << 20);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, torus::kHeadConnectTimeoutMs);
  auto channel = grpc::CreateCustomChannel(
      HeadTarget(endpoint.address),
      endpoint.tls_ca.empty() ? grpc::InsecureChannelCredentials()
                              : tls::ChannelCredentials({.ca = endpoint.tls_ca}, tls::kHeadIdentity),
      args);
  return std::unique_ptr<Client>(new Client(endpoint, std::move(channel)));
}

Client::Client(HeadEndpoint endpoint, std::shared_ptr<grpc::Channel> channel)
    : endpoint_(std::move(endpoint)),
      stub_(rpc::HeadService::NewStub(channel)),
      events_(rpc::EventService::NewStub(channel)) {}

void Client::Prepare(grpc::ClientContext& ctx, int timeout_ms) const {
  ctx.AddMetadata(rpc::kAuthMetadataKey, absl::StrCat("Bearer ", endpoint_.token));
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
}

absl::StatusOr<rpc::ClusterStatus> Client::GetClusterStatus(bool include_dead) {
  grpc::ClientContext ctx;
  Prepare(ctx, 10'000);
  rpc::GetClusterStatusRequest request;
  request.set_include_dead(include_dead);
  rpc::ClusterStatus reply;
  grpc::Status status = stub_->GetClusterStatus(&ctx, request, &reply);
  if (!status.ok()) return WithContext(status, endpoint_.address);
  return reply;
}

absl::StatusOr<bool> Client::MarkNodeDead(const std::string& node_id, const std::string& reason, bool revoke) {
  grpc::ClientContext ctx;
  Prepare(ctx, 10'000);
  rpc::MarkNodeDeadRequest request;
  request.set_node_id(node_id);
  request.set_reason(reason);
  request.set_revoke(revoke);
  rpc::MarkNodeDeadReply reply;
  grpc::Status status = stub_->MarkNodeDead(&ctx, request, &reply);
  if (!status.ok()) return WithContext(status, endpoint_.address);
  return reply.was_alive();
}

absl::StatusOr<rpc::PlacementGroupView> Client::CreatePlacementGroup(const rpc::PlacementGroupSpec& spec) {
  grpc::ClientContext ctx;
  Prepare(ctx, static_cast<int>(std::min<int64_t>(std::max<int64_t>(spec.wait_ready_ms(), 0) + 10'000, 3'700'000)));
  rpc::PlacementGroupView reply;
  grpc::Status status = stub_->CreatePlacementGroup(&ctx, spec, &reply);
  if (!status.ok()) return WithContext(status, endpoint_.address);
  return reply;
}

absl::StatusOr<rpc::PlacementGroupView> Client::ReserveSlices(const rpc::SliceGroupSpec& spec) {
  grpc::ClientContext ctx;
  Prepare(ctx, static_cast<int>(std::min<int64_t>(std::max<int64_t>(spec.wait_ready_ms(), 0) + 10'000, 3'700'000)));
  rpc::PlacementGroupView reply;
  grpc::Status status = stub_->ReserveSlices(&ctx, spec, &reply);
  if (!status.ok()) return WithContext(status, endpoint_.address);
  return reply;
}

absl::StatusOr<rpc::PlacementGroupView> Client::WaitUntilReady(const std::string& id_or_name,
                                                               std::chrono::milliseconds timeout) {
  grpc::ClientContext ctx;
  Prepare(ctx, static_cast<int>(std::min<int64_t>(timeout.count() + 10'000, 3'700'000)));
  rpc::GetPlacementGroupRequest request;
  request.set_id(id_or_name);
  request.set_wait_ready_ms(timeout.count());
  rpc::PlacementGroupView reply;
  grpc::Status status = stub_->GetPlacementGroup(&ctx, request, &reply);
  if (!status.ok()) return WithContext(status, endpoint_.address);
  return reply;
}

absl::StatusOr<rpc::PlacementGroupView> Client::GetPlacementGroup(const std::string& id_or_name) {
  return WaitUntilReady(id_or_name, std::chrono::milliseconds(0));
}

absl::StatusOr<rpc::PlacementGroupView> Client::RemovePlacementGroup(const std::string& id_or_name) {
  grpc::ClientContext ctx;
  Prepare(ctx, 10'000);
  rpc::RemovePlacementGroupRequest request;
  request.set_id(id_or_name);
  rpc::PlacementGroupView reply;
  grpc::Status status = stub_->RemovePlacementGroup(&ctx, request, &reply);
  if (!status.ok()) return WithContext(status, endpoint_.address);
  return reply;
}

absl::StatusOr<std::vector<rpc::PlacementGroupView>> Client::ListPlacementGroups(bool include_removed) {
  grpc::ClientContext ctx;
  Prepare(ctx, 10'000);
  rpc::ListPlacementGroupsRequest request;
  request.set_include_removed(include_removed);
  rpc::PlacementGroupList reply;
  grpc::Status status = stub_->ListPlacementGroups(&ctx, request, &reply);
  if (!status.ok()) return WithContext(status, endpoint_.address);
  return std::vector<rpc::PlacementGroupView>(reply.groups().begin(), reply.groups().end());
}

absl::StatusOr<rpc::LedgerView> Client::GetNodeLedger(const std::string& node_id) {
  auto status = GetClusterStatus(/*include_dead=*/false);
  if (!status.ok()) return status.status();
  for (const auto& node : status->nodes()) {
    if (node.info().node_id() != node_id) continue;
    std::string target = absl::StrCat(node.info().address(), ":", node.info().agent_port());
    auto stub = rpc::NodeService::NewStub(grpc::CreateChannel(
        target, endpoint_.tls_ca.empty() ? grpc::InsecureChannelCredentials()
                                         : tls::ChannelCredentials({.ca = endpoint_.tls_ca}, tls::kNodeIdentityPrefix)));
    grpc::ClientContext ctx;
    Prepare(ctx, 10'000);
    rpc::LedgerView ledger;
    grpc::Status s = stub->GetLedger(&ctx, rpc::GetLedgerRequest(), &ledger);
    if (!s.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          absl::StrCat("agent of node ", node_id, " at ", target, ": ", s.error_message()));
    }
    return ledger;
  }
  return absl::NotFoundError(absl::StrCat("node ", node_id, " is not an ALIVE node of the cluster"));
}

absl::Status Client::Watch(EventCursor* from, const EventSelector& selector,
                           const std::function<bool(const rpc::Event& event)>& on_event) {
  grpc::ClientContext ctx;  // no deadline: it lasts until on_event says stop
  ctx.AddMetadata(rpc::kAuthMetadataKey, absl::StrCat("Bearer ", endpoint_.token));
  rpc::WatchRequest request;
  if (from->epoch != 0) {
    request.set_since(from->revision);
    request.set_epoch(from->epoch);
  }
  for (const std::string& kind : selector.kinds) request.add_kinds(kind);
  for (const std::string& id : selector.ids) request.add_ids(id);
  std::unique_ptr<grpc::ClientReader<rpc::Event>> reader = events_->Watch(&ctx, request);
  rpc::Event event;
  bool stopped = false;
  while (reader->Read(&event)) {
    from->epoch = event.epoch();
    from->revision = std::max(from->revision, event.revision());
    if (event.progress()) continue;
    if (!on_event(event)) {
      stopped = true;
      ctx.TryCancel();
      break;
    }
  }
  grpc::Status status = reader->Finish();
  if (stopped) return absl::OkStatus();
  if (status.ok()) return absl::UnavailableError("the head ended the watch");
  return WithContext(status, endpoint_.address);
}

}  // namespace torus::client
