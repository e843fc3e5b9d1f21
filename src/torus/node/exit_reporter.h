// ExitReporter: tells the head that workers exited, in the order they did. One sender thread delivers what is queued
// in one call (at most `max_batch` reports, oldest first: exits that come while a call is under way go together in
// the next), retrying from the first report the head has not taken, with backoff, while the head is unreachable or
// restarting; a report the head refuses for good (unknown worker, bad request, or a head that does not track
// workers) is dropped with a log line.
//
// Thread-safety: thread-safe. `send` runs on the sender thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "torus/node/worker_supervisor.h"

namespace torus::node {

// What becomes of a report after the head answered.
enum class ReportOutcome {
  kDelivered,  // OK
  kRejected,   // the head will never take it: NOT_FOUND, INVALID_ARGUMENT, ALREADY_EXISTS, OUT_OF_RANGE, UNIMPLEMENTED
  kRetry,      // anything else: unreachable, timed out, restarting, not registered yet (FAILED_PRECONDITION)
};
ReportOutcome ClassifyReportReply(const absl::Status& status);

struct ExitReporterOptions {
  int64_t initial_backoff_ms = 100;
  int64_t max_backoff_ms = 2000;
  size_t max_queued = 10000;  // beyond this the oldest reports are dropped
  size_t max_batch = 64;      // reports in one call
};

class ExitReporter {
 public:
  // Delivers reports in one call; the answer has the head's status of each, in order. A call that failed answers
  // with its status for every report; an answer shorter than the reports leaves the rest to be sent again.
  using SendFn = std::function<std::vector<absl::Status>(const std::vector<WorkerExit>&)>;

  explicit ExitReporter(SendFn send, ExitReporterOptions options = {});
  // Stops the sender; reports not yet delivered are dropped.
  ~ExitReporter();

  ExitReporter(const ExitReporter&) = delete;
  ExitReporter& operator=(const ExitReporter&) = delete;

  // Queues a report and wakes the sender.
  void Report(const WorkerExit& exit);
  // Blocks until every queued report was delivered or dropped, or `timeout` passed; true when none is left.
  bool WaitIdle(std::chrono::milliseconds timeout);
  // Reports queued or in flight.
  size_t Pending() const;

 private:
  void SenderLoop();

  const SendFn send_;
  const ExitReporterOptions options_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;                                  // new report, idle, or stopping
  std::deque<WorkerExit> queue_ ABSL_GUARDED_BY(mu_);  // the first in_flight_ are being sent
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread sender_;
};

// The agent's sender: HeadService.WorkerExited (several exits a call) over `channel`, with the cluster token, as node `node_id`.
ExitReporter::SendFn MakeHeadExitSender(std::shared_ptr<grpc::Channel> channel, std::string token,
                                        std::string node_id);

}  // namespace torus::node
