// _torus_core's functions over the head's HTTP API: for torus.train's trainers, find the API, upload a directory as
// a package, submit a run, follow it to its end, read and stop it; for torus.util.state, list actors and tasks. Runs are JSON as the REST API serves them;
// blocking calls release the GIL, and following stops on a signal (Ctrl-C raises KeyboardInterrupt in the caller).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "torus/client/client.h"
#include "torus/client/http_api_client.h"
#include "torus/client/package_upload.h"
#include "torus/client/run_follower.h"
#include "torus/core/python_status.h"
#include "torus/train/run_spec.h"

namespace py = pybind11;

namespace torus::core {
namespace {

std::unique_ptr<client::HttpApiClient> Http(const std::string& address, const std::string& token) {
  auto http = client::HttpApiClient::Connect({.address = address, .token = token});
  if (!http.ok()) RaiseStatus(http.status());
  return *std::move(http);
}

template <typename T>
T Released(const std::function<absl::StatusOr<T>()>& call) {
  absl::StatusOr<T> result;
  {
    py::gil_scoped_release release;
    result = call();
  }
  if (!result.ok()) RaiseStatus(result.status());
  return *std::move(result);
}

}  // namespace

void AddRunFunctions(py::module_& m) {
  // The head's HTTP API (host:port), as its gRPC service says.
  m.def("head_http_address", [](const std::string& head, const std::string& token) {
    return Released<std::string>([&]() -> absl::StatusOr<std::string> {
      auto c = client::Client::Connect({.address = head, .token = token});
      if (!c.ok()) return c.status();
      auto status = (*c)->GetClusterStatus(/*include_dead=*/false);
      if (!status.ok()) return status.status();
      if (status->http_address().empty()) return absl::UnavailableError("the head's HTTP API is not listening yet");
      return status->http_address();
    });
  });
  // Packs `dir` as a py_modules package (entries under the directory's own name) and uploads it unless the head
  // has it; returns its URI.
  m.def("upload_py_module", [](const std::string& http_address, const std::string& token, const std::string& dir) {
    auto http = Http(http_address, token);
    return Released<std::string>([&]() -> absl::StatusOr<std::string> {
      auto up = client::UploadDirectory(*http, dir, {.include_parent_dir = true, .use_gitignore = false});
      if (!up.ok()) return up.status();
      return up->uri;
    });
  });
  // Submits the run spec (its REST JSON); returns (run id, name). Errors name the field (ValueError).
  m.def("submit_run", [](const std::string& http_address, const std::string& token, const std::string& spec_json) {
    auto spec = train::RunSpecFromJson(spec_json);
    if (!spec.ok()) RaiseStatus(spec.status());
    auto http = Http(http_address, token);
    auto run = Released<client::SubmittedRun>([&] { return http->SubmitRun(*spec); });
    return py::make_tuple(run.run_id, run.name);
  });
  m.def("get_run", [](const std::string& http_address, const std::string& token, const std::string& id) {
    auto http = Http(http_address, token);
    return Released<nlohmann::json>([&] { return http->GetRun(id); }).dump();
  });
  // The head's actor directory and task table (GET /api/v0/actors, /api/v0/tasks, /api/v0/tasks/summary), as JSON.
  m.def("list_actors", [](const std::string& http_address, const std::string& token, const std::string& state,
                          const std::string& job_id) {
    auto http = Http(http_address, token);
    return Released<nlohmann::json>([&] { return http->ListActors(state, job_id); }).dump();
  });
  m.def("list_tasks", [](const std::string& http_address, const std::string& token, const std::string& state,
                         const std::string& job_id, const std::string& name, int limit) {
    auto http = Http(http_address, token);
    return Released<nlohmann::json>([&] { return http->ListTasks(state, job_id, name, limit); }).dump();
  });
  m.def("task_summary", [](const std::string& http_address, const std::string& token) {
    auto http = Http(http_address, token);
    return Released<nlohmann::json>([&] { return http->TaskSummary(); }).dump();
  });
  m.def("stop_run", [](const std::string& http_address, const std::string& token, const std::string& id) {
    auto http = Http(http_address, token);
    return Released<bool>([&] { return http->StopRun(id); });
  });
  // Prints every rank's output (prefixed "[rank N] ") and the run's progress until it ends, as `torus train` does;
  // returns the run's last view (JSON).
  m.def("follow_run", [](const std::string& http_address, const std::string& token, const std::string& id) {
    auto http = Http(http_address, token);
    client::FollowOptions options;
    options.cancelled = [] {
      py::gil_scoped_acquire acquire;
      return PyErr_CheckSignals() != 0;
    };
    return Released<nlohmann::json>([&] { return client::FollowRun(*http, id, options); }).dump();
  });
}

}  // namespace torus::core
