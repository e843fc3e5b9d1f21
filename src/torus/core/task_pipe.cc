#include "torus/core/task_pipe.h"

#include <algorithm>
#include <utility>

#include "absl/time/time.h"

namespace torus::core {

// One PushTasks call: reads the worker's answers as they come and hands each to its task's callback; when the call
// ends, the tasks it did not answer get its error.
class TaskPipe::Call final : public grpc::ClientReadReactor<PushTasksReply> {
 public:
  Call(TaskPipe* pipe, std::string address, std::vector<Item> items)
      : pipe_(pipe), address_(std::move(address)), items_(std::move(items)), answered_(items_.size(), false) {
    pipe_->channels_->Authorize(ctx_);
    for (Item& item : items_) *request_.add_tasks() = std::move(item.spec);
  }
  void Start(CoreWorkerService::Stub* stub) {
    if (items_.size() == 1) {
      // One task: a unary call, which costs fewer thread wake-ups on both sides than a stream.
      *unary_request_.mutable_task() = std::move(*request_.mutable_tasks(0));
      stub->async()->PushTask(&ctx_, &unary_request_, &unary_reply_, [this](grpc::Status status) {
        if (status.ok()) {
          answered_[0] = true;
          items_[0].done(status, unary_reply_);
        }
        OnDone(status);
      });
      return;
    }
    stub->async()->PushTasks(&ctx_, &request_, this);
    StartRead(&reply_);
    StartCall();
  }
  void Cancel() { ctx_.TryCancel(); }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the call ended: OnDone follows
    pipe_->Progress(address_);
    for (PushTasksReply::Answer& a : *reply_.mutable_answers()) {
      const int i = a.index();
      if (i < 0 || static_cast<size_t>(i) >= items_.size() || answered_[i]) continue;
      answered_[i] = true;
      items_[i].done(grpc::Status::OK, *a.mutable_reply());
      items_[i].done = nullptr;
    }
    reply_.Clear();
    StartRead(&reply_);
  }
  void OnDone(const grpc::Status& status) override {
    const grpc::Status error =
        status.ok() ? grpc::Status(grpc::StatusCode::INTERNAL, "the worker ended the call with tasks unanswered")
                    : status;
    for (size_t i = 0; i < items_.size(); ++i) {
      if (answered_[i]) continue;
      PushTaskReply empty;
      items_[i].done(error, empty);
    }
    if (pipe_->Ended(address_, this)) delete this;
  }
  // While Shutdown cancels the call: it deletes the call if the call ended meanwhile. Guarded by the pipe's mu_.
  int pins = 0;
  bool ended = false;

 private:
  TaskPipe* pipe_;
  const std::string address_;
  std::vector<Item> items_;  // their specs moved into request_
  std::vector<bool> answered_;
  grpc::ClientContext ctx_;
  PushTasksRequest request_;
  PushTasksReply reply_;
  PushTaskRequest unary_request_;
  PushTaskReply unary_reply_;
};

namespace {
int64_t PipeClockUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

TaskPipe::TaskPipe(Channels* channels, Options options) : channels_(channels), options_(options) {
  flusher_ = std::thread([this] { FlushLoop(); });
}

TaskPipe::~TaskPipe() {
  Shutdown(std::chrono::milliseconds(0));
  flusher_.join();
  absl::MutexLock lock(&mu_);
  while (!calls_.empty()) ended_.Wait(&mu_);  // cancelled calls end promptly
}

void TaskPipe::Push(const std::string& address, TaskSpec spec, Callback done) {
  std::vector<Item> batch;
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      Line& line = lines_[address];
      line.waiting.push_back(Item{.spec = std::move(spec), .done = std::move(done)});
      const int64_t now = PipeClockUs();
      const bool stalled = now - line.progress_us >= options_.stall.count() * 1000;
      if (line.calls >= options_.max_calls && !stalled) {
        if (flusher_idle_) flush_.Signal();  // to watch this line for a stall
        return;
      }
      ++line.calls;
      line.progress_us = now;
      batch = NextBatchLocked(line);
    }
  }
  if (batch.empty()) {
    PushTaskReply empty;
    done(grpc::Status(grpc::StatusCode::CANCELLED, "this process is shutting down"), empty);
    return;
  }
  Start(address, std::move(batch));
}

std::vector<TaskPipe::Item> TaskPipe::NextBatchLocked(Line& line) {
  std::vector<Item> batch;
  size_t bytes = 0;
  while (!line.waiting.empty() && batch.size() < static_cast<size_t>(options_.max_batch)) {
    const size_t size = line.waiting.front().spec.ByteSizeLong();
    if (!batch.empty() && bytes + size > options_.max_batch_bytes) break;
    bytes += size;
    batch.push_back(std::move(line.waiting.front()));
    line.waiting.pop_front();
  }
  return batch;
}

void TaskPipe::Start(const std::string& address, std::vector<Item> items) {
  const size_t n = items.size();
  auto* call = new Call(this, address, std::move(items));
  {
    absl::MutexLock lock(&mu_);
    calls_.insert(call);
    ++counts_.calls;
    counts_.tasks += static_cast<int64_t>(n);
    if (stopping_) call->Cancel();
  }
  call->Start(channels_->Worker(address));
}

bool TaskPipe::Ended(const std::string& address, Call* call) {
  std::vector<Item> batch;
  bool unpinned = false;
  {
    absl::MutexLock lock(&mu_);
    calls_.erase(call);
    call->ended = true;
    unpinned = call->pins == 0;
    auto it = lines_.find(address);
    if (it != lines_.end()) {
      Line& line = it->second;
      if (!stopping_ && !line.waiting.empty()) {
        batch = NextBatchLocked(line);  // the call's slot goes to the next batch
        line.progress_us = PipeClockUs();
      } else if (--line.calls == 0 && line.waiting.empty()) {
        lines_.erase(it);
      }
    }
    ended_.SignalAll();
  }
  if (!batch.empty()) Start(address, std::move(batch));
  return unpinned;
}

void TaskPipe::Progress(const std::string& address) {
  absl::MutexLock lock(&mu_);
  if (auto it = lines_.find(address); it != lines_.end()) it->second.progress_us = PipeClockUs();
}

void TaskPipe::FlushLoop() {
  const int64_t stall_us = options_.stall.count() * 1000;
  mu_.Lock();
  while (!stopping_) {
    std::vector<std::pair<std::string, std::vector<Item>>> starts;
    int64_t next_us = -1;  // the earliest time a waiting line stalls
    const int64_t now = PipeClockUs();
    for (auto& [address, line] : lines_) {
      if (line.waiting.empty()) continue;
      if (const int64_t due = line.progress_us + stall_us; now < due) {
        next_us = next_us < 0 ? due : std::min(next_us, due);
        continue;
      }
      ++line.calls;
      line.progress_us = now;
      starts.emplace_back(address, NextBatchLocked(line));
    }
    if (!starts.empty()) {
      mu_.Unlock();
      for (auto& [address, batch] : starts) Start(address, std::move(batch));
      mu_.Lock();
    } else if (next_us < 0) {
      flusher_idle_ = true;
      flush_.Wait(&mu_);
      flusher_idle_ = false;
    } else {
      flush_.WaitWithTimeout(&mu_, absl::Microseconds(next_us - now));
    }
  }
  mu_.Unlock();
}

void TaskPipe::Shutdown(std::chrono::milliseconds wait) {
  std::vector<Item> failed;
  std::vector<Call*> cancel;
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      stopping_ = true;
      flush_.SignalAll();
      for (auto& [address, line] : lines_) {
        for (Item& item : line.waiting) failed.push_back(std::move(item));
        line.waiting.clear();
      }
    }
    for (Call* call : calls_) {
      ++call->pins;
      cancel.push_back(call);
    }
  }
  // Cancelled outside the lock: a call may end inside TryCancel.
  for (Call* call : cancel) call->Cancel();
  {
    absl::MutexLock lock(&mu_);
    for (Call* call : cancel) {
      if (--call->pins == 0 && call->ended) delete call;
    }
  }
  for (Item& item : failed) {
    PushTaskReply empty;
    item.done(grpc::Status(grpc::StatusCode::CANCELLED, "this process is shutting down"), empty);
  }
  absl::MutexLock lock(&mu_);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (!calls_.empty()) {
    if (ended_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
  }
}

TaskPipe::Counts TaskPipe::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

}  // namespace torus::core
