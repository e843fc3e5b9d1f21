#include "torus/node/worker_supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"


namespace torus::node {
namespace {

constexpr size_t kMaxOwnerLength = 256;

// What a child that could not exec writes to the report pipe before it exits.
enum ChildStage : int { kStageSession = 1, kStageStdio = 2, kStageCwd = 3, kStageExec = 4 };
struct ChildReport {
  int stage;
  int error;
};

// Everything the child needs, prepared before it is started: the child shares the agent's memory until it execs
// (clone with CLONE_VM | CLONE_VFORK, so that starting a worker copies none of the agent), so it only makes
// async-signal-safe system calls and writes nothing but its own stack and `sh_argv[1]`.
struct ChildPlan {
  pid_t parent;
  int report_fd;
  int stdin_fd;
  int log_fd;
  const char* cwd;  // nullptr = stay
  char* const* candidates;  // where the program may be, in PATH order (argv[0] itself when it names a path)
  char* const* argv;
  char** sh_argv;  // {"/bin/sh", <candidate>, argv[1], ...}: a program without a #! line runs as a script
  char* const* envp;
};

// The child's code is built without sanitizer instrumentation: it runs on a stack the agent allocated on its heap
// and must not call into the sanitizers' runtime (which would mark that memory as stack frames and then report its
// own bookkeeping of the frames as an overflow of the heap block) before it execs.
#define TORUS_CHILD_CODE [[gnu::no_sanitize("address", "undefined")]]

TORUS_CHILD_CODE [[noreturn]] void ChildFail(const ChildPlan& plan, int stage) {
  ChildReport report{stage, errno};
  ssize_t ignored = write(plan.report_fd, &report, sizeof(report));
  (void)ignored;
  _exit(127);
}

// Runs in the child: async-signal-safe calls only (no allocation, no locks, no logging).
TORUS_CHILD_CODE [[noreturn]] void RunChild(const ChildPlan& plan) {
  // Die with the spawner thread; if the agent already went between clone and prctl, nobody is left to see us.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != plan.parent) _exit(127);
  if (setsid() < 0) ChildFail(plan, kStageSession);
  if (dup2(plan.stdin_fd, STDIN_FILENO) < 0 || dup2(plan.log_fd, STDOUT_FILENO) < 0 ||
      dup2(plan.log_fd, STDERR_FILENO) < 0) {
    ChildFail(plan, kStageStdio);
  }
  if (plan.cwd != nullptr && chdir(plan.cwd) != 0) ChildFail(plan, kStageCwd);
  // The agent blocks SIGTERM/SIGINT in every thread and ignores SIGPIPE; both would survive exec.
  struct sigaction default_action;
  memset(&default_action, 0, sizeof(default_action));
  default_action.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &default_action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // Descriptors the agent left inheritable (sockets, files) are not the worker's business.
  close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  // As execvp does, with the worker's PATH: the first candidate that can be executed; EACCES if one was found
  // but could not be, else ENOENT.
  bool denied = false;
  for (char* const* c = plan.candidates; *c != nullptr; ++c) {
    execve(*c, plan.argv, plan.envp);
    const int error = errno;
    if (error == ENOEXEC) {
      plan.sh_argv[1] = *c;
      execve(plan.sh_argv[0], plan.sh_argv, plan.envp);
      ChildFail(plan, kStageExec);
    }
    if (error == EACCES) {
      denied = true;
    } else if (error != ENOENT && error != ENOTDIR && error != ESTALE && error != ENODEV && error != ETIMEDOUT) {
      ChildFail(plan, kStageExec);
    }
  }
  errno = denied ? EACCES : ENOENT;
  ChildFail(plan, kStageExec);
}

TORUS_CHILD_CODE int RunChildOnItsStack(void* plan) { RunChild(*static_cast<const ChildPlan*>(plan)); }

// The paths execvp would try for `file` with `path_var` as PATH, in order.
std::vector<std::string> ExecCandidates(const std::string& file, const std::string& path_var) {
  if (file.find('/') != std::string::npos) return {file};
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = path_var.find(':', start);
    std::string dir = path_var.substr(start, end == std::string::npos ? std::string::npos : end - start);
    out.push_back(dir.empty() ? file : absl::StrCat(dir, "/", file));  // an empty entry is the working directory
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

bool ValidEnvName(const std::string& name) {
  return !name.empty() && name.find('=') == std::string::npos && name.find('\0') == std::string::npos;
}

bool HasNul(const std::string& s) { return s.find('\0') != std::string::npos; }

std::string ErrnoText(int error) { return std::strerror(error); }

// "No such file or directory (errno 2, ENOENT)": what a failed start reports.
std::string ErrnoTextWithName(int error) {
  const char* name = strerrorname_np(error);
  return absl::StrCat(std::strerror(error), " (errno ", error, name != nullptr ? ", " : "", name != nullptr ? name : "",
                      ")");
}

absl::Status ValidateSpec(const WorkerSpec& spec) {
  if (absl::Status s = ValidateWorkerId(spec.worker_id); !s.ok()) return s;
  if (spec.owner.size() > kMaxOwnerLength || HasNul(spec.owner)) {
    return absl::InvalidArgumentError(absl::StrCat("owner must be at most ", kMaxOwnerLength, " characters"));
  }
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return absl::InvalidArgumentError("argv must name a program to run (argv[0] is empty)");
  }
  for (size_t i = 0; i < spec.argv.size(); ++i) {
    if (HasNul(spec.argv[i])) return absl::InvalidArgumentError(absl::StrCat("argv[", i, "] contains a NUL byte"));
  }
  for (const auto& [name, value] : spec.env_set) {
    if (!ValidEnvName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("env_set: bad variable name '", name, "' (non-empty, without '=' or NUL)"));
    }
    if (HasNul(value)) return absl::InvalidArgumentError(absl::StrCat("env_set: value of ", name, " contains NUL"));
  }
  for (const std::string& name : spec.env_unset) {
    if (!ValidEnvName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("env_unset: bad variable name '", name, "' (non-empty, without '=' or NUL)"));
    }
  }
  if (HasNul(spec.cwd)) return absl::InvalidArgumentError("cwd contains a NUL byte");
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateWorkerId(const std::string& worker_id) {
  bool ok = !worker_id.empty() && worker_id.size() <= 128;
  for (char c : worker_id) {
    ok = ok && ((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
                c == '.' || c == '-');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("worker_id '", worker_id, "' must be 1-128 characters of [0-9A-Za-z_.-]"));
}

struct WorkerSupervisor::SpawnRequest {
  std::string worker_id;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // KEY=VALUE
  std::string path_var;          // the worker's PATH, for error messages
  std::string search_path;       // where the program is looked for
  std::string cwd;
  int log_fd = -1;
  int stdin_fd = -1;
  std::promise<absl::StatusOr<pid_t>> result;
};

WorkerSupervisor::WorkerSupervisor(const Clock* clock, std::string log_root, EnvMap base_env,
                                   std::function<void(const WorkerExit&)> on_exit, SupervisorOptions options)
    : clock_(clock),
      log_root_(std::move(log_root)),
      base_env_(std::move(base_env)),
      on_exit_(std::move(on_exit)),
      options_{std::max(1, options.max_finished), options.tpu_log_dir, options.tail_lines},
      oom_counter_(OomCounter::ForProcess(getpid())) {
  // Parallel starts, as many as the agent has cores (at most 4): each start is a clone whose thread waits until
  // the child execs.
  const unsigned spawners = std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
  for (unsigned i = 0; i < spawners; ++i) spawners_.emplace_back([this] { SpawnerLoop(); });
  reaper_ = std::thread([this] { ReaperLoop(); });
  timer_ = std::thread([this] { TimerLoop(); });
}

WorkerSupervisor::~WorkerSupervisor() {
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    for (const auto& [pid, id] : live_pids_) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);  // in case it had not reached setsid yet
    }
    for (pid_t pgid : pending_kills_) kill(-pgid, SIGKILL);
    pending_kills_.clear();
  }
  spawner_cv_.SignalAll();
  timer_cv_.SignalAll();
  reaper_cv_.SignalAll();
  for (std::thread& t : spawners_) t.join();
  timer_.join();
  reaper_.join();
}

absl::StatusOr<StartedWorker> WorkerSupervisor::Start(const WorkerSpec& spec) {
  if (absl::Status s = ValidateSpec(spec); !s.ok()) return s;

  EnvMap env = base_env_;
  for (const auto& [name, value] : spec.env_set) env[name] = value;
  for (const std::string& name : spec.env_unset) env.erase(name);

  SpawnRequest request;
  request.worker_id = spec.worker_id;
  request.argv = spec.argv;
  request.cwd = spec.cwd;
  for (const auto& [name, value] : env) request.env.push_back(absl::StrCat(name, "=", value));
  auto path = env.find("PATH");
  request.path_var = path == env.end() ? "(unset: /bin:/usr/bin)" : path->second;
  request.search_path = path == env.end() ? "/bin:/usr/bin" : path->second;

  std::error_code ec;
  std::filesystem::create_directories(log_root_, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create log directory ", log_root_, ": ", ec.message()));
  const std::string log_path = absl::StrCat(log_root_, "/", spec.worker_id, ".log");
  request.log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (request.log_fd < 0) {
    return absl::InternalError(absl::StrCat("cannot open log file ", log_path, ": ", ErrnoText(errno)));
  }
  request.stdin_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (request.stdin_fd < 0) {
    int error = errno;
    close(request.log_fd);
    return absl::InternalError(absl::StrCat("cannot open /dev/null: ", ErrnoText(error)));
  }
  auto close_fds = [&request] {
    close(request.log_fd);
    close(request.stdin_fd);
  };

  std::future<absl::StatusOr<pid_t>> result = request.result.get_future();
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) {
      close_fds();
      return absl::UnavailableError("the agent is shutting down");
    }
    auto it = workers_.find(spec.worker_id);
    if (it != workers_.end()) {
      if (spec.only_if_new) {
        close_fds();
        return absl::AlreadyExistsError(absl::StrCat("worker ", spec.worker_id, " has run on this node already"));
      }
      if (it->second.info.running) {
        close_fds();
        return absl::AlreadyExistsError(absl::StrCat("worker ", spec.worker_id, " is already running (pid ",
                                                     it->second.info.pid, ")"));
      }
      finished_order_.erase(it->second.finished_pos);
      workers_.erase(it);
    }
    Record& record = workers_[spec.worker_id];
    record.info.worker_id = spec.worker_id;
    record.info.owner = spec.owner;
    record.info.running = true;
    record.info.start_time_ms = clock_->WallMillis();
    record.info.log_path = log_path;
    record.env_set = spec.env_set;
    record.info.chips = spec.chips;
    record.info.gpus = spec.gpus;
    record.info.group_id = spec.group_id;
    record.info.bundle_index = spec.bundle_index;
    spawn_queue_.push_back(&request);
  }
  spawner_cv_.Signal();
  absl::StatusOr<pid_t> pid = result.get();
  close_fds();
  if (!pid.ok()) return pid.status();
  return StartedWorker{*pid, log_path};
}

void WorkerSupervisor::SpawnerLoop() {
  const std::unique_ptr<char[]> stack = std::make_unique<char[]>(kChildStackBytes);
  absl::MutexLock lock(&mu_);
  while (true) {
    while (!shutting_down_ && spawn_queue_.empty()) spawner_cv_.Wait(&mu_);
    if (spawn_queue_.empty()) return;
    SpawnRequest* request = spawn_queue_.front();
    spawn_queue_.pop_front();
    mu_.Unlock();
    Spawn(*request, stack.get());
    mu_.Lock();
  }
}

void WorkerSupervisor::Spawn(SpawnRequest& request, char* stack) {
  std::vector<char*> argv;
  for (std::string& arg : request.argv) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& kv : request.env) envp.push_back(kv.data());
  envp.push_back(nullptr);
  std::vector<std::string> candidate_paths = ExecCandidates(request.argv[0], request.search_path);
  std::vector<char*> candidates;
  for (std::string& c : candidate_paths) candidates.push_back(c.data());
  candidates.push_back(nullptr);
  std::string sh = "/bin/sh";
  std::vector<char*> sh_argv = {sh.data(), nullptr};
  for (size_t i = 1; i < request.argv.size(); ++i) sh_argv.push_back(request.argv[i].data());
  sh_argv.push_back(nullptr);

  auto fail = [this, &request](absl::Status status) {
    {
      absl::MutexLock lock(&mu_);
      workers_.erase(request.worker_id);
    }
    request.result.set_value(std::move(status));
  };

  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    fail(absl::InternalError(absl::StrCat("cannot create a pipe: ", ErrnoText(errno))));
    return;
  }
  const ChildPlan plan{getpid(),
                       report[1],
                       request.stdin_fd,
                       request.log_fd,
                       request.cwd.empty() ? nullptr : request.cwd.c_str(),
                       candidates.data(),
                       argv.data(),
                       sh_argv.data(),
                       envp.data()};
  // Read before the worker exists, so that an OOM kill of it counts as a rise.
  const std::optional<uint64_t> oom_kills = oom_counter_ ? oom_counter_->Read() : std::nullopt;
  pid_t pid = -1;
  int fork_error = 0;
  bool shutting_down = false;
  {
    absl::ReaderMutexLock cloning(&clone_mu_);
    {
      absl::MutexLock lock(&mu_);
      shutting_down = shutting_down_;
    }
    if (!shutting_down) {
      // No signal handler of the agent may run in the child while it shares the agent's memory: everything is
      // blocked across the clone, and the child resets its handlers before it unblocks.
      sigset_t all, before;
      sigfillset(&all);
      pthread_sigmask(SIG_SETMASK, &all, &before);
      pid = clone(RunChildOnItsStack, stack + kChildStackBytes, CLONE_VM | CLONE_VFORK | SIGCHLD,
                  const_cast<ChildPlan*>(&plan));
      fork_error = errno;
      pthread_sigmask(SIG_SETMASK, &before, nullptr);
    }
    if (pid > 0) {
      // Registered before the reaper may look at it (it waits for clone_mu_).
      absl::MutexLock lock(&mu_);
      workers_[request.worker_id].info.pid = pid;
      workers_[request.worker_id].oom_kills_at_start = oom_kills;
      live_pids_[pid] = request.worker_id;
      if (shutting_down_) {  // the destructor's kills came before it was known
        kill(-pid, SIGKILL);
        kill(pid, SIGKILL);
      }
    }
  }
  close(report[1]);
  if (pid < 0) {
    close(report[0]);
    fail(shutting_down ? absl::UnavailableError("the agent is shutting down")
                       : absl::InternalError(absl::StrCat("cannot start a process: ", ErrnoText(fork_error))));
    return;
  }
  reaper_cv_.SignalAll();

  // EOF means exec succeeded (the pipe is close-on-exec); a report means the child failed and exits.
  ChildReport child_report{};
  ssize_t n;
  do {
    n = read(report[0], &child_report, sizeof(child_report));
  } while (n < 0 && errno == EINTR);
  close(report[0]);

  if (n == static_cast<ssize_t>(sizeof(child_report))) {
    // The reaper discards the pid: its record is gone (or belongs to a later start of the same id).
    const std::string why = ErrnoTextWithName(child_report.error);
    switch (child_report.stage) {
      case kStageExec:
        fail(absl::FailedPreconditionError(
            request.argv[0].find('/') == std::string::npos
                ? absl::StrCat("cannot execute '", request.argv[0], "': ", why, " (searched PATH=",
                               request.path_var, ")")
                : absl::StrCat("cannot execute '", request.argv[0], "': ", why)));
        return;
      case kStageCwd:
        fail(absl::FailedPreconditionError(
            absl::StrCat("cannot enter working directory '", request.cwd, "': ", why)));
        return;
      default:
        fail(absl::InternalError(absl::StrCat("cannot prepare the worker process (step ", child_report.stage,
                                              "): ", why)));
        return;
    }
  }

  std::optional<Ending> early_exit;
  {
    absl::MutexLock lock(&mu_);
    Record& record = workers_[request.worker_id];
    // Logged under the lock, so that it always comes before the exit's line.
    spdlog::info("worker {} started: pid {}, log {}", request.worker_id, pid, record.info.log_path);
    record.exec_confirmed = true;
    if (record.reaped_early) {
      early_exit = FinishLocked(record, record.early_wait_status, record.early_max_rss_kib);
    } else if (record.pending_stop_grace >= 0) {
      StopLocked(record, record.pending_stop_grace);
    }
  }
  request.result.set_value(pid);
  if (early_exit) DeliverExit(*std::move(early_exit));
}

void WorkerSupervisor::ReaperLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      while (!shutting_down_ && live_pids_.empty()) reaper_cv_.Wait(&mu_);
      if (live_pids_.empty()) return;
    }
    // Look before reaping: while the leader is an unreaped zombie its pid, and so its group id, cannot be reused.
    siginfo_t info;
    memset(&info, 0, sizeof(info));
    if (waitid(P_ALL, 0, &info, WEXITED | WNOWAIT) != 0) {
      if (errno == EINTR) continue;
      // ECHILD: something else in this process reaped our children; their fate is unknown.
      const std::string why = ErrnoText(errno);
      std::vector<Ending> lost;
      {
        absl::MutexLock lock(&mu_);
        spdlog::error("waitid: {}; marking {} workers as lost", why, live_pids_.size());
        for (const auto& [pid, id] : live_pids_) {
          auto it = workers_.find(id);
          if (it == workers_.end() || it->second.info.pid != pid) continue;
          if (!it->second.exec_confirmed) {
            it->second.reaped_early = true;
            it->second.early_wait_status = 127 << 8;
          } else {
            lost.push_back(FinishLocked(it->second, 255 << 8));
          }
        }
        live_pids_.clear();
      }
      exit_cv_.SignalAll();
      for (Ending& e : lost) DeliverExit(std::move(e));
      continue;
    }
    const pid_t pid = info.si_pid;
    {
      // A start whose clone made this child has registered it once no spawner holds clone_mu_ shared.
      absl::MutexLock registered(&clone_mu_);
    }
    {
      absl::MutexLock lock(&mu_);
      // A natural exit takes what the worker left in its group along; a stopped group keeps its grace.
      if (live_pids_.count(pid) > 0 && pending_kills_.count(pid) == 0) kill(-pid, SIGKILL);
    }
    int status = 0;
    struct rusage usage;
    memset(&usage, 0, sizeof(usage));
    while (wait4(pid, &status, 0, &usage) < 0 && errno == EINTR) {
    }

    std::optional<Ending> exit;
    {
      absl::MutexLock lock(&mu_);
      if (pending_kills_.count(pid) > 0 && kill(-pid, 0) != 0 && errno == ESRCH) pending_kills_.erase(pid);
      auto live = live_pids_.find(pid);
      if (live != live_pids_.end()) {
        auto it = workers_.find(live->second);
        live_pids_.erase(live);
        if (it != workers_.end() && it->second.info.pid == pid && it->second.info.running) {
          if (it->second.exec_confirmed) {
            exit = FinishLocked(it->second, status, usage.ru_maxrss);
          } else {
            it->second.reaped_early = true;
            it->second.early_wait_status = status;
            it->second.early_max_rss_kib = usage.ru_maxrss;
          }
        }
      }
    }
    exit_cv_.SignalAll();
    if (exit) DeliverExit(*std::move(exit));
  }
}

void WorkerSupervisor::DeliverExit(Ending ending) {
  WorkerExit& exit = ending.exit;
  // A failure torus did not cause itself: what the head names as its cause comes from here. (A worker torus stopped
  // is a symptom; its restart should not wait for its logs to be read.)
  if ((exit.signal != 0 || exit.exit_code != 0) && !exit.stopped) {
    exit.output_tail = LastLines(ending.log_path, options_.tail_lines, 4096);
    // File times come from the kernel's coarse clock, a tick or so behind the wall clock.
    constexpr int64_t kFileClockSlackMs = 50;
    if (!options_.tpu_log_dir.empty()) {
      exit.accelerator_error = LastGlogError(options_.tpu_log_dir, exit.start_time_ms - kFileClockSlackMs);
    }
    if (exit.signal == SIGKILL && !exit.stopped && oom_counter_ && ending.oom_kills_at_start) {
      const std::optional<uint64_t> now = oom_counter_->Read();
      exit.oom_killed = now && *now > *ending.oom_kills_at_start;
    }
  }
  on_exit_(exit);
  {
    absl::MutexLock lock(&mu_);
    --exits_in_delivery_;
  }
  exit_cv_.SignalAll();
}

void WorkerSupervisor::TimerLoop() {
  absl::MutexLock lock(&mu_);
  while (!shutting_down_) {
    if (kill_timers_.empty()) {
      timer_cv_.Wait(&mu_);
      continue;
    }
    const KillTimer next = kill_timers_.top();
    const int64_t now = clock_->NowMicros();
    if (next.deadline_micros > now) {
      timer_cv_.WaitWithTimeout(&mu_, absl::Microseconds(next.deadline_micros - now));
      continue;
    }
    kill_timers_.pop();
    if (pending_kills_.erase(next.pgid) > 0) {
      // A pid is only reused after its group is empty: this reaches a stranger only after a pid wraparound
      // within the grace period.
      if (kill(-next.pgid, SIGKILL) == 0) spdlog::info("process group {} outlived its grace: killed", next.pgid);
      exit_cv_.SignalAll();
    }
  }
}

WorkerSupervisor::Ending WorkerSupervisor::FinishLocked(Record& record, int wait_status, int64_t max_rss_kib) {
  WorkerInfo& info = record.info;
  info.running = false;
  auto [first, last] = log_waiters_.equal_range(info.worker_id);
  for (auto it = first; it != last; ++it) {
    const uint64_t one = 1;
    if (write(it->second, &one, sizeof(one)) < 0) spdlog::warn("waking a log wait: {}", std::strerror(errno));
  }
  if (WIFSIGNALED(wait_status)) {
    info.signal = WTERMSIG(wait_status);
  } else {
    info.exit_code = WEXITSTATUS(wait_status);
  }
  info.end_time_ms = clock_->WallMillis();
  info.stopped = record.stop_requested;
  record.finished_pos = finished_order_.insert(finished_order_.end(), info.worker_id);
  WorkerExit exit{.worker_id = info.worker_id,
                  .owner = info.owner,
                  .pid = info.pid,
                  .exit_code = info.exit_code,
                  .signal = info.signal,
                  .end_time_ms = info.end_time_ms,
                  .start_time_ms = info.start_time_ms,
                  .stopped = record.stop_requested,
                  .peak_rss_bytes = max_rss_kib * 1024};
  ++exits_in_delivery_;
  spdlog::info("worker {} (pid {}) exited: {}", info.worker_id, info.pid,
               info.signal != 0 ? absl::StrCat("signal ", info.signal) : absl::StrCat("code ", info.exit_code));
  Ending ending{std::move(exit), info.log_path, record.oom_kills_at_start};
  PruneFinishedLocked();
  return ending;
}

void WorkerSupervisor::PruneFinishedLocked() {
  while (finished_order_.size() > static_cast<size_t>(options_.max_finished)) {
    workers_.erase(finished_order_.front());
    finished_order_.pop_front();
  }
}

void WorkerSupervisor::StopLocked(Record& record, int64_t grace_micros) {
  record.stop_requested = true;
  if (!record.exec_confirmed) {
    // Still starting: the spawner applies the stop once exec is confirmed.
    grace_micros = std::max<int64_t>(grace_micros, 0);
    if (record.pending_stop_grace < 0 || grace_micros < record.pending_stop_grace) {
      record.pending_stop_grace = grace_micros;
    }
    return;
  }
  const pid_t pgid = record.info.pid;
  if (grace_micros <= 0) {
    kill(-pgid, SIGKILL);
    return;
  }
  kill(-pgid, SIGTERM);
  kill_timers_.push({clock_->NowMicros() + grace_micros, pgid});
  pending_kills_.insert(pgid);
  timer_cv_.SignalAll();
}

absl::StatusOr<bool> WorkerSupervisor::Stop(const std::string& worker_id, int64_t grace_micros) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return absl::NotFoundError(absl::StrCat("no worker ", worker_id, " on this node"));
  if (!it->second.info.running) return false;
  StopLocked(it->second, grace_micros);
  return true;
}

int WorkerSupervisor::StopOwner(const std::string& owner, int64_t grace_micros) {
  absl::MutexLock lock(&mu_);
  int stopped = 0;
  for (auto& [id, record] : workers_) {
    if (record.info.running && record.info.owner == owner) {
      StopLocked(record, grace_micros);
      ++stopped;
    }
  }
  return stopped;
}

bool WorkerSupervisor::AllStoppedLocked() const {
  if (!pending_kills_.empty() || exits_in_delivery_ > 0) return false;
  for (const auto& [id, record] : workers_) {
    if (record.info.running) return false;
  }
  return true;
}

int WorkerSupervisor::StopAll(int64_t grace_micros) {
  absl::MutexLock lock(&mu_);
  int stopped = 0;
  for (auto& [id, record] : workers_) {
    if (record.info.running) {
      StopLocked(record, grace_micros);
      ++stopped;
    }
  }
  const auto wait = std::chrono::microseconds(std::max<int64_t>(2 * grace_micros, 1'000'000));
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (!AllStoppedLocked()) {
    if (exit_cv_.WaitWithTimeout(&mu_, absl::FromChrono(deadline - std::chrono::steady_clock::now()))) break;
  }
  if (!AllStoppedLocked()) {
    spdlog::warn("workers still running {} ms after they were stopped",
                 std::chrono::duration_cast<std::chrono::milliseconds>(wait).count());
  }
  return stopped;
}

}  // namespace torus::node
