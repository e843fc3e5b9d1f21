#include "torus/core/task_submitter.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "torus/core/args.h"
#include "torus/core/ids.h"
#include "torus/core/value_proto.h"

namespace torus::core {
namespace {
constexpr char kCancelled[] = "the task was cancelled (torus.cancel)";
}  // namespace
TaskSubmitter::TaskSubmitter(Options options, ObjectTable* table, Channels* channels, TaskPipe* pipe,
                             std::function<std::vector<LeaseNode>()> refresh_nodes, BundleFetcher bundles)
    : options_(std::move(options)),
      table_(table),
      channels_(channels),
      pipe_(pipe),
      refresh_nodes_(std::move(refresh_nodes)),
      fetch_bundles_(std::move(bundles)) {
  idle_thread_ = std::thread([this] { IdleLoop(); });
}

TaskSubmitter::~TaskSubmitter() {
  Shutdown();
  if (idle_thread_.joinable()) idle_thread_.join();
}

int64_t TaskSubmitter::SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
int64_t TaskSubmitter::SteadyUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void TaskSubmitter::IdleLoop() {
  mu_.Lock();
  while (!stopping_) {
    idle_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(std::max<int64_t>(options_.lease_idle_ms / 2, 5)));
    if (stopping_) break;
    const int64_t now = SteadyMs();
    std::vector<Lease> idle;
    for (auto& [key, shape] : shapes_) {
      if (!shape.queue.empty()) continue;
      for (auto it = shape.leases.begin(); it != shape.leases.end();) {
        if (it->second.in_flight == 0 && now - it->second.idle_since_ms >= options_.lease_idle_ms) {
          idle.push_back(it->second);
          it = shape.leases.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (idle.empty()) continue;
    mu_.Unlock();
    for (const Lease& l : idle) ReturnLease(l, false);
    mu_.Lock();
  }
  mu_.Unlock();
}

int TaskSubmitter::DepthFor(const Shape& shape, const Task& task) const {
  auto it = shape.task_ms.find(task.spec.function_id());
  if (it == shape.task_ms.end() || it->second >= options_.pipeline_below_ms) return 1;
  // As many as the worker gets through in pipeline_below_ms: the last one queued waits about that long.
  const int fit = static_cast<int>(options_.pipeline_below_ms / std::max(it->second, 0.01));
  return std::clamp(fit, 1, options_.pipeline_depth);
}

void TaskSubmitter::DispatchLocked(const std::string& key, Shape& shape, std::vector<Push>& pushes) {
  // The least busy leases first, so that work spreads over the workers.
  while (!shape.queue.empty()) {
    const int depth = DepthFor(shape, *shape.queue.front());
    Lease* best = nullptr;
    for (auto& [id, lease] : shape.leases) {
      if (lease.in_flight < depth && (best == nullptr || lease.in_flight < best->in_flight)) {
        best = &lease;
      }
    }
    if (best == nullptr) break;
    ++best->in_flight;
    pushes.push_back(Push{.key = key, .lease = *best, .task = shape.queue.front()});
    shape.queue.pop_front();
  }
}

std::shared_ptr<grpc::ClientContext> TaskSubmitter::NewCall() {
  auto ctx = std::make_shared<grpc::ClientContext>();
  channels_->Authorize(*ctx);
  absl::MutexLock lock(&mu_);
  calls_.insert(ctx);
  return ctx;
}

void TaskSubmitter::Done(const std::shared_ptr<grpc::ClientContext>& ctx) {
  absl::MutexLock lock(&mu_);
  calls_.erase(ctx);
  if (calls_.empty()) calls_done_.SignalAll();
}

void TaskSubmitter::SetNodes(std::vector<LeaseNode> nodes) {
  absl::MutexLock lock(&mu_);
  nodes_ = std::move(nodes);
}

void TaskSubmitter::Submit(TaskSpec spec, TaskOptions options) {
  spec.set_job_id(options_.job_id);
  spec.set_owner_address(options_.own_address);
  for (const auto& [k, v] : options.shape.resources) (*spec.mutable_resources())[k] = v;
  for (int i = 1; i <= spec.num_returns(); ++i) table_->AddPending(ReturnObjectId(spec.task_id(), i));
  {
    absl::MutexLock lock(&mu_);
    ++counts_.submitted;
    live_.insert(spec.task_id());
  }
  auto task = std::make_shared<Task>(Task{.spec = std::move(spec), .options = std::move(options)});
  if (options_.on_task) options_.on_task(task->spec, 0, "PENDING", "", 0, "");
  Enqueue(std::move(task));
}

void TaskSubmitter::Enqueue(std::shared_ptr<Task> task) {
  TaskSpec* spec = &task->spec;
  ResolveOwnedArgs(table_, options_.own_address, spec, [this, task] { Queue(task); });
}

void TaskSubmitter::FetchBundles(const std::string& group) {
  auto bundles = fetch_bundles_(group, [this] {
    absl::MutexLock lock(&mu_);
    return stopping_;
  });
  std::vector<std::shared_ptr<Task>> waiting;
  {
    absl::MutexLock lock(&mu_);
    group_bundles_.insert_or_assign(group, bundles);
    waiting.swap(waiting_for_group_[group]);
  }
  for (auto& t : waiting) Queue(t);
}

void TaskSubmitter::Queue(std::shared_ptr<Task> task) {
  bool cancelled = false;
  {
    // Cancelled while it waited for its arguments (or before a retry).
    absl::MutexLock lock(&mu_);
    cancelled = cancelled_.erase(task->spec.task_id()) > 0;
    if (cancelled) ++counts_.failed;
  }
  if (cancelled) {
    FailTask(*task, "cancelled", kCancelled);
    return;
  }
  // A task in a placement group waits until the group is created and its bundles' places are known.
  if (const std::string& group = task->options.shape.placement_group; !group.empty()) {
    absl::MutexLock lock(&mu_);
    if (!stopping_ && !group_bundles_.contains(group)) {
      auto& waiting = waiting_for_group_[group];
      waiting.push_back(task);
      if (waiting.size() == 1) {
        if (!fetch_bundles_) {
          group_bundles_.insert_or_assign(group, absl::FailedPreconditionError("placement groups are not available"));
        } else {
          if (fetchers_.Start([this, group] { FetchBundles(group); })) return;
          group_bundles_.insert_or_assign(group, absl::CancelledError("this worker is stopping"));
        }
      } else {
        return;
      }
      waiting.clear();
    }
  }
  // A shape with nowhere to go is looked at again with the head's current nodes first (they may have joined).
  bool refresh = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = shapes_.find(task->options.shape.Key());
    refresh = !stopping_ && refresh_nodes_ &&
              (it == shapes_.end() ? LeaseCandidates(task->options.shape, nodes_, options_.local_agent, "a task").agents.empty()
                                   : it->second.candidates.empty());
  }
  if (refresh) {
    std::vector<LeaseNode> nodes = refresh_nodes_();
    absl::MutexLock lock(&mu_);
    nodes_ = std::move(nodes);
  }
  std::vector<std::shared_ptr<Task>> failed;
  std::string fail_message;
  std::string fail_format = "unschedulable";
  std::vector<Push> pushes;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      fail_format = "stopping";
      failed.push_back(task);
      fail_message = "the process that submitted this task is shutting down";
    }
    const std::string key = task->options.shape.Key();
    auto [it, fresh] = shapes_.try_emplace(key);
    Shape& shape = it->second;
    if (failed.empty() && (fresh || shape.candidates.empty())) {
      shape.shape = task->options.shape;
      const std::vector<BundleLocation>* bundles = nullptr;
      std::string group_error;
      if (!shape.shape.placement_group.empty()) {
        const auto& known = group_bundles_.at(shape.shape.placement_group);
        if (known.ok()) {
          bundles = &*known;
        } else {
          group_error = std::string(known.status().message());
        }
      }
      Candidates c = LeaseCandidates(shape.shape, nodes_, options_.local_agent, "a task", bundles);
      shape.candidates = std::move(c.agents);
      shape.candidate_bundles = std::move(c.bundles);
      fail_message = group_error.empty() ? std::move(c.unschedulable) : group_error;
    }
    if (!failed.empty()) {
      // stopping
    } else if (shape.candidates.empty()) {
      if (fail_message.empty()) fail_message = "no node can hold this task's resources";
      failed.push_back(task);
      counts_.failed += 1;
    } else {
      shape.queue.push_back(std::move(task));
      DispatchLocked(key, shape, pushes);
      RequestLeasesLocked(key, shape);
    }
  }
  for (const auto& t : failed) FailTask(*t, fail_format, fail_message);
  Send(std::move(pushes));
}

void TaskSubmitter::FailQueueLocked(Shape& shape, const std::string& format, const std::string& message,
                                    std::vector<std::shared_ptr<Task>>& failed) {
  failed.insert(failed.end(), shape.queue.begin(), shape.queue.end());
  counts_.failed += static_cast<int64_t>(shape.queue.size());
  shape.queue.clear();
}

void TaskSubmitter::Send(std::vector<Push> pushes) {
  for (Push& p : pushes) {
    p.task->spec.set_attempt(p.task->attempts);
    if (options_.on_task) {
      options_.on_task(p.task->spec, p.task->attempts, "RUNNING", p.lease.node_id, p.lease.worker_pid, "");
    }
    TaskSpec spec = p.task->spec;
    {
      absl::MutexLock lock(&mu_);
      pushed_[p.task->spec.task_id()] = Pushed{.key = p.key,
                                               .lease_id = p.lease.lease_id,
                                               .worker_address = p.lease.worker_address,
                                               .pushed_us = SteadyUs(),
                                               .position = std::max(1, p.lease.in_flight)};
      // The worker keeps functions by id: their code goes once.
      if (!sent_functions_[p.lease.worker_address].insert(p.task->spec.function_id()).second) {
        spec.clear_function();
      }
    }
    const std::string key = p.key;
    const std::string lease_id = p.lease.lease_id;
    const std::string worker = p.lease.worker_address;
    auto task = p.task;
    pipe_->Push(worker, std::move(spec), [this, key, lease_id, worker, task](const grpc::Status& status,
                                                                          PushTaskReply& reply) {
      if (status.ok() && reply.function_unknown()) {
        // The worker lost the function (a new process at the address): send it again, with its code.
        {
          absl::MutexLock lock(&mu_);
          sent_functions_[worker].erase(task->spec.function_id());
        }
        Lease lease{.lease_id = lease_id, .worker_address = worker};
        Send({Push{.key = key, .lease = lease, .task = task}});
      } else {
        OnPushed(key, lease_id, task, status, reply);
      }
    });
  }
}

void TaskSubmitter::OnPushed(const std::string& key, const std::string& lease_id, std::shared_ptr<Task> task,
                             const grpc::Status& status, const PushTaskReply& reply) {
  bool cancelled = false;
  {
    absl::MutexLock lock(&mu_);
    if (auto p = pushed_.find(task->spec.task_id()); p != pushed_.end()) {
      if (status.ok()) {
        // Its share of the time since it was pushed (the tasks ahead of it took theirs): how long a task takes.
        auto shape = shapes_.find(key);
        const double ms = static_cast<double>(SteadyUs() - p->second.pushed_us) / 1000.0 / p->second.position;
        if (shape != shapes_.end()) {
          auto [avg, first] = shape->second.task_ms.try_emplace(task->spec.function_id(), ms);
          if (!first) avg->second = 0.8 * avg->second + 0.2 * ms;
        }
      }
      pushed_.erase(p);
    }
    cancelled = cancelled_.erase(task->spec.task_id()) > 0;
  }
  const bool interrupted = !status.ok() || (reply.returns_size() > 0 && reply.returns(0).format() == "cancelled");
  if (cancelled && interrupted) {
    // Cancelled while it ran: no retry. Its worker, stopped by force, goes with its lease.
    Lease dead;
    {
      absl::MutexLock lock(&mu_);
      ++counts_.failed;
      auto shape = shapes_.find(key);
      if (!status.ok() && shape != shapes_.end()) {
        if (auto it = shape->second.leases.find(lease_id); it != shape->second.leases.end()) {
          dead = it->second;
          shape->second.leases.erase(it);
        }
      } else if (shape != shapes_.end()) {
        if (auto it = shape->second.leases.find(lease_id); it != shape->second.leases.end() && --it->second.in_flight == 0) {
          it->second.idle_since_ms = SteadyMs();
        }
      }
    }
    if (!dead.lease_id.empty()) ReturnLease(dead, true);
    FailTask(*task, "cancelled", kCancelled);
    std::vector<Push> pushes;
    {
      absl::MutexLock lock(&mu_);
      if (auto it = shapes_.find(key); it != shapes_.end()) {
        DispatchLocked(key, it->second, pushes);
        RequestLeasesLocked(key, it->second);
      }
    }
    Send(std::move(pushes));
    return;
  }
  const bool crashed = !status.ok();
  const bool app_error = !crashed && reply.returns_size() > 0 && reply.returns(0).format() == "error";
  // An application error is retried with retry_exceptions, unless the executor found it of no type in the task's
  // retry_exception_types.
  const bool retry = (crashed || (app_error && task->options.retry_exceptions && !reply.error_not_retryable())) &&
                     (task->options.max_retries < 0 || task->attempts < task->options.max_retries);
  std::vector<Push> pushes;
  Lease dead;
  {
    absl::MutexLock lock(&mu_);
    Shape& shape = shapes_[key];
    auto it = shape.leases.find(lease_id);
    if (it != shape.leases.end()) {
      if (crashed) {
        // The worker is gone (or unusable): give it back to be stopped; the lease ends.
        dead = it->second;
        shape.leases.erase(it);
        sent_functions_.erase(dead.worker_address);
      } else if (--it->second.in_flight == 0) {
        it->second.idle_since_ms = SteadyMs();
      }
    }
  }
  if (!dead.lease_id.empty()) ReturnLease(dead, true);
  if (retry) {
    ++task->attempts;
    if (options_.on_task) {
      options_.on_task(task->spec, task->attempts, "PENDING", "", 0,
                       crashed ? absl::StrCat("retried: its worker died (", status.error_message(), ")")
                               : "retried: it raised an exception");
    }
    {
      absl::MutexLock lock(&mu_);
      ++counts_.retried;
    }
    Queue(task);
  } else if (crashed) {
    {
      absl::MutexLock lock(&mu_);
      ++counts_.failed;
    }
    FailTask(*task, "worker_crashed",
             absl::StrCat("the worker running task ", task->spec.name(), " died (", status.error_message(), ") after ",
                          task->attempts + 1, " attempt", task->attempts == 0 ? "" : "s"));
  } else {
    {
      absl::MutexLock lock(&mu_);
      ++(app_error ? counts_.failed : counts_.finished);
    }
    if (options_.on_task) {
      options_.on_task(task->spec, task->attempts, app_error ? "FAILED" : "FINISHED", "", 0,
                       app_error ? "it raised an exception" : "");
    }
    {
      absl::MutexLock lock(&mu_);
      live_.erase(task->spec.task_id());
    }
    for (int i = 0; i < task->spec.num_returns(); ++i) {
      const ObjectValue& v = reply.returns(std::min(i, reply.returns_size() - 1));
      table_->Put(ReturnObjectId(task->spec.task_id(), static_cast<uint32_t>(i + 1)), FromProto(v));
    }
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = shapes_.find(key);
    if (it != shapes_.end()) {
      DispatchLocked(key, it->second, pushes);
      RequestLeasesLocked(key, it->second);
    }
  }
  Send(std::move(pushes));
}

void TaskSubmitter::CancelAll() {
  std::vector<std::string> live;
  {
    absl::MutexLock lock(&mu_);
    live.assign(live_.begin(), live_.end());
  }
  for (const std::string& id : live) Cancel(id, /*force=*/false, /*recursive=*/true);
}

bool TaskSubmitter::Cancel(const std::string& task_id, bool force, bool recursive) {
  std::shared_ptr<Task> queued;
  Pushed pushed;
  bool running = false;
  Lease kill;
  {
    absl::MutexLock lock(&mu_);
    if (!live_.contains(task_id)) return false;
    auto take = [&](std::deque<std::shared_ptr<Task>>& q) {
      for (auto it = q.begin(); it != q.end(); ++it) {
        if ((*it)->spec.task_id() == task_id) {
          queued = *it;
          q.erase(it);
          return;
        }
      }
    };
    for (auto& [key, shape] : shapes_) {
      if (!queued) take(shape.queue);
    }
    for (auto& [group, tasks] : waiting_for_group_) {
      for (auto it = tasks.begin(); !queued && it != tasks.end(); ++it) {
        if ((*it)->spec.task_id() == task_id) {
          queued = *it;
          tasks.erase(it);
          break;
        }
      }
    }
    if (queued) {
      ++counts_.failed;
    } else if (auto p = pushed_.find(task_id); p != pushed_.end()) {
      running = true;
      pushed = p->second;
      cancelled_.insert(task_id);
      auto shape = shapes_.find(pushed.key);
      if (force && shape != shapes_.end()) {
        if (auto l = shape->second.leases.find(pushed.lease_id); l != shape->second.leases.end()) {
          kill = l->second;
          shape->second.leases.erase(l);
          sent_functions_.erase(kill.worker_address);
        }
      }
    } else {
      cancelled_.insert(task_id);  // waiting for its arguments: Queue fails it
    }
  }
  if (queued) {
    FailTask(*queued, "cancelled", kCancelled);
  } else if (running && force) {
    if (!kill.lease_id.empty()) ReturnLease(kill, true);
  } else if (running) {
    auto ctx = NewCall();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto request = std::make_shared<CancelTaskRequest>();
    request->set_task_id(task_id);
    request->set_recursive(recursive);
    auto reply = std::make_shared<CancelTaskReply>();
    channels_->Worker(pushed.worker_address)
        ->async()
        ->CancelTask(ctx.get(), request.get(), reply.get(), [this, ctx, request, reply](grpc::Status) { Done(ctx); });
  }
  return true;
}

void TaskSubmitter::FailTask(const Task& task, const std::string& format, const std::string& message) {
  if (options_.on_task) options_.on_task(task.spec, task.attempts, "FAILED", "", 0, message);
  {
    absl::MutexLock lock(&mu_);
    live_.erase(task.spec.task_id());
  }
  for (int i = 1; i <= task.spec.num_returns(); ++i) {
    table_->Put(ReturnObjectId(task.spec.task_id(), static_cast<uint32_t>(i)),
                Value{.data = message, .format = format});
  }
}

void TaskSubmitter::Shutdown() {
  std::vector<Lease> leases;
  std::vector<std::shared_ptr<Task>> failed;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    idle_cv_.SignalAll();
    for (auto& [key, shape] : shapes_) {
      for (auto& [id, lease] : shape.leases) leases.push_back(lease);
      shape.leases.clear();
      FailQueueLocked(shape, "stopping", "", failed);
    }
    for (const auto& ctx : calls_) ctx->TryCancel();
  }
  for (const auto& t : failed) FailTask(*t, "stopping", "the process that submitted this task is shutting down");
  for (const Lease& lease : leases) {
    grpc::ClientContext ctx;
    channels_->Authorize(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    ReturnLeaseRequest request;
    request.set_lease_id(lease.lease_id);
    request.set_kill_worker(true);
    ReturnLeaseReply reply;
    channels_->Leases(lease.agent)->ReturnWorkerLease(&ctx, request, &reply);
  }
  fetchers_.Join();  // they ask the head every 2 s at most and see the stop by then
  absl::MutexLock lock(&mu_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (!calls_.empty()) {
    if (calls_done_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
  }
}

TaskSubmitter::Counts TaskSubmitter::counts() const {
  absl::MutexLock lock(&mu_);
  return counts_;
}

}  // namespace torus::core
