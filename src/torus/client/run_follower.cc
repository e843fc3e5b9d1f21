#include "torus/client/run_follower.h"

#include <map>
#include <sstream>
#include <vector>

#include "absl/strings/str_format.h"
#include "torus/client/head_waiter.h"

namespace torus::client {
namespace {

// Prints whole lines of each rank with a "[rank N] " prefix; keeps partial lines until they end.
class RankPrinter {
 public:
  explicit RankPrinter(std::ostream* out) : out_(out) {}

  void Feed(int rank, const std::string& data, bool prefix) {
    std::string& buffer = partial_[rank];
    buffer += data;
    size_t start = 0, nl;
    while ((nl = buffer.find('\n', start)) != std::string::npos) {
      if (prefix) *out_ << "[rank " << rank << "] ";
      *out_ << buffer.substr(start, nl - start + 1);
      start = nl + 1;
    }
    buffer.erase(0, start);
    out_->flush();
  }

  void Flush(bool prefix) {
    for (auto& [rank, buffer] : partial_) {
      if (buffer.empty()) continue;
      if (prefix) *out_ << "[rank " << rank << "] ";
      *out_ << buffer << "\n";
      buffer.clear();
    }
    out_->flush();
  }

 private:
  std::ostream* out_;
  std::map<int, std::string> partial_;
};

struct Drained {
  bool any = false;       // something came
  bool complete = false;  // every rank read was read to its worker's end
  bool all = false;       // and every rank asked for was read (none failed): nothing more can come
};

// Reads what is new of each rank of `attempt` (or only rank `only`). An error is returned only for the one rank
// asked for; with all ranks, a lost host's log is skipped and the others go on. An unreachable head is waited for
// (`waiter`); if it stays away, that error is returned whatever the ranks.
// With `wait_ms` > 0 the head answers once a running rank writes or ends (or after that long).
absl::StatusOr<Drained> Drain(HttpApiClient& http, HeadWaiter& waiter, const std::string& id, int attempt, int ranks,
                              std::optional<int> only, std::map<int, int64_t>& offsets, RankPrinter& printer,
                              int64_t wait_ms = 0) {
  if (only) {
    auto chunk = waiter.Retry([&] { return http.ReadRunLog(id, *only, attempt, offsets[*only], wait_ms); });
    if (!chunk.ok()) return chunk.status();
    offsets[*only] = chunk->next_offset;
    if (!chunk->data.empty()) printer.Feed(*only, chunk->data, false);
    return Drained{!chunk->data.empty(), chunk->finished, chunk->finished};
  }
  // Every rank in one request (the head reads them from their agents in parallel).
  std::vector<int64_t> from(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) from[static_cast<size_t>(r)] = offsets[r];
  auto logs = waiter.Retry([&] { return http.ReadRunLogs(id, attempt, from, wait_ms); });
  if (!logs.ok()) return logs.status();
  Drained drained{false, true, static_cast<int>(logs->ranks.size()) == ranks};
  for (int r = 0; r < static_cast<int>(logs->ranks.size()); ++r) {
    const auto& chunk = logs->ranks[static_cast<size_t>(r)];
    drained.all = drained.all && chunk.ok() && chunk->finished;
    if (!chunk.ok()) continue;  // that rank's host is unreachable: the others go on
    offsets[r] = chunk->next_offset;
    drained.complete = drained.complete && chunk->finished;
    if (!chunk->data.empty()) {
      printer.Feed(r, chunk->data, true);
      drained.any = true;
    }
  }
  return drained;
}

// A failed or stopped run's last attempt may still be waiting for its root cause (the failure window).
bool Settled(const nlohmann::json& run) {
  const auto& attempts = run["attempts"];
  return attempts.empty() || run["status"] == "SUCCEEDED" || attempts.back().value("explained", true);
}

}  // namespace

bool IsTerminalStatus(const std::string& status) {
  return status == "SUCCEEDED" || status == "FAILED" || status == "STOPPED";
}

std::string GoodputLine(const nlohmann::json& goodput) {
  auto s = [&](const char* key) { return absl::StrFormat("%.1f s", goodput.value(key, 0.0)); };
  return absl::StrFormat("goodput %.1f%%: productive %s of %s (queued %s, startup %s, lost %s, restart %s)",
                         100.0 * goodput.value("goodput", 0.0), s("productive_s"), s("wall_s"), s("queued_s"),
                         s("startup_s"), s("lost_s"), s("restart_s"));
}

void PrintDetails(std::ostream& out, const std::string& prefix, const nlohmann::json& attempt) {
  const std::string details = attempt.value("end_details", "");
  std::istringstream lines(details);
  for (std::string line; std::getline(lines, line);) out << prefix << "| " << line << "\n";
}

absl::StatusOr<nlohmann::json> FollowRun(HttpApiClient& http, const std::string& id, const FollowOptions& options) {
  // How long one wait (for output, or for the run's next change) lasts at most: they answer as soon as something
  // happens; a caller that can be interrupted (options.cancelled) is asked again at least every second.
  const int64_t wait_ms = options.cancelled ? 1000 : 30'000;
  std::ostream& err = *options.err;
  HeadWaiter waiter("[torus] ", options.follow ? HeadWaiter::kMaxWait : std::chrono::milliseconds(0), options.err);
  const std::optional<int> rank = options.rank;
  int shown_attempt = 0;
  std::map<int, int64_t> offsets;
  bool read_all = false;  // every rank of shown_attempt was read to its worker's end: its output is all shown
  RankPrinter printer(options.out);
  // Where the wait for the run's next change resumes; read before the run, so that no change is missed.
  std::optional<EventCursor> cursor;
  while (true) {
    if (options.cancelled && options.cancelled()) {
      printer.Flush(!rank.has_value());
      return absl::CancelledError("stopped following the run");
    }
    if (options.follow && !cursor) {
      auto now = waiter.Retry([&] { return http.EventsNow(); });
      if (!now.ok()) return now.status();
      cursor = *now;
    }
    auto run = waiter.Retry([&] { return http.GetRun(id); });
    if (!run.ok()) return run.status();
    const int attempt = options.attempt > 0 ? options.attempt : (*run)["attempt"].get<int>();
    const std::string status = (*run)["status"].get<std::string>();
    if (attempt != shown_attempt && attempt > 0) {
      if (shown_attempt > 0) {
        if (!read_all) {
          auto drained = Drain(http, waiter, id, shown_attempt,
                               static_cast<int>((*run)["attempts"][shown_attempt - 1]["ranks"].size()), rank,
                               offsets, printer);
          if (!drained.ok()) return drained.status();
        }
        printer.Flush(!rank.has_value());
        const auto& ended = (*run)["attempts"][shown_attempt - 1];
        err << "[torus] attempt " << shown_attempt << " ended: " << ended["end_reason"].get<std::string>() << "\n";
        PrintDetails(err, "[torus]   ", ended);
      }
      const auto& a = (*run)["attempts"][attempt - 1];
      std::string from = a["checkpoint_dir"].get<std::string>();
      err << "[torus] attempt " << attempt << ": " << a["ranks"].size() << " workers"
          << (from.empty() ? "" : ", resuming from " + from) << "\n";
      err.flush();
      shown_attempt = attempt;
      offsets.clear();
      read_all = false;
    }
    Drained drained{.complete = read_all, .all = read_all};
    if (shown_attempt > 0 && !read_all) {
      // While the run runs, the read waits for output of any rank, or for all of them to end (which is how a run
      // changes while its workers run: a stop or a failure ends them); it answers at once when there is output.
      const int ranks = static_cast<int>((*run)["attempts"][shown_attempt - 1]["ranks"].size());
      const bool wait = options.follow && !IsTerminalStatus(status);
      auto read = Drain(http, waiter, id, shown_attempt, ranks, rank, offsets, printer, wait ? wait_ms : 0);
      if (!read.ok()) return read.status();
      drained = *read;
      read_all = drained.all;
    }
    const bool any = drained.any && !drained.complete;  // more may follow at once
    if (!options.follow || (IsTerminalStatus(status) && !any && Settled(*run))) {
      printer.Flush(!rank.has_value());
      if (options.follow || IsTerminalStatus(status)) {
        err << "[torus] run " << (*run)["name"].get<std::string>() << " (" << id << ") " << status << ": "
            << (*run)["message"].get<std::string>() << "\n";
        if (status != "SUCCEEDED" && !(*run)["attempts"].empty()) {
          PrintDetails(err, "[torus]   ", (*run)["attempts"].back());
        }
        if (run->contains("goodput")) err << "[torus] " << GoodputLine((*run)["goodput"]) << "\n";
        err.flush();
      }
      return *run;
    }
    // Output came, or the wait for it ended with ranks still running: read the run again, and wait again.
    if (any || (shown_attempt > 0 && !drained.complete && !IsTerminalStatus(status))) continue;
    // Nothing new and no rank running: wait for the run's next change (an attempt starting, its status).
    const std::string run_id = (*run)["run_id"].get<std::string>();
    auto changes = waiter.Retry([&] { return http.WaitEvents(&*cursor, {.ids = {run_id}}, wait_ms); });
    if (changes.status().code() == absl::StatusCode::kOutOfRange) {
      cursor.reset();  // the head restarted (or dropped the events): read the run again
    } else if (!changes.ok()) {
      return changes.status();
    }
  }
}

}  // namespace torus::client
