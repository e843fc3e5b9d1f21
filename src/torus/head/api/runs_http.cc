#include "torus/head/api/runs_http.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "torus/head/api/http_util.h"
#include "torus/head/api/views.h"
#include "torus/train/run_spec.h"

namespace torus::head {
namespace {

bool IntParam(const httplib::Request& req, const std::string& name, int64_t fallback, int64_t& out,
              httplib::Response& res) {
  out = fallback;
  if (!req.has_param(name)) return true;
  if (!absl::SimpleAtoi(req.get_param_value(name), &out) || out < 0) {
    SendError(res, 400, absl::StrCat("query parameter ", name, " must be a non-negative integer"));
    return false;
  }
  return true;
}

// GET /api/v0/runs/{id}/logs?ranks=all[&attempt=A][&offsets=O0,O1,...][&max_bytes=N][&wait_ms=W]
void AllRanksLogs(const httplib::Request& req, httplib::Response& res, RunService* runs) {
  if (req.get_param_value("ranks") != "all") return SendError(res, 400, "query parameter ranks must be all");
  int64_t attempt = 0, max_bytes = 0, wait_ms = 0;
  if (!IntParam(req, "attempt", 0, attempt, res) || !IntParam(req, "max_bytes", 256 << 10, max_bytes, res) ||
      !IntParam(req, "wait_ms", 0, wait_ms, res)) {
    return;
  }
  if (wait_ms > 60'000) {
    return SendError(res, 400, "query parameter wait_ms must be a whole number of milliseconds from 0 to 60000");
  }
  std::vector<int64_t> offsets;
  if (req.has_param("offsets")) {
    for (absl::string_view text : absl::StrSplit(req.get_param_value("offsets"), ',')) {
      int64_t offset = 0;
      if (!absl::SimpleAtoi(text, &offset) || offset < 0) {
        return SendError(res, 400, "query parameter offsets must be a comma-separated list of non-negative "
                                   "integers, one per rank");
      }
      offsets.push_back(offset);
    }
  }
  auto logs = runs->ReadLogs(req.matches[1], static_cast<int>(attempt), offsets, std::min<int64_t>(max_bytes, 4 << 20),
                             wait_ms);
  if (!logs.ok()) return SendStatus(res, logs.status());
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t r = 0; r < logs->ranks.size(); ++r) {
    const absl::StatusOr<LogChunk>& chunk = logs->ranks[r];
    if (!chunk.ok()) {
      ranks.push_back({{"rank", r}, {"error", std::string(chunk.status().message())}});
    } else {
      ranks.push_back({{"rank", r}, {"data", chunk->data}, {"next_offset", chunk->next_offset},
                       {"finished", chunk->finished}});
    }
  }
  SendJson(res, 200, {{"attempt", logs->attempt}, {"ranks", std::move(ranks)}});
}

}  // namespace

void RegisterRunRoutes(httplib::Server& server, RunService* runs) {
  server.Post("/api/v0/runs", [runs](const httplib::Request& req, httplib::Response& res) {
    auto spec = train::RunSpecFromJson(req.body);
    if (!spec.ok()) return SendStatus(res, spec.status());
    auto id = runs->Submit(*std::move(spec));
    if (!id.ok()) return SendStatus(res, id.status());
    auto run = runs->Get(id->str());
    SendJson(res, 200, {{"run_id", id->str()},
                        {"name", run.ok() ? nlohmann::json(run->run.spec.run.name) : nlohmann::json(nullptr)}});
  });

  server.Get("/api/v0/runs", [runs](const httplib::Request& req, httplib::Response& res) {
    nlohmann::json list = nlohmann::json::array();
    for (const RunView& run : runs->List()) list.push_back(RunJson(run));
    FilterByStatus(req, &list);
    if (Paginate(req, res, &list)) SendJson(res, 200, list);
  });

  server.Get(R"(/api/v0/runs/([^/]+))", [runs](const httplib::Request& req, httplib::Response& res) {
    auto run = runs->Get(req.matches[1]);
    if (!run.ok()) return SendStatus(res, run.status());
    SendJson(res, 200, RunJson(*run));
  });

  server.Post(R"(/api/v0/runs/([^/]+)/stop)", [runs](const httplib::Request& req, httplib::Response& res) {
    auto stopped = runs->Stop(req.matches[1]);
    if (!stopped.ok()) return SendStatus(res, stopped.status());
    SendJson(res, 200, {{"stopped", *stopped}});
  });

  server.Get(R"(/api/v0/runs/([^/]+)/logs)", [runs](const httplib::Request& req, httplib::Response& res) {
    if (req.has_param("ranks")) return AllRanksLogs(req, res, runs);
    int64_t rank = 0, attempt = 0, offset = 0, max_bytes = 0, wait_ms = 0;
    if (!IntParam(req, "rank", 0, rank, res) || !IntParam(req, "attempt", 0, attempt, res) ||
        !IntParam(req, "offset", 0, offset, res) || !IntParam(req, "max_bytes", 1 << 20, max_bytes, res) ||
        !IntParam(req, "wait_ms", 0, wait_ms, res)) {
      return;
    }
    if (wait_ms > 60'000) {
      return SendError(res, 400, "query parameter wait_ms must be a whole number of milliseconds from 0 to 60000");
    }
    auto chunk = runs->ReadLog(req.matches[1], static_cast<int>(rank), static_cast<int>(attempt), offset,
                               std::min<int64_t>(max_bytes, 16 << 20), wait_ms);
    if (!chunk.ok()) return SendStatus(res, chunk.status());
    SendJson(res, 200,
             {{"data", chunk->data}, {"next_offset", chunk->next_offset}, {"finished", chunk->finished}});
  });

  server.Post(R"(/api/v0/runs/([^/]+)/report)", [runs](const httplib::Request& req, httplib::Response& res) {
    auto reply = runs->Report(req.matches[1], req.get_header_value("Authorization"), req.body);
    if (!reply.ok()) return SendStatus(res, reply.status());
    SendJson(res, 200, *reply);
  });
}

}  // namespace torus::head
