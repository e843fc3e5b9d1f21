// WorkerSupervisor: starts the agent's worker processes and watches them until they exit.
//
// Each worker runs in its own session (so a stop signals its whole process group), with stdin from /dev/null and
// stdout + stderr appended to `<log_root>/<worker_id>.log`. Workers die with the agent: they are forked by one
// long-lived spawner thread and ask the kernel for SIGKILL when it goes (PR_SET_PDEATHSIG follows the forking
// *thread*, which is why RPC threads never fork). One reaper thread collects exits; when a worker's leader exits,
// whatever it left in its process group is killed too, so no orphan keeps holding chips or ports. A timer thread
// turns an unanswered SIGTERM into SIGKILL after the grace period.
//
// The supervisor owns child reaping for the whole process: nothing else in it may wait for children.
//
// Thread-safety: thread-safe. `on_exit` runs on the supervisor's own threads, outside its lock, once per worker
// that started; it must not block for long, and may call back into the supervisor (except StopAll).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "torus/accel/tpu_detect.h"
#include "torus/common/clock.h"
#include "torus/node/exit_details.h"

namespace torus::node {

// What to start. (Members default to empty so that designated initializers may leave them out.)
struct WorkerSpec {
  std::string worker_id{};                       // 1-128 of [0-9A-Za-z_.-], unique among running workers
  std::string owner{};                           // the job or run it belongs to (may be empty)
  std::vector<std::string> argv{};               // argv[0] is looked up in the worker's PATH
  std::map<std::string, std::string> env_set{};  // added to (or replacing in) the base environment
  std::vector<std::string> env_unset{};          // removed from it
  std::string cwd{};                             // empty = the agent's working directory
  std::vector<int> chips{};                      // TPU chips of this host it holds (may be empty)
  std::vector<int> gpus{};                       // GPUs of this host it holds (may be empty)
  std::string group_id{};                        // the bundle it runs on (for listings): ledger group ...
  std::optional<int> bundle_index{};             // ... and index; unset: it holds no bundle
  bool only_if_new = false;                      // ALREADY_EXISTS when the id is known here at all, even ended
};

struct StartedWorker {
  pid_t pid = 0;
  std::string log_path;
};

struct WorkerExit {
  std::string worker_id{};
  std::string owner{};
  pid_t pid = 0;
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;     // the signal that killed it, or 0
  int64_t end_time_ms = 0;
  int64_t start_time_ms = 0;
  // Why, as far as the agent can tell (what the head names as the cause of a failure):
  bool stopped = false;           // the supervisor signalled it (Stop, StopOwner, StopAll)
  bool oom_killed = false;        // SIGKILL it did not send, while its memory cgroup's OOM-kill count rose
  int64_t peak_rss_bytes = 0;     // the largest resident set of its leader process
  std::string output_tail{};      // a failed worker: the last lines of its log (stdout and stderr)
  std::string accelerator_error{};  // a failed worker: the last error libtpu logged while it ran
};

struct WorkerInfo {
  std::string worker_id;
  std::string owner;
  pid_t pid = 0;
  bool running = false;
  int exit_code = 0;
  int signal = 0;
  int64_t start_time_ms = 0;
  int64_t end_time_ms = 0;  // 0 while running
  bool stopped = false;     // exited after the supervisor stopped it
  std::string log_path;
  std::string group_id;     // its bundle, when it has one
  std::optional<int> bundle_index;
  std::vector<int> chips;   // the devices it holds
  std::vector<int> gpus;
};

// A running worker and the environment its spec added (what the metrics sampler tags samples from).
struct RunningWorker {
  std::string worker_id;
  std::string owner;
  pid_t pid = 0;
  std::map<std::string, std::string> env_set;
  std::vector<int> chips;  // as in its spec
  std::vector<int> gpus;   // as in its spec
};

struct LogChunk {
  std::string data;
  int64_t next_offset = 0;
  bool finished = false;  // the worker has exited and the log was read to its end
};

struct SupervisorOptions {
  int max_finished = 1000;  // records of exited workers kept for List and ReadLog; the oldest go first
  std::string tpu_log_dir{};  // libtpu's log directory, searched for a failed worker's last error ("" = none)
  int tail_lines = 10;        // lines of a failed worker's log in its exit (from at most its last 4 KiB)
};

class WorkerSupervisor {
 public:
  // `clock` times stops and stamps starts and exits; `log_root` is created on demand; `base_env` is the
  // environment every worker starts from (normally the agent's own).
  WorkerSupervisor(const Clock* clock, std::string log_root, EnvMap base_env,
                   std::function<void(const WorkerExit&)> on_exit, SupervisorOptions options = {});
  // Kills every worker still running (SIGKILL to its group) and waits for them to be reaped.
  ~WorkerSupervisor();

  WorkerSupervisor(const WorkerSupervisor&) = delete;
  WorkerSupervisor& operator=(const WorkerSupervisor&) = delete;

  // Starts a worker and returns once it has exec'ed. InvalidArgument for a bad id, argv, environment name or cwd
  // (naming the field); AlreadyExists when a running worker has the id (a finished one is replaced);
  // FailedPrecondition when the program cannot be executed (naming argv[0] and why) or cwd cannot be entered.
  absl::StatusOr<StartedWorker> Start(const WorkerSpec& spec);

  // SIGTERM to the worker's process group, SIGKILL after `grace_micros` if it still runs (at once when <= 0).
  // Returns whether it was running; NotFound for an unknown id.
  absl::StatusOr<bool> Stop(const std::string& worker_id, int64_t grace_micros);
  // Stop for every running worker of `owner`; returns how many were signalled.
  int StopOwner(const std::string& owner, int64_t grace_micros);
  // Stops every running worker and waits until all have exited (their on_exit returned, their groups are gone) or
  // 2 x grace (at least 1 s) has passed. Returns how many were signalled. Not to be called from on_exit.
  int StopAll(int64_t grace_micros);

  // Up to `max_bytes` (<= 0 or more than 1 MiB: 1 MiB) of the worker's log from `offset`. NotFound for an unknown
  // id, InvalidArgument for a negative offset.
  absl::StatusOr<LogChunk> ReadLog(const std::string& worker_id, int64_t offset, int64_t max_bytes) const;

  // Returns once the worker's log holds more than `offset` bytes, the worker has exited, `deadline` has passed or
  // `cancelled()` says so (asked every 100 ms) — whichever comes first (it reads nothing: ReadLog then). Woken by
  // the file's changes (inotify) and by the worker's exit. NotFound for an unknown id.
  absl::Status WaitForLog(const std::string& worker_id, int64_t offset, std::chrono::steady_clock::time_point deadline,
                          const std::function<bool()>& cancelled);
  // The same for several workers at once: returns once any of them has more output than its offset, or every one
  // of them has exited (or at the deadline, or when cancelled). NotFound names the first unknown worker.
  absl::Status WaitForLogs(const std::vector<std::pair<std::string, int64_t>>& logs,
                             std::chrono::steady_clock::time_point deadline, const std::function<bool()>& cancelled);

  // Every known worker, running and finished, ordered by id.
  std::vector<WorkerInfo> List() const;
  // Whether `worker_id` is known here, running or ended (and not yet forgotten); whether it runs.
  bool Knows(const std::string& worker_id) const;
  bool IsRunning(const std::string& worker_id) const;
  int RunningCount() const;
  // Workers that have exec'ed and not exited, ordered by id.
  std::vector<RunningWorker> Running() const;

 private:
  struct Record {
    WorkerInfo info;
    std::map<std::string, std::string> env_set;  // from the spec
    bool exec_confirmed = false;      // the spawner saw exec succeed; until then the record only holds the id
    bool reaped_early = false;        // the reaper collected it before exec was confirmed
    int early_wait_status = 0;        // its wait status then
    int64_t early_max_rss_kib = 0;    // and its peak RSS
    int64_t pending_stop_grace = -1;  // a Stop that came while starting, applied once exec is confirmed
    bool stop_requested = false;      // the supervisor was asked to stop it
    std::optional<uint64_t> oom_kills_at_start;  // its memory cgroup's OOM-kill count before it started
    std::list<std::string>::iterator finished_pos;  // into finished_order_, once finished
  };
  struct SpawnRequest;
  struct KillTimer {
    int64_t deadline_micros;
    pid_t pgid;
    bool operator>(const KillTimer& o) const { return deadline_micros > o.deadline_micros; }
  };

  void SpawnerLoop();
  void ReaperLoop();
  void TimerLoop();
  // Starts one worker (a child that shares the agent's memory until it execs, on `stack`, of kChildStackBytes),
  // then settles its record; fulfils the request's promise.
  void Spawn(SpawnRequest& request, char* stack);
  // A finished worker on its way to on_exit, with what DeliverExit needs to describe a failure.
  struct Ending {
    WorkerExit exit;
    std::string log_path;
    std::optional<uint64_t> oom_kills_at_start;
  };
  // Marks a worker finished from a wait status (and the leader's peak RSS in KiB) and returns its ending, which
  // the caller must pass to DeliverExit once it has released mu_. REQUIRES: mu_ held.
  Ending FinishLocked(Record& record, int wait_status, int64_t max_rss_kib = 0) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds what the log, libtpu's logs and the memory cgroup say about a failure, then calls on_exit. REQUIRES: mu_
  // not held.
  void DeliverExit(Ending ending) ABSL_LOCKS_EXCLUDED(mu_);
  // SIGTERM to the group now and SIGKILL at grace, or SIGKILL at once when grace <= 0; a worker still starting
  // is stopped as soon as it has exec'ed. REQUIRES: mu_ held, record running.
  void StopLocked(Record& record, int64_t grace_micros) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the oldest finished records beyond the limit. REQUIRES: mu_ held.
  void PruneFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AllStoppedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock* clock_;
  const std::string log_root_;
  const EnvMap base_env_;
  const std::function<void(const WorkerExit&)> on_exit_;
  const SupervisorOptions options_;
  const std::optional<OomCounter> oom_counter_;  // the agent's memory cgroup, which its workers start in

  // The stack a starting worker runs on until it execs: each spawner thread has its own, one start at a time.
  static constexpr size_t kChildStackBytes = 128 << 10;
  // Held shared by a spawner from before its clone until the child's pid is registered, exclusively by the reaper
  // before it settles a pid it saw exit: the reaper never meets a child of ours it does not know yet, and spawners
  // clone in parallel (a clone suspends its thread until the child execs) without holding mu_.
  absl::Mutex clone_mu_;

  mutable absl::Mutex mu_;
  absl::CondVar reaper_cv_;   // children to wait for, or shutting down
  absl::CondVar spawner_cv_;  // spawn requests, or shutting down
  absl::CondVar timer_cv_;    // kill timers, or shutting down
  absl::CondVar exit_cv_;     // a worker finished, or a stopped group was killed or found empty
  std::map<std::string, Record> workers_ ABSL_GUARDED_BY(mu_);   // running (and starting) and finished
  std::map<pid_t, std::string> live_pids_ ABSL_GUARDED_BY(mu_);  // forked and not yet reaped, to worker id
  std::list<std::string> finished_order_ ABSL_GUARDED_BY(mu_);   // finished worker ids, oldest first
  std::deque<SpawnRequest*> spawn_queue_ ABSL_GUARDED_BY(mu_);
  // SIGKILL deadlines of stopped groups; a group counts only while its pgid is in pending_kills_ (a group found
  // empty is dropped from the set, its queue entry then ignored).
  std::priority_queue<KillTimer, std::vector<KillTimer>, std::greater<KillTimer>> kill_timers_ ABSL_GUARDED_BY(mu_);
  std::set<pid_t> pending_kills_ ABSL_GUARDED_BY(mu_);
  // Log waits (WaitForLog) per worker id: eventfds that FinishLocked signals when the worker exits.
  std::multimap<std::string, int> log_waiters_ ABSL_GUARDED_BY(mu_);
  int exits_in_delivery_ ABSL_GUARDED_BY(mu_) = 0;  // finished workers whose on_exit has not returned yet
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;

  std::vector<std::thread> spawners_;  // several, so that starts run in parallel
  std::thread reaper_;
  std::thread timer_;
};

// OK when `worker_id` is 1-128 of [0-9A-Za-z_.-]; InvalidArgument naming the accepted form otherwise.
absl::Status ValidateWorkerId(const std::string& worker_id);

}  // namespace torus::node
