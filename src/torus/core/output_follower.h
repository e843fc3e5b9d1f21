// OutputFollower: the output of the workers a driver leased, streamed back to it line by line (as Ray prints its
// workers' output on the driver, prefixed with where it came from). Each worker's log is followed from its start
// through its agent's ReadWorkerLog (waiting for more), until the worker ends or the follower stops.
//
// Thread-safety: thread-safe. One thread per followed worker.
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "torus/core/task_submitter.h"

namespace torus::core {

struct OutputLine {
  std::string source;  // "pid=1234, node=v6e-0-w2"
  std::string text;    // one line, without its newline
};

class OutputFollower {
 public:
  explicit OutputFollower(Channels* channels) : channels_(channels) {}
  ~OutputFollower();

  // Follows a worker's output (once per worker id; later calls for it are ignored).
  void Follow(const std::string& agent, const std::string& worker_id, int64_t pid, const std::string& node_id);
  // The next line, waiting up to `timeout_ms`; nullopt when there is none by then.
  std::optional<OutputLine> Next(int64_t timeout_ms);
  void Stop();

 private:
  void Run(std::string agent, std::string worker_id, std::string source);

  Channels* channels_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::map<std::string, std::thread> threads_ ABSL_GUARDED_BY(mu_);  // by worker id
  std::deque<OutputLine> lines_ ABSL_GUARDED_BY(mu_);
  std::vector<grpc::ClientContext*> calls_ ABSL_GUARDED_BY(mu_);  // in flight
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace torus::core
