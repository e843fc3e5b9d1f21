#include "torus/core/task_events.h"

#include "torus/core/ids.h"

namespace torus::core {
namespace {

constexpr size_t kMaxBatch = 5'000;

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

TaskEvents::TaskEvents(Channels* channels, std::string head_address, std::string owner_address,
                       std::chrono::milliseconds period, size_t max_pending)
    : channels_(channels),
      head_address_(std::move(head_address)),
      owner_address_(std::move(owner_address)),
      period_(period),
      max_pending_(max_pending),
      stub_(rpc::HeadService::NewStub(channels_->Head(head_address_))),
      thread_([this] { Loop(); }) {}

TaskEvents::~TaskEvents() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
}

TaskEventSink TaskEvents::Sink() {
  return [this](const TaskSpec& spec, int attempt, const char* state, const std::string& node_id, int64_t pid,
                const std::string& error) {
    rpc::TaskEvent e;
    e.set_task_id(Hex(spec.task_id()));
    e.set_name(spec.name());
    e.set_state(state);
    e.set_job_id(spec.job_id());
    if (!spec.actor_id().empty()) e.set_actor_id(Hex(spec.actor_id()));
    e.set_node_id(node_id);
    e.set_pid(pid);
    e.set_attempt(attempt);
    e.set_error(error);
    e.set_time_ms(WallMs());
    Add(std::move(e));
  };
}

void TaskEvents::Add(rpc::TaskEvent event) {
  absl::MutexLock lock(&mu_);
  if (pending_.size() >= max_pending_) pending_.pop_front();  // the oldest goes
  pending_.push_back(std::move(event));
}

void TaskEvents::SendBatch(std::deque<rpc::TaskEvent> batch, std::chrono::milliseconds deadline) {
  for (size_t start = 0; start < batch.size(); start += kMaxBatch) {
    rpc::ReportTasksRequest request;
    request.set_owner_address(owner_address_);
    for (size_t i = start; i < std::min(batch.size(), start + kMaxBatch); ++i) {
      *request.add_events() = std::move(batch[i]);
    }
    grpc::ClientContext ctx;
    channels_->Authorize(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    rpc::ReportTasksReply reply;
    (void)stub_->ReportTasks(&ctx, request, &reply);  // best effort: a batch the head missed is gone
  }
}

void TaskEvents::Loop() {
  mu_.Lock();
  while (true) {
    const auto deadline = std::chrono::steady_clock::now() + period_;
    while (!stop_) {
      if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
    }
    std::deque<rpc::TaskEvent> batch;
    batch.swap(pending_);
    const bool stopping = stop_;
    mu_.Unlock();
    // The last batch, as the process stops, does not hold up its exit for long.
    if (!batch.empty()) SendBatch(std::move(batch), stopping ? std::chrono::seconds(1) : std::chrono::seconds(5));
    mu_.Lock();
    if (stopping) break;
  }
  mu_.Unlock();
}

}  // namespace torus::core
