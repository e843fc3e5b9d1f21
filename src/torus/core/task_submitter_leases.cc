// TaskSubmitter's leases: how many to ask for and where (lease_policy.h), the agents' answers, and returns.
#include "absl/strings/str_cat.h"
#include "torus/core/task_submitter.h"

namespace torus::core {

void TaskSubmitter::RequestLeasesLocked(const std::string& key, Shape& shape) {
  if (shape.candidates.empty()) return;
  // Tasks the held leases will take as they finish do not need new leases.
  LeaseDemand demand{.queued = static_cast<int>(shape.queue.size()),
                     .held = static_cast<int>(shape.leases.size()),
                     .requested = shape.lease_requests,
                     .max_requests = options_.max_lease_requests,
                     .grant_ms = shape.grant_ms};
  const int depth = shape.queue.empty() ? 1 : DepthFor(shape, *shape.queue.front());
  for (const auto& [id, lease] : shape.leases) demand.spare += std::max(0, depth - lease.in_flight);
  if (!shape.queue.empty()) {
    if (auto it = shape.task_ms.find(shape.queue.front()->spec.function_id()); it != shape.task_ms.end()) {
      demand.task_ms = it->second;
    }
  }
  int requests = LeasesToRequest(demand);
  if (requests == 0) return;

  // Each candidate's room for the shape (its node's totals; 0 while it said it was busy) and what this shape takes
  // there already.
  std::map<std::string, const LeaseNode*> node_of;
  for (const LeaseNode& n : nodes_) node_of[n.agent_address] = &n;
  const int64_t now = SteadyMs();
  std::vector<int64_t> capacity(shape.candidates.size(), -1);
  std::vector<int> taken(shape.candidates.size(), 0);
  std::map<std::string, int> held_at;
  for (const auto& [id, lease] : shape.leases) ++held_at[lease.agent];
  bool bundles = false;
  for (size_t i = 0; i < shape.candidates.size(); ++i) {
    const std::string& agent = shape.candidates[i];
    bundles = bundles || shape.candidate_bundles[i] >= 0;
    auto busy = shape.busy_until_ms.find(agent);
    if (busy != shape.busy_until_ms.end() && busy->second > now) {
      capacity[i] = 0;
    } else if (auto n = node_of.find(agent); n != node_of.end() && shape.candidate_bundles[i] < 0) {
      capacity[i] = WorkersFitting(shape.shape.resources, n->second->total);
    }
    taken[i] = held_at[agent] + shape.requests_at[agent];
  }
  const bool take_turns = bundles || shape.shape.strategy == "SPREAD";

  while (requests-- > 0) {
    const size_t at = NextCandidate(capacity, taken, take_turns, shape.next_candidate);
    const std::string agent = shape.candidates[at];
    const int bundle = shape.candidate_bundles[at];
    ++taken[at];
    // A request to an agent that may be full waits there only briefly while another candidate has room.
    bool elsewhere = false;
    for (size_t i = 0; i < capacity.size() && !take_turns; ++i) {
      elsewhere = elsewhere || (i != at && capacity[i] != 0 && (capacity[i] < 0 || taken[i] < capacity[i]));
    }
    ++shape.lease_requests;
    ++shape.requests_at[agent];
    auto ctx = std::make_shared<grpc::ClientContext>();
    channels_->Authorize(*ctx);
    calls_.insert(ctx);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(options_.lease_wait_ms + 90'000));
    auto request = std::make_shared<LeaseRequest>();
    request->set_job_id(options_.job_id);
    for (const auto& [k, v] : shape.shape.resources) (*request->mutable_resources())[k] = v;
    for (const auto& [k, v] : shape.shape.env) (*request->mutable_env())[k] = v;
    request->set_working_dir(shape.shape.working_dir);
    request->set_holder_pid(options_.holder_pid);
    request->set_holder_boot_id(options_.holder_boot_id);
    request->set_wait_ms(elsewhere ? std::min<int64_t>(kBusyAgentWaitMs, options_.lease_wait_ms)
                                   : options_.lease_wait_ms);
    if (bundle >= 0) {
      const auto& known = group_bundles_.at(shape.shape.placement_group);
      const BundleLocation* where = known.ok() ? FindBundle(*known, bundle) : nullptr;
      request->set_group_id(where ? where->ledger_group : shape.shape.placement_group);
      request->set_bundle_index(where ? where->ledger_index : bundle);
    }
    auto reply = std::make_shared<LeaseReply>();
    channels_->Leases(agent)->async()->RequestWorkerLease(
        ctx.get(), request.get(), reply.get(),
        [this, key, agent, bundle, ctx, request, reply, sent_ms = now](grpc::Status status) {
          OnLease(key, agent, bundle, sent_ms, status, *reply);
          Done(ctx);
        });
  }
}

void TaskSubmitter::OnLease(const std::string& key, const std::string& agent, int bundle, int64_t sent_ms,
                            const grpc::Status& status, const LeaseReply& reply) {
  std::vector<Push> pushes;
  std::vector<std::shared_ptr<Task>> failed;
  std::string format, message;
  {
    absl::MutexLock lock(&mu_);
    Shape& shape = shapes_[key];
    --shape.lease_requests;
    if (auto at = shape.requests_at.find(agent); at != shape.requests_at.end() && --at->second <= 0) {
      shape.requests_at.erase(at);
    }
    if (stopping_) {
      if (status.ok()) {
        format = "stopping";
      } else {
        return;
      }
    } else if (status.ok()) {
      ++counts_.leases_granted;
      const double waited = static_cast<double>(SteadyMs() - sent_ms);
      shape.grant_ms = shape.grant_ms == 0 ? waited : 0.8 * shape.grant_ms + 0.2 * waited;
      shape.busy_until_ms.erase(agent);
      shape.leases[reply.lease_id()] = Lease{.lease_id = reply.lease_id(),
                                             .agent = agent,
                                             .worker_address = reply.worker_address(),
                                             .node_id = reply.node_id(),
                                             .worker_pid = reply.worker_pid(),
                                             .idle_since_ms = SteadyMs()};
      DispatchLocked(key, shape, pushes);
      RequestLeasesLocked(key, shape);  // a grant opens the window for more while tasks wait
    } else if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED ||
               status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      // Busy: ask again while tasks wait (another agent first, for a while), and say why they wait (once per new
      // reason).
      shape.busy_until_ms[agent] = SteadyMs() + kBusyAgentMs;
      const std::string reason = absl::StrCat("waiting for a worker: ", agent, " said: ", status.error_message());
      if (options_.on_task && reason != shape.waiting_reason) {
        shape.waiting_reason = reason;
        for (const auto& t : shape.queue) options_.on_task(t->spec, t->attempts, "PENDING", "", 0, reason);
      }
      RequestLeasesLocked(key, shape);
      return;
    } else if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
               (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
                status.error_message().find("task worker") == std::string::npos)) {
      // This node cannot hold the shape, or its agent is gone: the others may.
      for (size_t i = 0; i < shape.candidates.size(); ++i) {
        if (shape.candidates[i] == agent && shape.candidate_bundles[i] == bundle) {
          shape.candidates.erase(shape.candidates.begin() + static_cast<long>(i));
          shape.candidate_bundles.erase(shape.candidate_bundles.begin() + static_cast<long>(i));
          break;
        }
      }
      if (shape.candidates.empty()) {
        format = "unschedulable";
        message = absl::StrCat("no node could lease a worker for ", FormatShape(shape.shape.resources),
                               "; the last one (", agent, ") said: ", status.error_message());
        FailQueueLocked(shape, format, message, failed);
      } else {
        RequestLeasesLocked(key, shape);
      }
    } else {
      // The worker could not start (its output says why), or the request was refused: the tasks cannot run.
      format = "worker_crashed";
      message = absl::StrCat("could not lease a worker on ", agent, ": ", status.error_message());
      FailQueueLocked(shape, format, message, failed);
    }
  }
  for (const auto& t : failed) FailTask(*t, format, message);
  if (status.ok() && format != "stopping" && options_.on_worker) {
    options_.on_worker(agent, reply.worker_id(), reply.worker_pid(), reply.node_id());
  }
  if (format == "stopping") {
    ReturnLease(Lease{.lease_id = reply.lease_id(), .agent = agent}, true);
  }
  Send(std::move(pushes));
}

void TaskSubmitter::ReturnLease(const Lease& lease, bool kill_worker) {
  auto ctx = NewCall();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto request = std::make_shared<ReturnLeaseRequest>();
  request->set_lease_id(lease.lease_id);
  request->set_kill_worker(kill_worker);
  auto reply = std::make_shared<ReturnLeaseReply>();
  channels_->Leases(lease.agent)
      ->async()
      ->ReturnWorkerLease(ctx.get(), request.get(), reply.get(),
                          [this, ctx, request, reply](grpc::Status) { Done(ctx); });
}

}  // namespace torus::core
