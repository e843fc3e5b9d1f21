#include "torus/head/api/events_http.h"

#include <atomic>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "torus/head/api/http_util.h"

namespace torus::head {
namespace {

constexpr int kMaxStreams = 32;
constexpr int64_t kMaxWaitMs = 60'000;

struct EventQuery {
  uint64_t since = 0;
  bool since_given = false;
  uint64_t epoch = 0;  // 0: not given
  EventFilter filter;
  int64_t wait_ms = 0;
  bool watch = false;
};

// Parses the query; an error names the parameter and its accepted forms.
absl::StatusOr<EventQuery> ParseQuery(const httplib::Request& req) {
  EventQuery q;
  if (req.has_param("since")) {
    if (!absl::SimpleAtoi(req.get_param_value("since"), &q.since)) {
      return absl::InvalidArgumentError("query parameter since must be a revision: a whole number of at least 0");
    }
    q.since_given = true;
  }
  if (req.has_param("epoch") && (!absl::SimpleAtoi(req.get_param_value("epoch"), &q.epoch) || q.epoch == 0)) {
    return absl::InvalidArgumentError("query parameter epoch must be a whole number of at least 1");
  }
  if (req.has_param("kind")) {
    for (absl::string_view k : absl::StrSplit(req.get_param_value("kind"), ',', absl::SkipEmpty())) {
      if (!IsEventKind(std::string_view(k.data(), k.size()))) {
        return absl::InvalidArgumentError(absl::StrCat("query parameter kind: unknown kind \"", k,
                                                       "\"; use a comma-separated list of node, group, job, run, "
                                                       "worker, package, actor, service"));
      }
      q.filter.kinds.insert(std::string(k));
    }
  }
  if (req.has_param("id")) {
    for (absl::string_view id : absl::StrSplit(req.get_param_value("id"), ',', absl::SkipEmpty())) {
      q.filter.ids.insert(std::string(id));
    }
  }
  if (req.has_param("wait_ms") &&
      (!absl::SimpleAtoi(req.get_param_value("wait_ms"), &q.wait_ms) || q.wait_ms < 0 || q.wait_ms > kMaxWaitMs)) {
    return absl::InvalidArgumentError(
        absl::StrCat("query parameter wait_ms must be a whole number of milliseconds from 0 to ", kMaxWaitMs));
  }
  if (req.has_param("watch")) {
    const std::string w = req.get_param_value("watch");
    if (w != "1" && w != "true" && w != "0" && w != "false") {
      return absl::InvalidArgumentError("query parameter watch must be 1, true, 0 or false");
    }
    q.watch = w == "1" || w == "true";
  }
  return q;
}

// The HTTP status of a failed read: 410 for events that are gone, 400 for a revision ahead, 503 when stopping.
int HttpCode(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOutOfRange: return 410;
    case absl::StatusCode::kInvalidArgument: return 400;
    default: return 503;
  }
}

nlohmann::json GoneBody(const std::string& why, const EventLog& events) {
  return {{"error", why}, {"epoch", events.epoch()}, {"revision", events.revision()}};
}

std::string Sse(const std::string& event, const nlohmann::json& data, uint64_t id = 0) {
  std::string out = id > 0 ? absl::StrCat("id: ", id, "\n") : "";
  absl::StrAppend(&out, "event: ", event, "\ndata: ", data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "\n\n");
  return out;
}

// One open stream: where it has read up to, across calls of the content provider.
struct Stream {
  EventQuery query;
  uint64_t cursor = 0;
  bool greeted = false;
  std::shared_ptr<std::atomic<int>> open;
  ~Stream() { open->fetch_sub(1); }
};

}  // namespace

void RegisterEventRoutes(httplib::Server& server, const EventLog* events) {
  auto open_streams = std::make_shared<std::atomic<int>>(0);
  server.Get("/api/v0/events/revision", [events](const httplib::Request&, httplib::Response& res) {
    SendJson(res, 200, {{"epoch", events->epoch()}, {"revision", events->revision()}});
  });
  server.Get("/api/v0/events", [events, open_streams](const httplib::Request& req, httplib::Response& res) {
    auto query = ParseQuery(req);
    if (!query.ok()) return SendError(res, 400, std::string(query.status().message()));
    if (query->epoch != 0 && query->epoch != events->epoch()) {
      return SendJson(res, 410,
                      GoneBody(absl::StrCat("the head has restarted since epoch ", query->epoch, " (now epoch ",
                                            events->epoch(), "); read the objects again and watch from revision ",
                                            events->revision()),
                               *events));
    }
    if (!query->watch) {
      if (!query->since_given) query->since = events->oldest_since();
      const absl::Time deadline = absl::Now() + absl::Milliseconds(query->wait_ms);
      auto batch = events->Wait(query->since, query->filter, deadline);
      if (!batch.ok()) {
        return SendJson(res, HttpCode(batch.status()), GoneBody(std::string(batch.status().message()), *events));
      }
      nlohmann::json list = nlohmann::json::array();
      for (const Event& e : batch->events) list.push_back(EventJson(e));
      return SendJson(res, 200, {{"epoch", events->epoch()}, {"revision", batch->revision}, {"events", list}});
    }
    if (open_streams->fetch_add(1) >= kMaxStreams) {
      open_streams->fetch_sub(1);
      return SendError(res, 503, absl::StrCat("too many event streams open (at most ", kMaxStreams, ")"));
    }
    auto stream = std::make_shared<Stream>();
    stream->open = open_streams;
    stream->query = *std::move(query);
    stream->cursor = stream->query.since_given ? stream->query.since : events->revision();
    // A compressed stream would be held back in the compressor's buffer.
    const_cast<httplib::Request&>(req).headers.erase("Accept-Encoding");
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [events, stream](size_t, httplib::DataSink& sink) {
      if (!stream->greeted) {
        stream->greeted = true;
        const std::string hello = Sse("hello", {{"epoch", events->epoch()}, {"revision", stream->cursor}});
        if (!sink.write(hello.data(), hello.size())) return false;
      }
      auto batch = events->Wait(stream->cursor, stream->query.filter, absl::Now() + kEventProgressInterval);
      std::string out;
      if (!batch.ok()) {
        nlohmann::json body = GoneBody(std::string(batch.status().message()), *events);
        body["code"] = HttpCode(batch.status());
        out = Sse("error", body);
        sink.write(out.data(), out.size());
        sink.done();
        return true;
      }
      for (const Event& e : batch->events) absl::StrAppend(&out, Sse(e.kind, EventJson(e), e.revision));
      if (batch->events.empty()) out = Sse("progress", {{"revision", batch->revision}});
      stream->cursor = batch->revision;
      return sink.write(out.data(), out.size());
    });
  });
}

}  // namespace torus::head
