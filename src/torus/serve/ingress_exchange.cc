// ClientConn, the exchange with replicas: picking one (or waiting for one), sending the request, reading the answer
// head, relaying the body, retrying on another replica after a failure before the answer.
#include "torus/serve/ingress_conn.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "torus/serve/forwarding.h"

namespace torus::serve {

void ClientConn::Dispatch() {
  client_keep_alive_ = head_.KeepAlive();
  request_bytes_ = UpstreamRequest(head_, route_->prefix, peer_, body_);
  std::string().swap(body_);
  deadline_ms_ = SteadyNowMs() + route_->request_timeout_ms;
  Acquire();
}

void ClientConn::Acquire() {
  queue_deadline_ms_ = std::min(deadline_ms_, SteadyNowMs() + route_->queue_timeout_ms);
  OnPick(ctx_->routes->TryAcquire(route_->name, tried_, /*queued=*/false));
}

void ClientConn::OnRoutesChanged() {
  if (phase_ == Phase::kQueued) OnPick(ctx_->routes->TryAcquire(route_->name, tried_, /*queued=*/true));
}

void ClientConn::OnPick(const RouteTable::Pick& pick) {
  const std::string& service = route_->name;
  queued_ = pick.outcome == RouteTable::Outcome::kWait;
  switch (pick.outcome) {
    case RouteTable::Outcome::kWait:
      if (phase_ != Phase::kQueued) {
        phase_ = Phase::kQueued;
        timer_.Set(queue_deadline_ms_);
      }
      return;
    case RouteTable::Outcome::kPicked:
      acquired_ = true;
      replica_ = pick.replica;
      StartTry(/*fresh=*/false);
      return;
    case RouteTable::Outcome::kGone:
      Fail(503, absl::StrCat("service ", service, " was deleted"));
      return;
    case RouteTable::Outcome::kQueueFull:
      Fail(503, absl::StrCat("service ", service, " has no READY replica and ", route_->max_queued_requests,
                             " requests already wait for one (max_queued_requests)"));
      return;
    case RouteTable::Outcome::kExhausted:
      Fail(502, absl::StrCat("every READY replica of ", service, " failed before answering; last: ", last_error_));
      return;
    default:
      Fail(503, "the ingress is stopping");
      return;
  }
}

void ClientConn::StartTry(bool fresh) {
  reused_ = false;
  if (!fresh) {
    up_ = ctx_->pool->Take(absl::StrCat(replica_.host, ":", replica_.port));
    reused_ = up_ != nullptr;
  }
  if (up_ == nullptr) {
    absl::StatusOr<std::unique_ptr<Upstream>> up = ctx_->pool->Connect(replica_.host, replica_.port);
    if (!up.ok()) {
      OnTryFailed(std::string(up.status().message()), false);
      return;
    }
    up_ = *std::move(up);
  }
  up_->set_user(this);
  request_sent_ = 0;
  if (up_->connecting()) {
    phase_ = Phase::kConnecting;
    timer_.Set(std::min(deadline_ms_, SteadyNowMs() + ctx_->options->connect_timeout_ms));
    return;
  }
  OnConnected();
}

void ClientConn::OnUpstreamEvents() {
  switch (phase_) {
    case Phase::kConnecting: {
      absl::StatusOr<bool> connected = up_->ContinueConnect();
      if (!connected.ok()) {
        CloseUpstream();
        OnTryFailed(std::string(connected.status().message()), false);
      } else if (*connected) {
        OnConnected();
      }
      return;
    }
    case Phase::kAwaiting:
      SendRequest();
      ReadAnswer();
      return;
    case Phase::kRelaying:
      ReadAnswer();
      return;
    default:
      return;
  }
}

void ClientConn::OnConnected() {
  phase_ = Phase::kAwaiting;
  timer_.Set(deadline_ms_);
  SendRequest();
  ReadAnswer();
}

void ClientConn::SendRequest() {
  while (phase_ == Phase::kAwaiting && request_sent_ < request_bytes_.size() && up_->socket().writable()) {
    const ssize_t n = up_->socket().Write(absl::string_view(request_bytes_).substr(request_sent_));
    if (n == EdgeSocket::kError) {
      OnUpstreamEnded(/*eof=*/false);
      return;
    }
    request_sent_ += static_cast<size_t>(n);
  }
}

void ClientConn::ReadAnswer() {
  for (int reads = 0; up_ != nullptr && up_->socket().readable(); ++reads) {
    if (reads == kReadsPerTurn) {
      resume_.Set(SteadyNowMs());
      break;
    }
    if (phase_ == Phase::kRelaying && pending_output() > kMaxPendingOutput) {
      // The client is slower than the replica: write what it takes, and read no more than it took.
      Flush();
      if (phase_ != Phase::kRelaying || pending_output() > kMaxPendingOutput) break;
    } else if (phase_ != Phase::kAwaiting && phase_ != Phase::kRelaying) {
      break;
    }
    const ssize_t n = up_->socket().Read(ctx_->scratch, kScratchBytes);
    if (n > 0) {
      if (phase_ == Phase::kAwaiting) {
        up_->in().append(ctx_->scratch, static_cast<size_t>(n));
        ParseAnswerHead();
      } else {
        RelayBody(absl::string_view(ctx_->scratch, static_cast<size_t>(n)));
      }
      continue;
    }
    if (n == EdgeSocket::kWouldBlock) break;
    OnUpstreamEnded(/*eof=*/n == 0);
    break;
  }
  if (pending_output() > 0 && phase_ == Phase::kRelaying) Flush();
}

void ClientConn::ParseAnswerHead() {
  std::string& in = up_->in();
  std::optional<size_t> end;
  absl::StatusOr<HttpHead> answer;
  while (true) {
    end = FindHeadEnd(in);
    if (!end) {
      if (in.size() > kMaxHeadBytes) OnUpstreamEnded(/*eof=*/false);
      return;
    }
    answer = ParseResponseHead(absl::string_view(in).substr(0, *end));
    if (!answer.ok() || answer->status >= 200 || answer->status == 101) break;
    in.erase(0, *end);  // an interim answer (100 Continue, 102 Processing, 103 Early Hints): not the answer
  }
  absl::StatusOr<BodyFraming> framing =
      answer.ok() ? ResponseFraming(*answer, head_.method) : absl::StatusOr<BodyFraming>(answer.status());
  if (!framing.ok()) {
    const std::string error =
        absl::StrCat("replica ", replica_.id, " sent a malformed answer: ", framing.status().message());
    CloseUpstream();
    OnTryFailed(error, false);
    return;
  }
  // The answer head, as the replica sent it but for the connection headers.
  answered_ = true;
  status_ = answer->status;
  answer_framing_ = *framing;
  answer_left_ = framing->length;
  answer_chunks_ = ChunkedReader();
  upstream_keep_alive_ = answer->KeepAlive();
  close_client_ = !client_keep_alive_ || framing->kind == BodyFraming::Kind::kUntilClose;
  QueueOutput(ClientAnswerHead(*answer, close_client_));
  phase_ = Phase::kRelaying;
  const std::string rest = in.substr(*end);
  in.clear();
  if (framing->kind == BodyFraming::Kind::kNone) {
    // Bytes after a body-less answer, or a switch of protocols: the connection is not reusable.
    OnAnswerEnded(/*upstream_ok=*/rest.empty() && status_ != 101);
    return;
  }
  if (!rest.empty()) RelayBody(rest);
}

void ClientConn::RelayBody(absl::string_view bytes) {
  switch (answer_framing_.kind) {
    case BodyFraming::Kind::kLength: {
      const size_t n = std::min<size_t>(bytes.size(), static_cast<size_t>(answer_left_));
      QueueOutput(bytes.substr(0, n));
      answer_left_ -= static_cast<int64_t>(n);
      if (answer_left_ == 0) OnAnswerEnded(/*upstream_ok=*/n == bytes.size());  // not more than it announced
      return;
    }
    case BodyFraming::Kind::kChunked: {
      absl::StatusOr<size_t> used = answer_chunks_.Feed(bytes, nullptr);
      if (!used.ok()) {
        OnAnswerEnded(/*upstream_ok=*/false);
        return;
      }
      QueueOutput(bytes.substr(0, *used));
      if (answer_chunks_.done()) OnAnswerEnded(/*upstream_ok=*/*used == bytes.size());
      return;
    }
    default:  // until the replica closes
      QueueOutput(bytes);
      return;
  }
}

void ClientConn::OnUpstreamEnded(bool eof) {
  if (phase_ == Phase::kAwaiting) {
    // A kept-alive connection the replica closed meanwhile fails at once: then one fresh connection is tried.
    const bool may_refresh = reused_ && up_->in().empty();
    const std::string error = absl::StrCat("replica ", replica_.id, " at ", up_->key(),
                                           eof ? " closed the connection" : " failed", " before answering");
    CloseUpstream();
    OnTryFailed(error, may_refresh);
  } else if (phase_ == Phase::kRelaying) {
    OnAnswerEnded(/*upstream_ok=*/false);  // the end of an answer until close, or one cut short
  }
}

void ClientConn::OnTryFailed(const std::string& error, bool may_refresh) {
  if (may_refresh) {
    StartTry(/*fresh=*/true);
    return;
  }
  ctx_->routes->Release(route_->name, replica_.id);
  acquired_ = false;
  last_error_ = error;
  tried_.insert(replica_.id);
  retried_ = true;
  spdlog::debug("ingress: {} {} to {}: {}; trying another replica", head_.method,
                head_.target.substr(0, head_.target.find('?')), replica_.id, error);
  Acquire();
}

void ClientConn::OnAnswerEnded(bool upstream_ok) {
  upstream_done_ = true;
  if (upstream_ok && upstream_keep_alive_ && request_sent_ == request_bytes_.size()) {
    ctx_->pool->Put(std::move(up_));
  } else {
    CloseUpstream();
  }
  if (!upstream_ok) close_client_ = true;
  MaybeFinishAnswer();
}

void ClientConn::MaybeFinishAnswer() {
  if (phase_ != Phase::kRelaying || !upstream_done_ || pending_output() > 0) return;
  // The client has the whole answer.
  ctx_->routes->Finish(route_->name, replica_.id, status_, Seconds(), retried_);
  acquired_ = false;
  if (close_client_) {
    Close();
  } else {
    StartHead();
  }
}

void ClientConn::AbortAnswer() {
  CloseUpstream();
  Close();  // records the answer's status
}

void ClientConn::CloseUpstream() {
  if (up_ != nullptr) ctx_->pool->Close(std::move(up_));
}

}  // namespace torus::serve
