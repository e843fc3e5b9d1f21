// OutputFollower: the output of the workers a driver leased, streamed back to it line by line (as Ray prints its
// workers' output on the driver, prefixed with where it came from). Each worker's log is followed from its start
// through its agent's ReadWorkerLog (waiting for more), until the worker ends or the follower stops.
//
// Thread-safety: thread-safe. One thread per followed worker.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

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
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::thread> threads_;  // by worker id; guarded by mu_
  std::deque<OutputLine> lines_;                 // guarded by mu_
  std::vector<grpc::ClientContext*> calls_;      // in flight; guarded by mu_
  bool stopping_ = false;                        // guarded by mu_
};

}  // namespace torus::core
