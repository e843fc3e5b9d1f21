#include "torus/node/exit_reporter.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"
#include "torus/head.grpc.pb.h"
#include "torus/rpc/auth.h"
#include "torus/rpc/convert.h"

namespace torus::node {

ReportOutcome ClassifyReportReply(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return ReportOutcome::kDelivered;
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
      return ReportOutcome::kRejected;
    default:
      return ReportOutcome::kRetry;
  }
}

ExitReporter::ExitReporter(SendFn send, ExitReporterOptions options)
    : send_(std::move(send)), options_(options) {
  sender_ = std::thread([this] { SenderLoop(); });
}

ExitReporter::~ExitReporter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (!queue_.empty()) spdlog::warn("{} worker exit reports not delivered to the head", queue_.size());
  }
  cv_.SignalAll();
  sender_.join();
}

void ExitReporter::Report(const WorkerExit& exit) {
  {
    absl::MutexLock lock(&mu_);
    if (queue_.size() >= std::max<size_t>(options_.max_queued, 1)) {
      // Keep the reports in flight; drop the oldest waiting one.
      auto victim = queue_.begin() + static_cast<std::ptrdiff_t>(in_flight_);
      if (victim != queue_.end()) {
        spdlog::warn("exit report queue full: dropped the report of worker {}", victim->worker_id);
        queue_.erase(victim);
      }
    }
    queue_.push_back(exit);
  }
  cv_.SignalAll();
}

bool ExitReporter::WaitIdle(std::chrono::milliseconds timeout) {
  absl::MutexLock lock(&mu_);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!(queue_.empty() && in_flight_ == 0)) {
    if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) {
      return queue_.empty() && in_flight_ == 0;  // timed out
    }
  }
  return true;
}

size_t ExitReporter::Pending() const {
  absl::MutexLock lock(&mu_);
  return queue_.size();
}

void ExitReporter::SenderLoop() {
  int64_t backoff_ms = options_.initial_backoff_ms;
  std::string last_error;
  absl::MutexLock lock(&mu_);
  while (true) {
    while (!stopping_ && queue_.empty()) cv_.Wait(&mu_);
    if (stopping_) return;
    in_flight_ = std::min(queue_.size(), std::max<size_t>(options_.max_batch, 1));
    const std::vector<WorkerExit> batch(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(in_flight_));
    mu_.Unlock();
    const std::vector<absl::Status> answers = send_(batch);
    mu_.Lock();
    in_flight_ = 0;
    // The reports the head took (or refused for good) leave the queue, in order, up to the first it did not take.
    size_t taken = 0;
    absl::Status retry = absl::UnavailableError("the head did not answer for this report");
    for (; taken < batch.size(); ++taken) {
      const absl::Status status = taken < answers.size() ? answers[taken] : retry;
      const ReportOutcome outcome = ClassifyReportReply(status);
      if (outcome == ReportOutcome::kRetry) {
        retry = status;
        break;
      }
      if (outcome == ReportOutcome::kRejected) {
        if (status.code() == absl::StatusCode::kUnimplemented) {
          spdlog::info("head does not track workers: exit of worker {} not reported", batch[taken].worker_id);
        } else {
          spdlog::warn("head refused the exit report of worker {} ({}: {}); dropped", batch[taken].worker_id,
                       absl::StatusCodeToString(status.code()), std::string(status.message()));
        }
      }
    }
    // A report dropped from a full queue meanwhile was one waiting behind the batch, never one of it.
    queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(taken));
    cv_.SignalAll();
    if (taken < batch.size()) {
      std::string error = absl::StrCat(absl::StatusCodeToString(retry.code()), ": ", retry.message());
      if (error != last_error) {
        spdlog::warn("cannot report the exit of worker {} to the head ({}); will retry", batch[taken].worker_id,
                     error);
      }
      last_error = std::move(error);
      const auto backoff_end = std::chrono::steady_clock::now() + std::chrono::milliseconds(backoff_ms);
      while (!stopping_) {
        if (cv_.WaitWithTimeout(&mu_, absl::FromChrono(backoff_end - std::chrono::steady_clock::now()))) break;
      }
      backoff_ms = std::min(backoff_ms * 2, options_.max_backoff_ms);
      continue;
    }
    if (!last_error.empty()) spdlog::info("head reachable again for exit reports");
    last_error.clear();
    backoff_ms = options_.initial_backoff_ms;
  }
}

ExitReporter::SendFn MakeHeadExitSender(std::shared_ptr<grpc::Channel> channel, std::string token,
                                        std::string node_id) {
  std::shared_ptr<rpc::HeadService::Stub> stub = rpc::HeadService::NewStub(channel);
  return [stub, token = std::move(token), node_id = std::move(node_id)](const std::vector<WorkerExit>& exits) {
    rpc::WorkerExitedRequest request;
    request.set_node_id(node_id);
    for (const WorkerExit& exit : exits) {
      rpc::WorkerExitReport* r = request.add_exits();
      r->set_worker_id(exit.worker_id);
      r->set_owner(exit.owner);
      r->set_exit_code(exit.exit_code);
      r->set_signal(exit.signal);
      r->set_end_time_ms(exit.end_time_ms);
      r->set_pid(exit.pid);
      r->set_start_time_ms(exit.start_time_ms);
      r->set_stopped(exit.stopped);
      r->set_oom_killed(exit.oom_killed);
      r->set_peak_rss_bytes(exit.peak_rss_bytes);
      r->set_output_tail(exit.output_tail);
      r->set_accelerator_error(exit.accelerator_error);
    }
    grpc::ClientContext ctx;
    ctx.AddMetadata(rpc::kAuthMetadataKey, absl::StrCat("Bearer ", token));
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    rpc::WorkerExitedReply reply;
    const absl::Status call = rpc::FromGrpc(stub->WorkerExited(&ctx, request, &reply));
    if (!call.ok()) return std::vector<absl::Status>(exits.size(), call);
    std::vector<absl::Status> out;
    for (const rpc::WorkerExitResult& r : reply.results()) {
      out.push_back(r.error_code() == 0 ? absl::OkStatus()
                                        : absl::Status(static_cast<absl::StatusCode>(r.error_code()), r.error()));
    }
    return out;
  };
}

}  // namespace torus::node
