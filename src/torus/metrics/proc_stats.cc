#include "torus/metrics/proc_stats.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace torus::metrics {
namespace {

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::vector<absl::string_view> Fields(absl::string_view line) {
  return absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
}

}  // namespace

absl::StatusOr<HostCpuTimes> ParseProcStat(std::string_view text) {
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    if (!absl::StartsWith(line, "cpu ")) continue;
    std::vector<absl::string_view> fields = Fields(line);
    // cpu user nice system idle iowait irq softirq steal [guest guest_nice]; guest time is already in user.
    if (fields.size() < 5) return absl::InvalidArgumentError("/proc/stat: the cpu line has fewer than 4 counters");
    uint64_t v[8] = {0};
    for (size_t i = 1; i < fields.size() && i <= 8; ++i) {
      if (!absl::SimpleAtoi(fields[i], &v[i - 1])) {
        return absl::InvalidArgumentError(absl::StrCat("/proc/stat: cpu counter ", i, " is not a number"));
      }
    }
    HostCpuTimes t;
    const uint64_t idle = v[3] + v[4];
    t.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    t.total = t.busy + idle;
    return t;
  }
  return absl::InvalidArgumentError("/proc/stat: no 'cpu ' line");
}

std::optional<double> HostCpuPercent(const HostCpuTimes& before, const HostCpuTimes& after) {
  if (after.total <= before.total || after.busy < before.busy) return std::nullopt;
  const double busy = static_cast<double>(after.busy - before.busy);
  return std::clamp(100.0 * busy / static_cast<double>(after.total - before.total), 0.0, 100.0);
}

absl::StatusOr<HostMemory> ParseMeminfo(std::string_view text) {
  std::map<std::string, int64_t> kb;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) continue;
    std::vector<absl::string_view> fields = Fields(line.substr(colon + 1));
    int64_t value = 0;
    // Beyond this the value in bytes would overflow int64 (no host has 8 EiB): unusable, like an unparseable one.
    constexpr int64_t kMaxKb = std::numeric_limits<int64_t>::max() / 1024;
    if (fields.empty() || !absl::SimpleAtoi(fields[0], &value) || value < 0 || value > kMaxKb) continue;
    kb.emplace(std::string(line.substr(0, colon)), value);
  }
  auto get = [&kb](const char* key) -> std::optional<int64_t> {
    auto it = kb.find(key);
    return it == kb.end() ? std::nullopt : std::optional<int64_t>(it->second);
  };
  std::optional<int64_t> total = get("MemTotal");
  if (!total || *total == 0) return absl::InvalidArgumentError("/proc/meminfo: no MemTotal");
  std::optional<int64_t> available = get("MemAvailable");
  if (!available) available = get("MemFree").value_or(0) + get("Buffers").value_or(0) + get("Cached").value_or(0);
  HostMemory m;
  m.total_bytes = *total * 1024;
  m.available_bytes = std::min(*available, *total) * 1024;
  return m;
}

absl::StatusOr<ProcessStat> ParsePidStat(std::string_view text) {
  // "pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
  //  priority nice threads itrealvalue starttime vsize rss ..."; comm may hold anything but ends at the last ')'.
  const size_t open = text.find('(');
  const size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return absl::InvalidArgumentError("stat: no (comm) field");
  }
  ProcessStat s;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(text.data(), open)), &s.pid)) {
    return absl::InvalidArgumentError("stat: bad pid");
  }
  std::vector<absl::string_view> f =
      Fields(absl::StripAsciiWhitespace(absl::string_view(text.data() + close + 1, text.size() - close - 1)));
  // f[0] is field 3 (state); field n is f[n - 3].
  if (f.size() < 22) return absl::InvalidArgumentError("stat: fewer than 24 fields");
  if (f[0].size() != 1) return absl::InvalidArgumentError("stat: bad state");
  s.state = f[0][0];
  uint64_t utime = 0, stime = 0;
  if (!absl::SimpleAtoi(f[1], &s.ppid) || !absl::SimpleAtoi(f[2], &s.pgrp) || !absl::SimpleAtoi(f[11], &utime) ||
      !absl::SimpleAtoi(f[12], &stime) || !absl::SimpleAtoi(f[19], &s.start_ticks) ||
      !absl::SimpleAtoi(f[21], &s.rss_pages)) {
    return absl::InvalidArgumentError("stat: a numeric field is not a number");
  }
  s.cpu_ticks = utime + stime;
  return s;
}

ProcReader::ProcReader(std::string proc_root) : root_(std::move(proc_root)) {
  page_size_ = sysconf(_SC_PAGESIZE);
  if (page_size_ <= 0) page_size_ = 4096;
  ticks_per_second_ = sysconf(_SC_CLK_TCK);
  if (ticks_per_second_ <= 0) ticks_per_second_ = 100;
}

absl::StatusOr<HostCpuTimes> ProcReader::ReadHostCpu() const {
  absl::StatusOr<std::string> text = ReadSmallFile(root_ + "/stat");
  if (!text.ok()) return text.status();
  return ParseProcStat(*text);
}

absl::StatusOr<HostMemory> ProcReader::ReadHostMemory() const {
  absl::StatusOr<std::string> text = ReadSmallFile(root_ + "/meminfo");
  if (!text.ok()) return text.status();
  return ParseMeminfo(*text);
}

absl::StatusOr<ProcessStat> ProcReader::ReadProcess(pid_t pid) const {
  absl::StatusOr<std::string> text = ReadSmallFile(absl::StrCat(root_, "/", pid, "/stat"));
  if (!text.ok()) return absl::NotFoundError(absl::StrCat("process ", pid, " is gone"));
  absl::StatusOr<ProcessStat> stat = ParsePidStat(*text);
  if (!stat.ok()) return stat.status();
  // Nothing reaps orphans in some containers: a zombie is as gone as a missing pid.
  if (stat->state == 'Z' || stat->state == 'X') return absl::NotFoundError(absl::StrCat("process ", pid, " is gone"));
  return stat;
}

std::vector<pid_t> ProcReader::Children(pid_t pid) const {
  std::vector<pid_t> children;
  std::error_code ec;
  const std::string task_dir = absl::StrCat(root_, "/", pid, "/task");
  for (std::filesystem::directory_iterator it(task_dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::ifstream in(it->path() / "children");
    pid_t child = 0;
    while (in >> child) children.push_back(child);
  }
  return children;
}

std::vector<ProcessStat> ProcReader::ReadTree(pid_t root, size_t limit) const {
  std::vector<ProcessStat> tree;
  std::set<pid_t> visited;
  std::vector<pid_t> pending = {root};
  while (!pending.empty() && tree.size() < limit) {
    const pid_t pid = pending.back();
    pending.pop_back();
    if (!visited.insert(pid).second) continue;
    absl::StatusOr<ProcessStat> stat = ReadProcess(pid);
    if (!stat.ok()) continue;
    tree.push_back(*stat);
    std::vector<pid_t> children = Children(pid);
    // Depth-first, children in pid order.
    pending.insert(pending.end(), children.rbegin(), children.rend());
  }
  return tree;
}

std::optional<double> CpuRateTracker::Update(const std::string& key, const std::vector<ProcessStat>& tree,
                                             int64_t now_micros) {
  Previous next;
  next.time_micros = now_micros;
  for (const ProcessStat& p : tree) next.ticks[{p.pid, p.start_ticks}] = p.cpu_ticks;
  auto it = previous_.find(key);
  if (it == previous_.end()) {
    previous_.emplace(key, std::move(next));
    return std::nullopt;
  }
  const int64_t elapsed = now_micros - it->second.time_micros;
  uint64_t ticks = 0;
  for (const auto& [id, now_ticks] : next.ticks) {
    auto before = it->second.ticks.find(id);
    const uint64_t base = before == it->second.ticks.end() ? 0 : before->second;
    if (now_ticks > base) ticks += now_ticks - base;
  }
  it->second = std::move(next);
  if (elapsed <= 0) return std::nullopt;
  const double cpu_seconds = static_cast<double>(ticks) / static_cast<double>(ticks_per_second_);
  return 100.0 * cpu_seconds / (static_cast<double>(elapsed) / 1e6);
}

void CpuRateTracker::Retain(const std::vector<std::string>& live) {
  const std::set<std::string> keep(live.begin(), live.end());
  for (auto it = previous_.begin(); it != previous_.end();) {
    it = keep.count(it->first) > 0 ? std::next(it) : previous_.erase(it);
  }
}

}  // namespace torus::metrics
