#include "torus/head/autoscaler/local_provider.h"

#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "torus/common/spawn.h"
#include "torus/common/yaml_fields.h"

namespace torus::head {
namespace {

// The last lines of a command's log, for a failure's reason.
std::string LastLines(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) all.push_back(line);
  }
  const size_t from = all.size() > lines ? all.size() - lines : 0;
  return absl::StrJoin(all.begin() + static_cast<std::ptrdiff_t>(from), all.end(), " / ");
}

}  // namespace

LocalProvider::LocalProvider(std::string session, std::string torus_binary)
    : session_(std::move(session)),
      torus_binary_(torus_binary.empty() ? SiblingBinary("torus") : std::move(torus_binary)) {
  std::error_code ec;
  std::filesystem::create_directories(session_ + "/autoscaler/slices", ec);
  std::filesystem::create_directories(session_ + "/logs", ec);
}

LocalProvider::~LocalProvider() {
  // A reaper may start another command (a removal after its launch) while the others are joined.
  for (;;) {
    std::vector<Reaper> reapers;
    {
      absl::MutexLock lock(&mu_);
      if (reapers_.empty()) return;
      reapers.swap(reapers_);
    }
    for (Reaper& r : reapers) r.thread.join();
  }
}

std::string LocalProvider::RecordPath(const std::string& slice) const {
  return absl::StrCat(session_, "/autoscaler/slices/", slice, ".json");
}

absl::Status LocalProvider::Launch(const LaunchRequest& request) {
  const autoscale::NodeType& type = *request.type;
  const std::string class_name(autoscale::CapacityClassName(request.capacity_class));
  autoscale::SimulatedAnswer answer = autoscale::SimulatedAnswer::kCapacity;
  if (auto it = type.simulate.find(request.capacity_class); it != type.simulate.end()) answer = it->second;
  if (answer == autoscale::SimulatedAnswer::kQuota) {
    return absl::ResourceExhaustedError(absl::StrCat("quota exceeded for ", type.shape.pod_type.ToString(), " ",
                                                     class_name, " (simulated)"));
  }
  nlohmann::json record = {{"node_type", type.name}, {"capacity_class", class_name}, {"wall_ms", request.wall_ms}};
  {
    std::ofstream out(RecordPath(request.slice));
    out << record.dump() << "\n";
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", RecordPath(request.slice)));
  }
  // A stockout: accepted, and nothing ever comes up.
  if (answer == autoscale::SimulatedAnswer::kStockout) return absl::OkStatus();
  return Run(request.slice,
             {"node", "add-slice", request.slice, "--node-type", type.name, "--capacity-class", class_name,
              "--session", session_},
             /*report_failure=*/true);
}

absl::Status LocalProvider::Terminate(const std::string& slice) {
  std::error_code ec;
  std::filesystem::remove(RecordPath(slice), ec);
  {
    // Hosts its launch is still starting are not recorded yet: the removal runs once the launch has ended.
    absl::MutexLock lock(&mu_);
    if (auto it = launching_.find(slice); it != launching_.end()) {
      it->second = true;
      return absl::OkStatus();
    }
  }
  return Run(slice, {"node", "remove-slice", slice, "--session", session_}, /*report_failure=*/false);
}

absl::Status LocalProvider::Run(const std::string& slice, std::vector<std::string> args, bool report_failure) {
  const std::string log = absl::StrCat(session_, "/logs/autoscaler-", slice, ".log");
  std::vector<std::string> argv = {torus_binary_};
  argv.insert(argv.end(), args.begin(), args.end());
  spdlog::info("autoscaler: {}", absl::StrJoin(argv, " "));
  absl::StatusOr<pid_t> pid = SpawnDaemon({.argv = argv, .env = CurrentEnvironment(), .log_path = log});
  if (!pid.ok()) return pid.status();
  absl::MutexLock lock(&mu_);
  // Reapers of commands that ended are joined here, so that they do not pile up.
  for (auto it = reapers_.begin(); it != reapers_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = reapers_.erase(it);
    } else {
      ++it;
    }
  }
  if (report_failure) launching_[slice] = false;
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread thread([this, done, pid = *pid, slice, log, report_failure, command = args[1]] {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    struct Done {
      std::atomic<bool>* flag;
      ~Done() { flag->store(true); }
    } mark{done.get()};
    if (report_failure) {  // a launch: removed meanwhile?
      bool removed = false;
      {
        absl::MutexLock lock(&mu_);
        removed = launching_[slice];
        launching_.erase(slice);
      }
      if (removed) {
        (void)Run(slice, {"node", "remove-slice", slice, "--session", session_}, /*report_failure=*/false);
        return;
      }
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
    const std::string why = absl::StrCat("`torus node ", command, "` failed (",
                                         WIFEXITED(status) ? absl::StrCat("exit ", WEXITSTATUS(status))
                                                           : absl::StrCat("signal ", WTERMSIG(status)),
                                         "): ", LastLines(log, 3));
    spdlog::warn("autoscaler: slice {}: {}", slice, why);
    if (!report_failure) return;
    absl::MutexLock lock(&mu_);
    failures_[slice] = why;
  });
  reapers_.push_back({std::move(thread), std::move(done)});
  return absl::OkStatus();
}

std::map<std::string, std::string> LocalProvider::TakeFailures() {
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::string> out;
  out.swap(failures_);
  return out;
}

std::vector<SliceProvider::Launched> LocalProvider::List() {
  std::vector<Launched> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(session_ + "/autoscaler/slices", ec)) {
    if (entry.path().extension() != ".json") continue;
    const std::string slice = entry.path().stem().string();
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json record = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    auto capacity_class = record.is_object() && record["capacity_class"].is_string()
                              ? autoscale::ParseCapacityClass(record["capacity_class"].get<std::string>())
                              : absl::InvalidArgumentError("no capacity_class");
    if (!record.is_object() || !record["node_type"].is_string() || !record["wall_ms"].is_number_integer() ||
        !capacity_class.ok() || slice.size() > 40) {
      spdlog::warn("autoscaler: {} is not a slice record; ignored", entry.path().string());
      continue;
    }
    out.push_back({slice, record["node_type"].get<std::string>(), *capacity_class, record["wall_ms"].get<int64_t>()});
  }
  return out;
}

}  // namespace torus::head
