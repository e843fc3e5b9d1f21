// The local provider: slices of simulated TPU hosts on this machine, in the `torus up` session the head serves.
// A launch runs `torus node add-slice SLICE --node-type T --capacity-class C --session DIR`, which starts each host's
// agent (and its simulated libtpu metrics server) with the environment GKE gives a TPU pod, so the hosts go through
// the same detection as real ones; a removal runs `torus node remove-slice SLICE --session DIR`. The node types come
// from `<session>/autoscaler.yaml` (written by `torus up`), read by both the head and the command.
//
// A node type's `simulate` answers stand in for a cloud's: a class answered `stockout` is accepted and never
// provisions (as a GKE node pool waiting for capacity), `quota` is refused at once.
//
// What it launched is kept as one file per slice under <session>/autoscaler/slices/, so that a restarted head takes
// the slices up again (List). Each command's output goes to <session>/logs/autoscaler-<slice>.log.
//
// Thread-safety: thread-safe. A command's exit is reaped on a thread of its own; the destructor waits for them.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "torus/head/autoscaler/slice_provider.h"

namespace torus::head {

class LocalProvider final : public SliceProvider {
 public:
  // `torus_binary`: the CLI to run (by default the `torus` beside this program).
  LocalProvider(std::string session, std::string torus_binary);
  ~LocalProvider() override;

  absl::Status Launch(const LaunchRequest& request) override;
  absl::Status Terminate(const std::string& slice) override;
  std::map<std::string, std::string> TakeFailures() override;
  std::vector<Launched> List() override;

 private:
  // Runs the CLI with `args` (output to the slice's log); a failed exit is recorded for TakeFailures if asked.
  absl::Status Run(const std::string& slice, std::vector<std::string> args, bool report_failure);
  std::string RecordPath(const std::string& slice) const;

  const std::string session_;
  const std::string torus_binary_;
  absl::Mutex mu_;
  std::map<std::string, std::string> failures_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, bool> launching_ ABSL_GUARDED_BY(mu_);  // slices whose launch runs -> removed meanwhile
  struct Reaper {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Reaper> reapers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace torus::head
