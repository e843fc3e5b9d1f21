#include "torus/head/api/actors_http.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "torus/head/api/http_util.h"

namespace torus::head {

void RegisterActorRoutes(httplib::Server& server, ActorDirectory* actors) {
  server.Get("/api/v0/actors", [actors](const httplib::Request& req, httplib::Response& res) {
    ActorFilter filter{.job_id = req.get_param_value("job_id")};
    if (req.has_param("state")) {
      auto state = ParseActorState("query parameter state", req.get_param_value("state"));
      if (!state.ok()) return SendStatus(res, state.status());
      filter.state = *state;
    }
    const bool by_name = req.has_param("name"), by_namespace = req.has_param("namespace");
    nlohmann::json list = nlohmann::json::array();
    for (const Actor& a : actors->List(filter)) {
      if (by_name && a.name != req.get_param_value("name")) continue;
      if (by_namespace && a.ns != req.get_param_value("namespace")) continue;
      list.push_back(ActorJson(a));
    }
    if (Paginate(req, res, &list)) SendJson(res, 200, list);
  });
  server.Get(R"(/api/v0/actors/([^/]+))", [actors](const httplib::Request& req, httplib::Response& res) {
    auto actor = actors->Get(ActorId(req.matches[1]));
    if (!actor.ok()) return SendStatus(res, actor.status());
    SendJson(res, 200, ActorJson(*actor));
  });
}

void RegisterTaskRoutes(httplib::Server& server, const TaskTable* tasks) {
  server.Get("/api/v0/tasks", [tasks](const httplib::Request& req, httplib::Response& res) {
    TaskQuery query{.state = req.get_param_value("state"), .job_id = req.get_param_value("job_id"),
                    .name = req.get_param_value("name")};
    if (!query.state.empty() && !TaskTable::IsState(query.state)) {
      return SendError(res, 400, absl::StrCat("query parameter state: \"", query.state,
                                              "\" is not a state; use PENDING, RUNNING, FINISHED or FAILED"));
    }
    if (req.has_param("limit")) {
      const std::string text = req.get_param_value("limit");
      int64_t n = 0;
      auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
      if (ec != std::errc() || ptr != text.data() + text.size() || n < 1 || n > 10'000) {
        return SendError(res, 400, absl::StrCat("limit \"", text, "\" is not valid; use a whole number from 1 to 10000"));
      }
      query.limit = static_cast<size_t>(n);
    }
    nlohmann::json list = nlohmann::json::array();
    for (const TaskRecord& t : tasks->List(query)) list.push_back(TaskJson(t));
    res.set_header("X-Total-Count", std::to_string(tasks->Count(query)));
    SendJson(res, 200, list);
  });
  server.Get("/api/v0/tasks/summary", [tasks](const httplib::Request&, httplib::Response& res) {
    SendJson(res, 200, tasks->Summary());
  });
}

}  // namespace torus::head
