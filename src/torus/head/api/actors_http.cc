#include "torus/head/api/actors_http.h"

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

}  // namespace torus::head
