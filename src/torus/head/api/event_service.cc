#include "torus/head/api/event_service.h"

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "torus/rpc/server_auth.h"
#include "torus/rpc/convert.h"

namespace torus::head {
namespace {

constexpr int kMaxWatches = 32;
constexpr absl::Duration kCancelCheck = absl::Seconds(1);  // how soon a watch notices its client is gone

grpc::Status WatchStatus(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kCancelled) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the head is stopping");
  return rpc::ToGrpc(s);
}

class WatchReactor final : public grpc::ServerWriteReactor<rpc::Event> {
 public:
  // A watch refused at once.
  explicit WatchReactor(const grpc::Status& refused) { Finish(refused); }

  WatchReactor(const EventLog* log, uint64_t cursor, EventFilter filter, std::shared_ptr<std::atomic<int>> open)
      : log_(log), cursor_(cursor), filter_(std::move(filter)), open_(std::move(open)) {
    thread_ = std::thread([this] { Loop(); });
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    write_ok_ = ok;
  }
  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }
  void OnDone() override {
    if (thread_.joinable()) {
      // gRPC may run this on the watch's own thread, right after its Finish.
      if (thread_.get_id() == std::this_thread::get_id()) {
        thread_.detach();
      } else {
        thread_.join();
      }
    }
    if (open_) open_->fetch_sub(1);
    delete this;
  }

 private:
  // Sends one message and waits until it is out; false when the call is over.
  bool Write(const rpc::Event& event) {
    {
      absl::MutexLock lock(&mu_);
      if (cancelled_) return false;
      message_ = event;
      writing_ = true;
    }
    StartWrite(&message_);
    absl::MutexLock lock(&mu_);
    auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !writing_ || cancelled_; };
    mu_.Await(absl::Condition(&settled));
    return write_ok_ && !cancelled_;
  }

  bool Cancelled() {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }

  rpc::Event Progress() const {
    rpc::Event progress;
    progress.set_epoch(log_->epoch());
    progress.set_revision(cursor_);
    progress.set_progress(true);
    return progress;
  }

  void Loop() {
    absl::Time last_sent = absl::Now();
    bool open = Write(Progress());  // first: where the watch starts
    while (open && !Cancelled()) {
      auto batch = log_->Wait(cursor_, filter_, absl::Now() + kCancelCheck);
      if (!batch.ok()) {
        Finish(WatchStatus(batch.status()));  // the last use of `this`: OnDone may delete it at once
        return;
      }
      cursor_ = batch->revision;
      if (batch->events.empty()) {
        if (absl::Now() - last_sent < kEventProgressInterval) continue;
        open = Write(Progress());
        last_sent = absl::Now();
        continue;
      }
      for (const Event& e : batch->events) {
        rpc::Event out;
        ToProto(e, log_->epoch(), &out);
        if (!(open = Write(out))) break;
      }
      last_sent = absl::Now();
    }
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the watch was cancelled"));
  }

  const EventLog* log_ = nullptr;
  uint64_t cursor_ = 0;
  const EventFilter filter_;
  std::shared_ptr<std::atomic<int>> open_;
  std::thread thread_;
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool write_ok_ ABSL_GUARDED_BY(mu_) = true;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  rpc::Event message_;  // the message being written
};

}  // namespace

void ToProto(const Event& e, uint64_t epoch, rpc::Event* out) {
  out->set_epoch(epoch);
  out->set_revision(e.revision);
  out->set_kind(e.kind);
  out->set_id(e.id);
  out->set_type(e.type);
  out->set_status(e.status);
  out->set_message(e.message);
  if (e.owner.kind != OwnerKind::kNone) {
    out->set_owner_kind(e.owner.kind == OwnerKind::kJob ? "job" : "run");
    out->set_owner(e.owner.id);
  }
  out->set_attempt(e.attempt);
  out->set_rank(e.rank);
  out->set_node(e.node);
  out->set_step(e.step);
  if (e.exit) {
    rpc::WorkerExitView* x = out->mutable_exit();
    x->set_exit_code(e.exit->exit_code);
    x->set_signal(e.exit->signal);
    x->set_lost(e.exit->lost);
    x->set_start_failed(e.exit->start_failed);
  }
  out->set_time_ms(e.wall_ms);
}

EventServiceImpl::EventServiceImpl(const EventLog* events, std::string token)
    : events_(events), token_(std::move(token)) {}

grpc::ServerWriteReactor<rpc::Event>* EventServiceImpl::Watch(grpc::CallbackServerContext* ctx,
                                                              const rpc::WatchRequest* request) {
  if (grpc::Status auth = rpc::CheckToken(ctx, token_); !auth.ok()) return new WatchReactor(auth);
  if (request->epoch() != 0 && request->epoch() != events_->epoch()) {
    return new WatchReactor(grpc::Status(
        grpc::StatusCode::OUT_OF_RANGE,
        absl::StrCat("the head has restarted since epoch ", request->epoch(), " (now epoch ", events_->epoch(),
                     "); read the objects again and watch from revision ", events_->revision())));
  }
  EventFilter filter;
  for (const std::string& kind : request->kinds()) {
    if (!IsEventKind(kind)) {
      return new WatchReactor(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("kinds: unknown kind \"", kind, "\"; use node, group, job, run, worker, package, actor or service")));
    }
    filter.kinds.insert(kind);
  }
  filter.ids.insert(request->ids().begin(), request->ids().end());
  if (open_->fetch_add(1) >= kMaxWatches) {
    open_->fetch_sub(1);
    return new WatchReactor(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                         absl::StrCat("too many watches open (at most ", kMaxWatches, ")")));
  }
  const uint64_t since = request->has_since() ? request->since() : events_->revision();
  return new WatchReactor(events_, since, std::move(filter), open_);
}

}  // namespace torus::head
