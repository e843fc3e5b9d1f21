// Client: the C++ API to a torus head, used by the CLI, tests and user programs.
// Jobs and gang runs go over the head's HTTP API instead: HttpApiClient (http_api_client.h).
//
// Example:
//   auto client = torus::client::Client::Connect({"127.0.0.1:6380", token});
//   auto status = (*client)->GetClusterStatus();
//
// Thread-safety: thread-safe (gRPC stubs are).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "torus/client/events.h"
#include "torus/client/session.h"
#include "torus/head.grpc.pb.h"
#include "torus/node.grpc.pb.h"

namespace torus::client {

class Client {
 public:
  // Creates a channel; does not wait for the head (calls fail with UNAVAILABLE if it is down).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const HeadEndpoint& endpoint);

  // Nodes (dead ones too when asked), slices and resource totals. Deadline 10 s.
  absl::StatusOr<rpc::ClusterStatus> GetClusterStatus(bool include_dead = true);
  // Declares a node dead now; returns whether it was alive.
  // With `revoke`, the node's certificate is refused from now on and it is issued none again (TLS clusters).
  absl::StatusOr<bool> MarkNodeDead(const std::string& node_id, const std::string& reason, bool revoke = false);

  // Placement groups and slice groups. Create and Reserve return at once (usually PENDING), or with the spec's
  // wait_ready_ms as WaitUntilReady does, in one call; WaitUntilReady answers as soon as the group is CREATED,
  // FAILED or REMOVED, or after `timeout` with its state then.
  absl::StatusOr<rpc::PlacementGroupView> CreatePlacementGroup(const rpc::PlacementGroupSpec& spec);
  absl::StatusOr<rpc::PlacementGroupView> ReserveSlices(const rpc::SliceGroupSpec& spec);
  absl::StatusOr<rpc::PlacementGroupView> WaitUntilReady(const std::string& id_or_name,
                                                         std::chrono::milliseconds timeout);
  absl::StatusOr<rpc::PlacementGroupView> GetPlacementGroup(const std::string& id_or_name);
  absl::StatusOr<rpc::PlacementGroupView> RemovePlacementGroup(const std::string& id_or_name);
  absl::StatusOr<std::vector<rpc::PlacementGroupView>> ListPlacementGroups(bool include_removed = false);

  // What an agent holds (its bundle ledger), asked of the agent directly at the address the head knows for it.
  absl::StatusOr<rpc::LedgerView> GetNodeLedger(const std::string& node_id);

  // Streams the head's events after *from that match `selector` (EventService.Watch) to `on_event` as they
  // happen, in order, advancing *from past each event and each progress mark, until on_event returns false (then
  // OK). OutOfRange when the head has restarted since from->epoch or no longer keeps the events after it (read the
  // objects again, then watch from a new cursor); Unavailable when the stream breaks (watch again from *from).
  absl::Status Watch(EventCursor* from, const EventSelector& selector,
                     const std::function<bool(const rpc::Event& event)>& on_event);

  const std::string& address() const { return endpoint_.address; }

 private:
  Client(HeadEndpoint endpoint, std::shared_ptr<grpc::Channel> channel);
  void Prepare(grpc::ClientContext& ctx, int timeout_ms) const;

  HeadEndpoint endpoint_;
  std::unique_ptr<rpc::HeadService::Stub> stub_;
  std::unique_ptr<rpc::EventService::Stub> events_;
};

}  // namespace torus::client
