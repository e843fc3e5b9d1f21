#include "torus/sim/load_sampler.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace torus::sim {
namespace {

constexpr char kVisibleChipsPrefix[] = "TPU_VISIBLE_CHIPS=";
constexpr char kTpuWorkerIdPrefix[] = "TPU_WORKER_ID=";

// What one /proc/<pid> shows that matters here.
struct ProcessView {
  pid_t pid = 0;
  pid_t ppid = 0;
  uint64_t start_time = 0;
  uint64_t ticks = 0;  // utime + stime
  int64_t rss_pages = 0;
  bool marked = false;
  std::optional<std::vector<int>> chips;  // set when marked and TPU_VISIBLE_CHIPS is present
};

// Parses <pid>/stat; nullopt for a zombie, a vanished process or a malformed line.
std::optional<ProcessView> ReadStat(const std::filesystem::path& dir, pid_t pid) {
  std::ifstream in(dir / "stat");
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  // The command name (field 2) is in parentheses and may itself hold spaces or ')'.
  size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 1));
  std::vector<std::string> f;  // f[0] is field 3 (state)
  std::string token;
  while (f.size() < 22 && fields >> token) f.push_back(token);
  if (f.size() < 22) return std::nullopt;
  if (f[0] == "Z" || f[0] == "X" || f[0] == "x") return std::nullopt;
  ProcessView view;
  view.pid = pid;
  uint64_t utime = 0, stime = 0;
  int64_t ppid = 0;
  if (!absl::SimpleAtoi(f[1], &ppid) || !absl::SimpleAtoi(f[11], &utime) || !absl::SimpleAtoi(f[12], &stime) ||
      !absl::SimpleAtoi(f[19], &view.start_time) || !absl::SimpleAtoi(f[21], &view.rss_pages)) {
    return std::nullopt;
  }
  view.ppid = static_cast<pid_t>(ppid);
  view.ticks = utime + stime;
  view.rss_pages = std::max<int64_t>(view.rss_pages, 0);
  return view;
}

// Fills `marked` and `chips` from <pid>/environ (unreadable for other users' processes: not marked).
void ReadEnviron(const std::filesystem::path& dir, const std::string& mark, int chips, ProcessView& view) {
  std::ifstream in(dir / "environ", std::ios::binary);
  std::string variable;
  std::optional<std::string> visible;
  bool tpu_worker = false;
  while (std::getline(in, variable, '\0')) {
    if (variable == mark) {
      view.marked = true;
    } else if (variable.rfind(kVisibleChipsPrefix, 0) == 0) {
      visible = variable.substr(sizeof(kVisibleChipsPrefix) - 1);
    } else if (variable.rfind(kTpuWorkerIdPrefix, 0) == 0) {
      tpu_worker = true;
    }
  }
  if (!view.marked) return;
  if (visible) {
    view.chips = ParseVisibleChips(*visible, chips);
  } else if (tpu_worker) {
    // A TPU framework without TPU_VISIBLE_CHIPS opens every chip of the host, as a whole-host gang worker does.
    view.chips.emplace();
    for (int c = 0; c < chips; ++c) view.chips->push_back(c);
  }
}

}  // namespace

std::vector<int> ParseVisibleChips(const std::string& text, int chips) {
  std::vector<int> result;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int chip = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &chip) || chip < 0 || chip >= chips) continue;
    if (std::find(result.begin(), result.end(), chip) == result.end()) result.push_back(chip);
  }
  std::sort(result.begin(), result.end());
  return result;
}

LoadSampler::LoadSampler(LoadSamplerOptions options)
    : options_(std::move(options)), mark_("TORUS_WORKER_OF=" + options_.worker_mark) {}

std::vector<ChipLoad> LoadSampler::Sample(double now_seconds) {
  std::map<pid_t, ProcessView> processes;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(options_.proc_root, ec)) {
    const std::string name = entry.path().filename().string();
    char* end = nullptr;
    long pid = std::strtol(name.c_str(), &end, 10);
    if (end == name.c_str() || *end != '\0' || pid <= 0) continue;
    auto view = ReadStat(entry.path(), static_cast<pid_t>(pid));
    if (!view) continue;
    ReadEnviron(entry.path(), mark_, options_.chips, *view);
    processes.emplace(view->pid, std::move(*view));
  }

  // Each counted process, with the holder whose chips it counts for.
  auto holder_of = [&](const ProcessView& p) -> const ProcessView* {
    if (p.chips) return &p;
    const ProcessView* current = &p;
    for (int depth = 0; depth < 64; ++depth) {
      auto parent = processes.find(current->ppid);
      if (parent == processes.end() || parent->first == current->pid) return nullptr;
      current = &parent->second;
      if (current->chips) return current;
    }
    return nullptr;
  };

  const double interval = last_time_ >= 0 ? now_seconds - last_time_ : 0;
  std::vector<ChipLoad> loads(std::max(options_.chips, 0));
  std::map<ProcessKey, uint64_t> ticks;
  for (const auto& [pid, p] : processes) {
    const ProcessView* holder = holder_of(p);
    if (holder == nullptr || holder->chips->empty()) continue;
    const ProcessKey key{p.pid, p.start_time};
    ticks[key] = p.ticks;
    double cpu_percent = 0;
    if (auto last = last_ticks_.find(key); last != last_ticks_.end() && interval > 0 && p.ticks >= last->second) {
      cpu_percent = 100.0 * static_cast<double>(p.ticks - last->second) /
                    static_cast<double>(options_.ticks_per_second) / interval;
    }
    const auto share = static_cast<double>(holder->chips->size());
    for (int chip : *holder->chips) {
      ChipLoad& load = loads[chip];
      if (holder == &p) load.holders.push_back(p.pid);
      load.cpu_percent += cpu_percent / share;
      load.rss_bytes += static_cast<int64_t>(static_cast<double>(p.rss_pages * options_.page_size) / share);
    }
  }
  last_ticks_ = std::move(ticks);
  last_time_ = now_seconds;
  return loads;  // holders are ascending: `processes` is ordered by pid
}

}  // namespace torus::sim
