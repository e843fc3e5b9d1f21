// ClientConn, the client side: reading requests, writing to the client, deadlines, closing. The exchange with
// replicas is in ingress_exchange.cc.
#include "torus/serve/ingress_conn.h"

#include <sys/epoll.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "torus/serve/forwarding.h"

namespace torus::serve {

ClientConn::ClientConn(const ConnContext* context, int fd, std::string peer)
    : ctx_(context),
      peer_(std::move(peer)),
      client_(fd, true),
      timer_(context->loop, [this] { OnDeadline(); }),
      resume_(context->loop, [this] { OnResume(); }) {}

ClientConn::~ClientConn() = default;

bool ClientConn::Start() {
  if (!ctx_->loop->Add(client_.fd(), EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, this)) {
    Close();
    return false;
  }
  StartHead();
  return true;
}

void ClientConn::OnEvents(uint32_t events) {
  if (phase_ == Phase::kClosed) return;
  client_.OnEvents(events);
  if (client_.writable() && pending_output() > 0) {
    Flush();
    // Room again for the answer's bytes: read on from the replica.
    if (phase_ == Phase::kRelaying) ReadAnswer();
  }
  if (phase_ == Phase::kHead || phase_ == Phase::kBody) ReadRequest();
}

void ClientConn::StartHead() {
  phase_ = Phase::kHead;
  head_ = HttpHead();
  route_.reset();
  body_.clear();
  request_bytes_.clear();
  tried_.clear();
  last_error_.clear();
  retried_ = false;
  answered_ = false;
  upstream_done_ = false;
  close_client_ = false;
  status_ = 0;
  TrimBuffers();
  // idle_timeout for the first byte; ContinueHead brings it forward to header_timeout once bytes are here.
  timer_.Set(SteadyNowMs() + ctx_->options->idle_timeout_ms);
  ContinueHead();  // a request sent right after the last one may be here already
  if (phase_ == Phase::kHead) ReadRequest();
}

void ClientConn::ReadRequest() {
  for (int reads = 0; (phase_ == Phase::kHead || phase_ == Phase::kBody) && client_.readable(); ++reads) {
    if (reads == kReadsPerTurn) {
      resume_.Set(SteadyNowMs());
      return;
    }
    const ssize_t n = client_.Read(ctx_->scratch, kScratchBytes);
    if (n > 0) {
      in_.append(ctx_->scratch, static_cast<size_t>(n));
      if (phase_ == Phase::kHead) {
        ContinueHead();
      } else {
        ContinueBody();
      }
      continue;
    }
    if (n == EdgeSocket::kWouldBlock) return;
    Close();  // the client closed, or its connection failed, before the request was whole
    return;
  }
}

void ClientConn::ContinueHead() {
  if (std::optional<size_t> end = FindHeadEnd(in_)) {
    OnHead(*end);
    return;
  }
  if (in_.size() > kMaxHeadBytes) {
    Fail(431, "request head is larger than 64 KiB", false);
    return;
  }
  if (!in_.empty()) {
    const int64_t header_deadline = SteadyNowMs() + ctx_->options->header_timeout_ms;
    if (header_deadline < timer_.at_ms()) timer_.Set(header_deadline);
  }
}

void ClientConn::OnHead(size_t end) {
  start_ = std::chrono::steady_clock::now();
  absl::StatusOr<HttpHead> head = ParseRequestHead(absl::string_view(in_).substr(0, end));
  if (!head.ok()) {
    Fail(400, absl::StrCat("bad request: ", head.status().message()), false);
    return;
  }
  in_.erase(0, end);
  head_ = *std::move(head);
  absl::StatusOr<BodyFraming> framing = RequestFraming(head_);
  if (!framing.ok()) {
    Fail(400, absl::StrCat("bad request: ", framing.status().message()), false);
    return;
  }
  framing_ = *framing;
  const std::string path = head_.target.substr(0, head_.target.find('?'));
  route_ = ctx_->routes->Match(path);
  if (!route_) {
    Fail(404, NoRouteMessage(path, ctx_->routes->Prefixes()), false);
    return;
  }
  if (framing_.kind == BodyFraming::Kind::kLength && framing_.length > route_->max_request_bytes) {
    Fail(413, absl::StrCat("the request body (", framing_.length, " bytes) is over ", route_->name,
                           "'s max_request_bytes (", route_->max_request_bytes, ")"));
    return;
  }
  phase_ = Phase::kBody;
  chunks_ = ChunkedReader();
  timer_.Set(SteadyNowMs() + route_->request_timeout_ms);
  if (auto expect = head_.Get("expect"); expect && absl::EqualsIgnoreCase(*expect, "100-continue")) {
    QueueOutput("HTTP/1.1 100 Continue\r\n\r\n");
    Flush();
    if (phase_ != Phase::kBody) return;
  }
  ContinueBody();
}

void ClientConn::ContinueBody() {
  // The body, whole: it may be sent again to another replica.
  if (framing_.kind == BodyFraming::Kind::kLength) {
    const auto length = static_cast<size_t>(framing_.length);
    if (in_.size() < length) return;
    if (in_.size() == length) {
      body_.swap(in_);
      in_.clear();
    } else {
      body_ = in_.substr(0, length);
      in_.erase(0, length);
    }
  } else if (framing_.kind == BodyFraming::Kind::kChunked) {
    absl::StatusOr<size_t> used = chunks_.Feed(in_, &body_);
    if (!used.ok()) {
      Fail(400, absl::StrCat("bad request: ", used.status().message()));
      return;
    }
    in_.erase(0, *used);
    if (static_cast<int64_t>(body_.size()) > route_->max_request_bytes) {
      Fail(413, absl::StrCat("the request body is over ", route_->name, "'s max_request_bytes (",
                             route_->max_request_bytes, ")"));
      return;
    }
    if (!chunks_.done()) return;
  }
  Dispatch();
}

void ClientConn::QueueOutput(absl::string_view bytes) { out_.append(bytes.data(), bytes.size()); }

void ClientConn::Flush() {
  while (pending_output() > 0 && client_.writable()) {
    const ssize_t n = client_.Write(absl::string_view(out_).substr(out_sent_));
    if (n == EdgeSocket::kError) {
      OnClientFailed();
      return;
    }
    out_sent_ += static_cast<size_t>(n);
  }
  if (out_sent_ == out_.size()) {
    out_.clear();
    out_sent_ = 0;
  } else if (out_sent_ >= kScratchBytes && out_sent_ * 2 >= out_.size()) {
    out_.erase(0, out_sent_);
    out_sent_ = 0;
  }
  if (pending_output() > 0) return;
  if (phase_ == Phase::kClosing) {
    Close();
  } else if (phase_ == Phase::kRelaying) {
    MaybeFinishAnswer();
  }
}

void ClientConn::OnClientFailed() {
  if (phase_ == Phase::kRelaying) {
    AbortAnswer();
  } else {
    Close();
  }
}

void ClientConn::Fail(int status, const std::string& message, bool record) {
  QueueOutput(ErrorAnswer(status, message));
  phase_ = Phase::kClosing;
  timer_.Set(SteadyNowMs() + 5000);
  Flush();
  if (record) ctx_->routes->Record(route_->name, status, Seconds(), false);
}

void ClientConn::OnDeadline() {
  switch (phase_) {
    case Phase::kHead:
      if (in_.empty()) {
        Close();  // idle
      } else {
        Fail(408, "the request head did not arrive in time", false);
      }
      return;
    case Phase::kBody:
      Close();
      return;
    case Phase::kQueued:
      ctx_->routes->Unqueue(route_->name);
      queued_ = false;
      Fail(503, absl::StrCat("service ", route_->name, " has no READY replica; waited ",
                             route_->queue_timeout_ms / 1000.0, " s (queue_timeout_s)"));
      return;
    case Phase::kConnecting: {
      const std::string error = absl::StrCat("cannot connect to ", replica_.host, ":", replica_.port, ": timed out");
      CloseUpstream();
      OnTryFailed(error, false);
      return;
    }
    case Phase::kAwaiting:
      CloseUpstream();
      ctx_->routes->Release(route_->name, replica_.id);
      acquired_ = false;
      Fail(504, absl::StrCat("replica ", replica_.id, " did not answer within request_timeout_s"));
      return;
    case Phase::kRelaying:
      AbortAnswer();  // an answer already streaming is cut off
      return;
    case Phase::kClosing:
      Close();
      return;
    case Phase::kClosed:
      return;
  }
}

void ClientConn::OnResume() {
  if (phase_ == Phase::kHead || phase_ == Phase::kBody) {
    ReadRequest();
  } else if (phase_ == Phase::kAwaiting || phase_ == Phase::kRelaying) {
    ReadAnswer();
  }
}

void ClientConn::TrimBuffers() {
  constexpr size_t kKeep = 2 * kScratchBytes;
  if (out_.empty() && out_.capacity() > kKeep) std::string().swap(out_);
  if (in_.capacity() > kKeep && in_.size() < kScratchBytes) std::string(in_).swap(in_);
  if (request_bytes_.capacity() > kKeep) std::string().swap(request_bytes_);
}

double ClientConn::Seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ClientConn::Close() {
  if (phase_ == Phase::kClosed) return;
  if (queued_) ctx_->routes->Unqueue(route_->name);
  queued_ = false;
  if (acquired_) {
    if (answered_) {
      ctx_->routes->Finish(route_->name, replica_.id, status_, Seconds(), retried_);
    } else {
      ctx_->routes->Release(route_->name, replica_.id);
    }
    acquired_ = false;
  }
  CloseUpstream();
  timer_.Cancel();
  resume_.Cancel();
  client_.Close();
  phase_ = Phase::kClosed;
  ctx_->closed(this);
}

}  // namespace torus::serve
