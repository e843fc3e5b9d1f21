#include "torus/node/exit_details.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace torus::node {
namespace {

// The last `max_bytes` of the file (all of it when smaller), and whether the read started past its beginning.
std::optional<std::pair<std::string, bool>> ReadTail(const std::string& path, int64_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  in.seekg(0, std::ios::end);
  const int64_t size = in.tellg();
  if (size < 0) return std::nullopt;
  const int64_t start = std::max<int64_t>(0, size - max_bytes);
  in.seekg(start);
  std::string data(static_cast<size_t>(size - start), '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  return std::make_pair(std::move(data), start > 0);
}

// "E1201 22:27:25.123456 ..." or "F...": a glog line of severity error or fatal.
bool IsGlogError(absl::string_view line) {
  if (line.size() < 6 || (line[0] != 'E' && line[0] != 'F')) return false;
  for (size_t i = 1; i <= 4; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(line[i]))) return false;
  }
  return line[5] == ' ';
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

std::string LastLines(const std::string& path, int max_lines, int64_t max_bytes) {
  auto tail = ReadTail(path, max_bytes);
  if (!tail || max_lines <= 0) return "";
  std::vector<absl::string_view> lines = absl::StrSplit(tail->first, '\n');
  size_t first = tail->second ? 1 : 0;  // a line cut by the read's start is not shown
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.size() < first) return "";
  first = std::max(first, lines.size() > static_cast<size_t>(max_lines) ? lines.size() - max_lines : 0);
  return absl::StrJoin(lines.begin() + static_cast<std::ptrdiff_t>(first), lines.end(), "\n");
}

std::string LastGlogError(const std::string& dir, int64_t since_ms) {
  std::error_code error;
  std::vector<std::pair<int64_t, std::string>> files;  // (modified ms, path)
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    struct stat st;
    if (lstat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const int64_t modified_ms = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
    if (modified_ms >= since_ms) files.emplace_back(modified_ms, entry.path().string());
  }
  std::sort(files.begin(), files.end(), std::greater<>());
  for (const auto& [modified, path] : files) {
    auto tail = ReadTail(path, 64 << 10);
    if (!tail) continue;
    std::vector<absl::string_view> lines = absl::StrSplit(tail->first, '\n');
    for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
      absl::string_view line = absl::StripTrailingAsciiWhitespace(*it);
      if (IsGlogError(line)) return std::string(line);
    }
  }
  return "";
}

std::optional<uint64_t> ParseOomKillCount(const std::string& text) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, "oom_kill ")) continue;
    uint64_t count = 0;
    if (absl::SimpleAtoi(line, &count)) return count;
  }
  return std::nullopt;
}

std::optional<OomCounter> OomCounter::ForProcess(pid_t pid, const std::string& proc_root,
                                                 const std::string& cgroup_root) {
  const std::string table = ReadSmallFile(proc_root + "/" + std::to_string(pid) + "/cgroup");
  std::vector<std::string> candidates;
  for (absl::string_view line : absl::StrSplit(table, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    const std::string path(parts[2]);
    if (parts[1].empty()) {
      candidates.push_back(cgroup_root + path + "/memory.events");  // v2
    } else {
      for (absl::string_view controller : absl::StrSplit(parts[1], ',')) {
        if (controller == "memory") candidates.insert(candidates.begin(), cgroup_root + "/memory" + path +
                                                                              "/memory.oom_control");  // v1
      }
    }
  }
  for (std::string& candidate : candidates) {
    OomCounter counter(std::move(candidate));
    if (counter.Read()) return counter;
  }
  return std::nullopt;
}

std::optional<uint64_t> OomCounter::Read() const { return ParseOomKillCount(ReadSmallFile(path_)); }

}  // namespace torus::node
