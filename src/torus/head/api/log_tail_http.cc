#include "torus/head/api/log_tail_http.h"

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "torus/head/api/jobs_http.h"
#include "torus/head/api/websocket.h"

namespace torus::head {
namespace {

constexpr absl::Duration kPingAfter = absl::Seconds(15);

// One client's tail: where it is in the log, and the text cut inside a character.
struct Tail {
  std::string job;
  int64_t offset = 0;
  Utf8Text text;
  bool closed = false;  // the close frame was sent
};

// The frames of the job's next output (or a ping after a silence, or the close once it ended).
std::string NextFrames(JobService& jobs, const EventLog& events, Tail& tail) {
  absl::StatusOr<LogChunk> chunk = ReadJobLogWaiting(jobs, events, tail.job, tail.offset, absl::Now() + kPingAfter);
  if (!chunk.ok()) {
    tail.closed = true;
    const bool gone = chunk.status().code() == absl::StatusCode::kNotFound;
    return WebSocketCloseFrame(gone ? 1000 : 1011, std::string(chunk.status().message()));
  }
  std::string frames;
  if (!chunk->data.empty()) {
    tail.offset = chunk->next_offset;
    if (std::string text = tail.text.Next(chunk->data); !text.empty()) frames = WebSocketFrame(WsOpcode::kText, text);
  }
  if (chunk->finished) {
    auto job = jobs.Get(tail.job);
    if (!job.ok() || job->job.Terminal()) {
      if (std::string rest = tail.text.Finish(); !rest.empty()) frames += WebSocketFrame(WsOpcode::kText, rest);
      frames += WebSocketCloseFrame(1000, "");
      tail.closed = true;
    }
  }
  if (frames.empty()) frames = WebSocketFrame(WsOpcode::kPing, "");
  return frames;
}

}  // namespace

void RegisterLogTailRoute(httplib::Server& server, JobService* jobs, const EventLog* events) {
  server.Get(R"(/api/jobs/([^/]+)/logs/tail)", [jobs, events](const httplib::Request& req, httplib::Response& res) {
    auto tail = std::make_shared<Tail>();
    tail->job = req.matches[1];
    if (auto job = jobs->Get(tail->job); !job.ok()) {
      res.status = 404;
      res.set_content(std::string(job.status().message()), "text/plain");
      return;
    }
    const std::string key = req.get_header_value("Sec-WebSocket-Key");
    if (absl::Status upgrade = CheckWebSocketUpgrade(req.get_header_value("Upgrade"), req.get_header_value("Connection"),
                                                     req.get_header_value("Sec-WebSocket-Version"), key);
        !upgrade.ok()) {
      res.status = 400;
      res.set_header("Sec-WebSocket-Version", "13");
      res.set_content(std::string(upgrade.message()), "text/plain");
      return;
    }
    res.status = 101;
    res.set_header("Upgrade", "websocket");
    res.set_header("Connection", "Upgrade");
    res.set_header("Sec-WebSocket-Accept", WebSocketAccept(key));
    // Without a length: the server writes what the provider gives until it returns false, then closes.
    res.set_content_provider("application/octet-stream", [jobs, events, tail](size_t, httplib::DataSink& sink) {
      if (tail->closed) return false;
      const std::string frames = NextFrames(*jobs, *events, *tail);
      return sink.write(frames.data(), frames.size());
    });
  });
}

}  // namespace torus::head
