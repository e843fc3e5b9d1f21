// ClientConn: one client connection of the ingress, from accept to close, on one event loop. It reads a request
// (head, then the whole body), routes it (RouteTable: match, pick, queue), sends it to a replica on a pooled or new
// connection (Upstream), retries as ingress.h says, and relays the answer to the client as its bytes arrive —
// reading the replica no faster than the client takes them — then reads the next request of a kept-alive
// connection. Its answers, messages and RouteTable calls are the ones ingress.h documents.
//
// One deadline at a time, by phase:
//   kHead       idle_timeout for the first byte of a head, then header_timeout   (408, or a silent close)
//   kBody       request_timeout                                                 (a silent close)
//   kQueued     queue_timeout (within request_timeout)                          (503)
//   kConnecting connect_timeout (within request_timeout)                        (the next replica)
//   kAwaiting   request_timeout                                                 (504)
//   kRelaying   request_timeout                                                 (the client connection closes)
//   kClosing    5 s to write the ingress's own answer                           (close)
//
// Thread-safety: not thread-safe; used on its loop's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/strings/string_view.h"
#include "torus/serve/edge_socket.h"
#include "torus/serve/event_loop.h"
#include "torus/serve/http_message.h"
#include "torus/serve/ingress.h"
#include "torus/serve/route_table.h"
#include "torus/serve/upstream.h"

namespace torus::serve {

class ClientConn;

// What the connections of one loop share.
struct ConnContext {
  EventLoop* loop = nullptr;
  RouteTable* routes = nullptr;
  const Ingress::Options* options = nullptr;
  UpstreamPool* pool = nullptr;
  char* scratch = nullptr;  // kScratchBytes to read into
  // Called once, when a connection has closed: its owner then hands it to loop->DeleteLater.
  std::function<void(ClientConn*)> closed;
};

class ClientConn final : public EventLoop::Handler, private Upstream::User {
 public:
  static constexpr size_t kScratchBytes = 64 * 1024;
  // Answer bytes for the client held at most (beyond them the replica is not read until the client takes some).
  static constexpr size_t kMaxPendingOutput = 256 * 1024;
  // Reads of kScratchBytes per turn: a connection with more to read lets the loop's others go first.
  static constexpr int kReadsPerTurn = 16;

  // Takes `fd` (accepted, non-blocking); `peer`: the client's address (X-Forwarded-For). Call Start next.
  ClientConn(const ConnContext* context, int fd, std::string peer);
  ~ClientConn() override;

  // Registers the connection on the loop and waits for a request; false (closed) when epoll refuses it.
  bool Start();
  // The routes changed: a queued request tries again.
  void OnRoutesChanged();
  // Closes the connection at once. A request in flight ends: no longer queued, its replica released (and its
  // answer recorded when one had begun).
  void Close();

  void OnEvents(uint32_t events) override;

 private:
  enum class Phase { kHead, kBody, kQueued, kConnecting, kAwaiting, kRelaying, kClosing, kClosed };

  // The client side (ingress_conn.cc).
  void StartHead();
  void ReadRequest();
  void ContinueHead();
  void OnHead(size_t end);
  void ContinueBody();
  void QueueOutput(absl::string_view bytes);
  void Flush();
  size_t pending_output() const { return out_.size() - out_sent_; }
  void OnClientFailed();
  // Answers with the ingress's own error and closes; `record`: counted for the service.
  void Fail(int status, const std::string& message, bool record = true);
  void OnDeadline();
  // Goes on reading where a turn ended (kReadsPerTurn).
  void OnResume();
  // Lets go of buffers that a large request or answer grew.
  void TrimBuffers();
  double Seconds() const;

  // The exchange with replicas (ingress_exchange.cc).
  void Dispatch();
  void Acquire();
  void OnPick(const RouteTable::Pick& pick);
  void StartTry(bool fresh);
  void OnUpstreamEvents() override;
  void OnConnected();
  void SendRequest();
  void ReadAnswer();
  void ParseAnswerHead();
  void RelayBody(absl::string_view bytes);
  // The try failed before an answer head; `may_refresh`: a stale kept-alive connection may be the cause.
  void OnTryFailed(const std::string& error, bool may_refresh);
  void OnUpstreamEnded(bool eof);
  void OnAnswerEnded(bool upstream_ok);
  void MaybeFinishAnswer();
  // Cuts an answer off: the replica connection and the client connection close.
  void AbortAnswer();
  void CloseUpstream();

  const ConnContext* const ctx_;
  const std::string peer_;
  EdgeSocket client_;
  Timer timer_;   // the phase's deadline
  Timer resume_;  // the next turn of reading
  Phase phase_ = Phase::kHead;
  std::string in_;   // bytes read from the client, not used yet
  std::string out_;  // bytes for the client, from out_sent_ on not written yet
  size_t out_sent_ = 0;

  // The request.
  HttpHead head_;
  BodyFraming framing_;
  ChunkedReader chunks_;
  std::optional<ServiceRoute> route_;
  std::string body_;
  std::chrono::steady_clock::time_point start_;
  int64_t deadline_ms_ = 0;  // request_timeout from dispatch
  int64_t queue_deadline_ms_ = 0;
  std::string request_bytes_;  // as the replica gets it
  bool client_keep_alive_ = true;

  // Its tries.
  std::set<std::string> tried_;  // replicas that failed it
  std::string last_error_;
  bool retried_ = false;
  bool queued_ = false;    // counted as queued in the route table
  bool acquired_ = false;  // counted in flight on replica_
  ReplicaEndpoint replica_;
  std::unique_ptr<Upstream> up_;
  bool reused_ = false;      // up_ came from the pool
  size_t request_sent_ = 0;  // bytes of request_bytes_ written

  // The answer.
  bool answered_ = false;  // its head is the client's
  int status_ = 0;
  BodyFraming answer_framing_;
  ChunkedReader answer_chunks_;
  int64_t answer_left_ = 0;  // kLength
  bool upstream_keep_alive_ = false;
  bool close_client_ = false;
  bool upstream_done_ = false;
};

}  // namespace torus::serve
