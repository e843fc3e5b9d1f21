// The head's side of HeadService.HeartbeatStream. Each stream is admitted once (NodeCallers), sends initial metadata with
// rpc::kHeartbeatAcceptedKey (the agent's sign that the head accepted it), then reads heartbeats one after another
// into Liveness, writing nothing while the node is known as the heartbeat's incarnation. When it is not (the head
// restarted, or declared the node dead), it writes REREGISTER and ends the stream with OK. A heartbeat that does not
// parse, or that names another node than the stream's first, ends the stream with INVALID_ARGUMENT.
//
// Streams are served with gRPC's asynchronous API on several completion queues, each drained by its own thread:
// every open stream keeps a read outstanding, and the cost of completing an operation grows with the operations
// outstanding on its queue (Debian's gRPC checks each completion against a list of them), so 10,000 agents on one
// queue — as the callback API would put them — cost several times more than on eight.
//
// Thread-safety: construct, Start and Stop from one thread; the streams run on the queues' threads.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "torus/common/resources.h"
#include "torus/head.grpc.pb.h"
#include "torus/head/api/beat_server.h"
#include "torus/head/api/node_callers.h"
#include "torus/head/state/liveness.h"

namespace torus::head {

// What a heartbeat reports when availability changed: what the agent's ledger has available and what its task
// leases hold.
struct HeartbeatReport {
  ResourceSet available;
  LeaseHoldings leased;
};

// The report a heartbeat carries (nullopt when unchanged), or INVALID_ARGUMENT naming the field.
absl::StatusOr<std::optional<HeartbeatReport>> ParseHeartbeat(const rpc::HeartbeatRequest& request);

// Applies one heartbeat to `liveness`: OK or REREGISTER, or the parse error.
absl::StatusOr<rpc::HeartbeatReply::Action> ApplyHeartbeat(const rpc::HeartbeatRequest& request, Liveness& liveness);

// A HeadService whose HeartbeatStream is served asynchronously and every other method by callbacks. (gRPC cannot
// turn a callback method async afterwards, so the chain is spelled out; a method added to HeadService goes here.)
using HeadServiceBase = rpc::HeadService::WithCallbackMethod_RegisterNode<rpc::HeadService::WithCallbackMethod_Heartbeat<
    rpc::HeadService::WithAsyncMethod_HeartbeatStream<rpc::HeadService::WithCallbackMethod_UnregisterNode<
        rpc::HeadService::WithCallbackMethod_MarkNodeDead<rpc::HeadService::WithCallbackMethod_GetClusterStatus<
            rpc::HeadService::WithCallbackMethod_CreatePlacementGroup<rpc::HeadService::WithCallbackMethod_ReserveSlices<
                rpc::HeadService::WithCallbackMethod_GetPlacementGroup<
                    rpc::HeadService::WithCallbackMethod_RemovePlacementGroup<
                        rpc::HeadService::WithCallbackMethod_ListPlacementGroups<
                            rpc::HeadService::WithCallbackMethod_WorkerExited<
                                rpc::HeadService::WithCallbackMethod_ReportMetrics<
                                    rpc::HeadService::WithCallbackMethod_ReadPackage<
                                        rpc::HeadService::WithCallbackMethod_RegisterActor<
                                          rpc::HeadService::WithCallbackMethod_CreateActor<
                                            rpc::HeadService::WithCallbackMethod_UpdateActor<
                                                rpc::HeadService::WithCallbackMethod_GetActor<
                                                    rpc::HeadService::WithCallbackMethod_ListActors<
                                                        rpc::HeadService::WithCallbackMethod_ReportTasks<
                                                            rpc::HeadService::Service>>>>>>>>>>>>>>>>>>>>;

class HeartbeatStreamServer {
 public:
  // Adds `queues` completion queues to `builder`; `service` must be registered with the same builder.
  // `callers` admits each stream (the token, or the node's own certificate with TLS; every heartbeat must then name
  // that node, and a node revoked while its stream is open is refused at its next heartbeat). `beats` (optional) is
  // told which nodes have a stream open, from a stream's first heartbeat to its end.
  HeartbeatStreamServer(HeadServiceBase* service, Liveness* liveness, const NodeCallers* callers, BeatServer* beats,
                        grpc::ServerBuilder& builder, int queues = 8);
  ~HeartbeatStreamServer();  // Stop()
  HeartbeatStreamServer(const HeartbeatStreamServer&) = delete;
  HeartbeatStreamServer& operator=(const HeartbeatStreamServer&) = delete;

  // After the server is built: starts taking streams.
  void Start();
  // After the server's Shutdown (which ends every stream): drains the queues and joins their threads.
  void Stop();

  // Heartbeats read from streams so far.
  uint64_t messages() const { return messages_.load(); }

 private:
  class Call;
  // Asks for the next stream on `cq` (unless stopping).
  void RequestNext(grpc::ServerCompletionQueue* cq);
  void Drain(grpc::ServerCompletionQueue* cq);

  HeadServiceBase* service_;
  Liveness* liveness_;
  const NodeCallers* const callers_;
  BeatServer* const beats_;
  std::atomic<uint64_t> messages_{0};
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues_;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace torus::head
