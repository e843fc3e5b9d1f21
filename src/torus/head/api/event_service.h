// EventService: the head's events over gRPC (head.proto, Watch), a server stream of the event log (event_log.h) —
// what GET /api/v0/events?watch=1 serves over HTTP.
//
// Each watch runs on a thread of its own, which waits on the event log and writes one event at a time (a slow
// reader holds only its own thread; the log never waits for it). The first message is a progress mark (where the
// watch starts: the epoch and revision), and so is every 10 s without a matching change. At most 32 watches at once
// (RESOURCE_EXHAUSTED beyond).
//
// Thread-safety: thread-safe. The event log must outlive the service; close it (EventLog::Close) before shutting
// the server down, so that open watches end.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "torus/head.grpc.pb.h"
#include "torus/head/api/event_log.h"

namespace torus::head {

// The proto form of an event (revision, kind, id, ... as EventJson names them).
void ToProto(const Event& event, uint64_t epoch, rpc::Event* out);

class EventServiceImpl final : public rpc::EventService::CallbackService {
 public:
  EventServiceImpl(const EventLog* events, std::string token);

  grpc::ServerWriteReactor<rpc::Event>* Watch(grpc::CallbackServerContext* ctx,
                                              const rpc::WatchRequest* request) override;

 private:
  const EventLog* events_;
  const std::string token_;
  std::shared_ptr<std::atomic<int>> open_ = std::make_shared<std::atomic<int>>(0);
};

}  // namespace torus::head
