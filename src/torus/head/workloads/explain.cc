#include "torus/head/workloads/explain.h"

#include <string.h>

#include <algorithm>
#include <map>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace torus::head {
namespace {

// A worker's end that may be the cause.
struct Finding {
  CauseKind kind = CauseKind::kNone;
  int64_t at_ms = 0;  // when it happened (a lost host: when it was last heard from)
  int rank = 0;
  std::string node;
  std::string text;
  std::string details;
};

// Host-level causes outrank a worker's own at the same moment: the worker's end is their consequence.
int Precedence(CauseKind kind) {
  switch (kind) {
    case CauseKind::kNodeMarkedDead:
    case CauseKind::kHostLost:
    case CauseKind::kAgentRestarted: return 0;
    case CauseKind::kAcceleratorError:
    case CauseKind::kOomKilled:
    case CauseKind::kStartFailed:
    case CauseKind::kSignal: return 1;
    default: return 2;
  }
}

// What a node's death said ("no heartbeat for 3.0 s"), from a lost worker's reason ("node X died: ...").
std::string DeathOf(const Worker& w) {
  absl::string_view reason = w.exit->reason;
  const std::string prefix = absl::StrCat("node ", w.node.str(), " died: ");
  if (absl::ConsumePrefix(&reason, prefix)) return std::string(reason);
  return w.exit->reason;
}

std::string SignalText(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return abbrev == nullptr ? absl::StrCat("signal ", signal) : absl::StrCat("signal ", signal, " (SIG", abbrev, ")");
}

// The line of a worker's output that says what went wrong, shortened: the exception that ended its last Python
// traceback (the first unindented line after "Traceback (most recent call last):", so that what a library prints
// after it does not hide it), else the last non-empty line.
std::string LastLine(const std::string& tail) {
  std::vector<absl::string_view> lines = absl::StrSplit(tail, '\n', absl::SkipWhitespace());
  if (lines.empty()) return "";
  absl::string_view chosen = lines.back();
  for (size_t i = lines.size(); i-- > 0;) {
    if (!absl::StartsWith(absl::StripTrailingAsciiWhitespace(lines[i]), "Traceback (most recent call last):")) continue;
    for (size_t j = i + 1; j < lines.size(); ++j) {
      if (!lines[j].empty() && !absl::ascii_isspace(static_cast<unsigned char>(lines[j][0]))) {
        chosen = lines[j];
        break;
      }
    }
    break;
  }
  std::string line(absl::StripAsciiWhitespace(chosen));
  if (line.size() > 200) line = line.substr(0, 197) + "...";
  return line;
}

// The text of a glog line ("E1201 10:00:01.000000 7 tpu.cc:2] TPU chip 1 halted" -> "TPU chip 1 halted").
std::string GlogText(const std::string& line) {
  const size_t end = line.find("] ");
  return end == std::string::npos ? line : line.substr(end + 2);
}

std::string Joined(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return absl::StrCat(a, "\n", b);
}

std::optional<Finding> FindingOf(const Worker& w, const std::string& who) {
  if (!w.exit) return std::nullopt;
  const WorkerExit& e = *w.exit;
  Finding f{.at_ms = e.wall_ms, .rank = w.rank, .node = w.node.str()};
  if (e.lost) {
    f.at_ms = e.host_last_seen_ms > 0 ? e.host_last_seen_ms : e.wall_ms;
    switch (e.host_loss) {
      case HostLoss::kSilent:
        f.kind = CauseKind::kHostLost;
        f.text = absl::StrCat("host ", f.node, " lost (", DeathOf(w), ")");
        break;
      case HostLoss::kMarkedDead:
        f.kind = CauseKind::kNodeMarkedDead;
        f.text = absl::StrCat("host ", f.node, " ", DeathOf(w));
        break;
      case HostLoss::kAgentGone:
        f.kind = CauseKind::kAgentRestarted;
        f.text = absl::StrCat("the agent of host ", f.node, " went away (", DeathOf(w), ")");
        break;
      case HostLoss::kNone:
        f.kind = CauseKind::kHostLost;
        f.text = absl::StrCat(who, " was lost: ", e.reason);
        break;
    }
    return f;
  }
  if (e.start_failed) {
    f.kind = CauseKind::kStartFailed;
    f.text = absl::StrCat(who, " failed to start: ", e.reason);
    return f;
  }
  if (e.signal != 0) {
    if (e.stopped) return std::nullopt;  // torus stopped it: a consequence, never a cause
    if (e.oom_killed) {
      f.kind = CauseKind::kOomKilled;
      f.text = absl::StrCat(who, " was killed by the kernel's OOM killer (peak RSS ", HumanBytes(e.peak_rss_bytes), ")");
    } else {
      f.kind = CauseKind::kSignal;
      f.text = absl::StrCat(who, " was killed by ", SignalText(e.signal), " from outside torus");
    }
    f.details = e.output_tail;
    return f;
  }
  if (e.exit_code == 0) return std::nullopt;
  if (!e.accelerator_error.empty()) {
    f.kind = CauseKind::kAcceleratorError;
    f.text = absl::StrCat(who, " exited with code ", e.exit_code, " after an accelerator error: ",
                          GlogText(e.accelerator_error));
    f.details = Joined(e.accelerator_error, e.output_tail);
    return f;
  }
  f.kind = CauseKind::kExitCode;
  const std::string last = LastLine(e.output_tail);
  f.text = absl::StrCat(who, " exited with code ", e.exit_code, last.empty() ? "" : ": ", last);
  f.details = e.output_tail;
  return f;
}

// "0-3, 5, 7-8".
std::string RankList(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    parts.push_back(j > i + 1 ? absl::StrCat(ranks[i], "-", ranks[j])
                              : (j == i + 1 ? absl::StrCat(ranks[i], ", ", ranks[j]) : absl::StrCat(ranks[i])));
    i = j + 1;
  }
  return absl::StrJoin(parts, ", ");
}

// How a worker that is not the cause ended, as a phrase shared by the ranks it groups ("exited 1"), and whether it
// is a failure that follows the cause.
std::pair<std::string, bool> SymptomOf(const Worker* w, const Finding* cause) {
  if (w == nullptr) return {"unknown", false};
  if (!w->exit) return {"still running", false};
  const WorkerExit& e = *w->exit;
  if (e.lost) {
    if (cause != nullptr && cause->node == w->node.str() && Precedence(cause->kind) == 0) return {"lost with it", false};
    return {absl::StrCat("lost with host ", w->node.str()), false};
  }
  if (e.start_failed) return {"failed to start", true};
  if (e.signal != 0) {
    if (e.stopped) return {"stopped by torus", false};
    if (e.oom_killed) return {"killed by the OOM killer", true};
    return {absl::StrCat("killed by ", SignalText(e.signal)), true};
  }
  if (e.exit_code == 0) return {"exited 0", false};
  return {absl::StrCat("exited ", e.exit_code), true};
}

}  // namespace

std::string CauseKindName(CauseKind kind) {
  switch (kind) {
    case CauseKind::kNone: return "";
    case CauseKind::kStopRequested: return "stopped";
    case CauseKind::kHostLost: return "host_lost";
    case CauseKind::kNodeMarkedDead: return "node_marked_dead";
    case CauseKind::kAgentRestarted: return "agent_restarted";
    case CauseKind::kStartFailed: return "start_failed";
    case CauseKind::kOomKilled: return "oom_killed";
    case CauseKind::kSignal: return "signal";
    case CauseKind::kAcceleratorError: return "accelerator_error";
    case CauseKind::kExitCode: return "exit_code";
    case CauseKind::kPlacement: return "placement";
  }
  return "";
}

Explanation ExplainAttempt(const std::vector<const Worker*>& workers, bool stop_requested) {
  std::optional<Finding> cause;
  const Worker* cause_worker = nullptr;
  for (const Worker* w : workers) {
    if (w == nullptr) continue;
    std::optional<Finding> f = FindingOf(*w, absl::StrCat("rank ", w->rank, " on ", w->node.str()));
    if (!f) continue;
    auto key = [](const Finding& x) { return std::make_tuple(x.at_ms, Precedence(x.kind), x.rank); };
    if (!cause || key(*f) < key(*cause)) {
      cause = std::move(f);
      cause_worker = w;
    }
  }
  Explanation out;
  if (stop_requested) {
    out.kind = CauseKind::kStopRequested;
    out.text = "stopped by the user";
    cause.reset();
    cause_worker = nullptr;
  } else if (cause) {
    out.kind = cause->kind;
    out.text = cause->text;
    out.details = cause->details;
  } else {
    return out;
  }
  // The others, grouped by how they ended, failures first.
  const bool peer_died = cause && cause->kind != CauseKind::kStartFailed;
  struct Symptom {
    bool failure;
    std::string phrase;
    std::vector<int> ranks;
  };
  std::vector<Symptom> groups;  // in the order of their lowest rank
  for (const Worker* w : workers) {
    if (w == nullptr || w == cause_worker) continue;
    auto [phrase, failure] = SymptomOf(w, cause ? &*cause : nullptr);
    auto it = std::find_if(groups.begin(), groups.end(), [&phrase = phrase](const Symptom& g) { return g.phrase == phrase; });
    if (it == groups.end()) {
      groups.push_back({failure, phrase, {w->rank}});
    } else {
      it->ranks.push_back(w->rank);
    }
  }
  std::stable_partition(groups.begin(), groups.end(), [](const Symptom& g) { return g.failure; });
  for (const auto& [failure, phrase, ranks] : groups) {
    const bool many = ranks.size() > 1;
    std::string after;
    if (failure && cause) after = peer_died ? (many ? " after their peer died" : " after its peer died") : " after it";
    absl::StrAppend(&out.text, "; rank", many ? "s " : " ", RankList(ranks), " ", phrase, after);
  }
  return out;
}

Explanation ExplainWorker(const Worker& worker, bool stop_requested) {
  if (stop_requested) return {CauseKind::kStopRequested, "stopped by the user", ""};
  std::optional<Finding> f = FindingOf(worker, absl::StrCat("its process on ", worker.node.str()));
  if (!f) return {};
  return {f->kind, f->text, f->details};
}

}  // namespace torus::head
