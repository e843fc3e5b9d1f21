#include "torus/core/executor.h"

#include <set>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "torus/core/ids.h"
#include "torus/core/value_proto.h"

namespace torus::core {

absl::Status Executor::Push(const std::vector<const TaskSpec*>& tasks, const std::shared_ptr<TaskAnswers>& answers) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return absl::UnavailableError("this worker is stopping");
  std::set<std::string_view> ids;
  for (const TaskSpec* spec : tasks) {
    if (running_.contains(spec->task_id()) || !ids.insert(spec->task_id()).second) {
      return absl::AlreadyExistsError(absl::StrCat("task ", Hex(spec->task_id()), " is already running here"));
    }
  }
  for (size_t i = 0; i < tasks.size(); ++i) {
    const TaskSpec& spec = *tasks[i];
    running_[spec.task_id()] =
        Running{.answers = answers, .index = static_cast<int>(i), .owner_address = spec.owner_address()};
    if (spec.actor_id().empty() || spec.actor_creation() || spec.sequence() <= 0) {
      pending_.push_back(Execution{.spec = spec});
      continue;
    }
    CallerOrder& order = callers_[spec.caller_id()];
    order.early.emplace(spec.sequence(), Execution{.spec = spec});
    for (auto it = order.early.begin(); it != order.early.end() && it->first <= order.next;
         it = order.early.erase(it)) {
      if (it->first == order.next) ++order.next;
      pending_.push_back(std::move(it->second));
    }
  }
  return absl::OkStatus();
}

std::optional<Execution> Executor::Next(int64_t timeout_ms) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !pending_.empty() || stopped_; };
  if (timeout_ms < 0) {
    mu_.Await(absl::Condition(&ready));
  } else {
    mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(timeout_ms));
  }
  if (pending_.empty() || stopped_) return std::nullopt;
  Execution e = std::move(pending_.front());
  pending_.pop_front();
  task_thread_.store(std::this_thread::get_id());
  if (!e.spec.actor_id().empty()) hosts_actor_.store(true);
  return e;
}

void Executor::Finish(const std::string& task_id, std::vector<Value> returns, bool function_unknown,
                      bool retryable) {
  Running running;
  {
    absl::MutexLock lock(&mu_);
    auto it = running_.find(task_id);
    if (it == running_.end()) return;
    running = std::move(it->second);
    running_.erase(it);
  }
  if (before_answer_) before_answer_(returns, running.owner_address);
  PushTaskReply reply;
  reply.set_function_unknown(function_unknown);
  reply.set_error_not_retryable(!retryable);
  for (Value& v : returns) MoveToProto(std::move(v), reply.add_returns());
  running.answers->Answer(running.index, std::move(reply));
}

std::optional<std::string> Executor::OwnerOf(const std::string& task_id) const {
  absl::MutexLock lock(&mu_);
  auto it = running_.find(task_id);
  if (it == running_.end()) return std::nullopt;
  return it->second.owner_address;
}

Executor::Cancelled Executor::Cancel(const std::string& task_id) {
  Running dropped;
  {
    absl::MutexLock lock(&mu_);
    auto running = running_.find(task_id);
    if (running == running_.end()) return Cancelled::kNotHere;
    auto it = pending_.begin();
    while (it != pending_.end() && it->spec.task_id() != task_id) ++it;
    if (it == pending_.end()) return Cancelled::kRunning;
    pending_.erase(it);
    dropped = std::move(running->second);
    running_.erase(running);
  }
  PushTaskReply reply;
  reply.add_returns()->set_format("cancelled");
  dropped.answers->Answer(dropped.index, std::move(reply));
  return Cancelled::kDropped;
}

void Executor::Interrupt(const std::string& task_id) {
  std::function<void(const std::string&)> handler;
  {
    absl::MutexLock lock(&mu_);
    handler = cancel_handler_;
  }
  if (handler) handler(task_id);
}

void Executor::SetCancelHandler(std::function<void(const std::string&)> handler) {
  absl::MutexLock lock(&mu_);
  cancel_handler_ = std::move(handler);
}

void Executor::Stop() {
  std::map<std::string, Running> unanswered;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    unanswered.swap(running_);
  }
  for (auto& [id, r] : unanswered) {
    r.answers->Abort(grpc::Status(grpc::StatusCode::UNAVAILABLE, "this worker is stopping"));
  }
}

bool Executor::Stopped() const {
  absl::MutexLock lock(&mu_);
  return stopped_;
}

}  // namespace torus::core
