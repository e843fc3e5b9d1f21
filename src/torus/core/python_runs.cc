// _torus_core's functions over the head's HTTP API: for torus.train's trainers, find the API, upload a directory as
// a package, submit a run, follow it to its end, read and stop it; for torus.util.state, list actors and tasks. Runs are JSON as the REST API serves them;
// blocking calls release the GIL, and following stops on a signal (Ctrl-C raises KeyboardInterrupt in the caller).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <ostream>
#include <streambuf>
#include <string>

#include "torus/client/client.h"
#include "torus/client/http_api_client.h"
#include "torus/client/package_upload.h"
#include "torus/client/run_follower.h"
#include "torus/core/python_status.h"
#include "torus/train/run_spec.h"
#include "torus/core/channels.h"

namespace py = pybind11;

namespace torus::core {
namespace {

std::unique_ptr<client::HttpApiClient> Http(const std::string& address, const std::string& token) {
  auto http = client::HttpApiClient::Connect(
      {.address = address, .token = token, .tls_ca = core::Channels::TlsCaFromEnvironment()});
  if (!http.ok()) RaiseStatus(http.status());
  return *std::move(http);
}

// An ostream buffer that hands what it holds to a Python text stream (sys.stdout, sys.stderr, a notebook's) at each
// flush, with the GIL; an error of the stream is dropped (the output with it).
class PyStreamBuf : public std::streambuf {
 public:
  explicit PyStreamBuf(py::object stream) : stream_(std::move(stream)) {}
  ~PyStreamBuf() override { sync(); }

 protected:
  int_type overflow(int_type ch) override {
    if (ch != traits_type::eof()) buffer_.push_back(static_cast<char>(ch));
    return ch;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    buffer_.append(s, static_cast<size_t>(n));
    return n;
  }
  int sync() override {
    if (buffer_.empty()) return 0;
    py::gil_scoped_acquire gil;
    PyObject* text = PyUnicode_DecodeUTF8(buffer_.data(), static_cast<Py_ssize_t>(buffer_.size()), "replace");
    buffer_.clear();
    if (text == nullptr) {
      PyErr_Clear();
      return 0;
    }
    try {
      stream_.attr("write")(py::reinterpret_steal<py::str>(text));
      if (py::hasattr(stream_, "flush")) stream_.attr("flush")();
    } catch (py::error_already_set&) {
      PyErr_Clear();
    }
    return 0;
  }

 private:
  py::object stream_;
  std::string buffer_;
};

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
      auto c = client::Client::Connect(
          {.address = head, .token = token, .tls_ca = core::Channels::TlsCaFromEnvironment()});
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
  // Writes every rank's output (prefixed "[rank N] ") to `out` and the run's progress to `err` (Python text streams)
  // until it ends, as `torus train` does; returns the run's last view (JSON).
  m.def("follow_run", [](const std::string& http_address, const std::string& token, const std::string& id,
                         py::object out, py::object err) {
    auto http = Http(http_address, token);
    PyStreamBuf out_buf(std::move(out)), err_buf(std::move(err));
    std::ostream out_stream(&out_buf), err_stream(&err_buf);
    client::FollowOptions options;
    options.out = &out_stream;
    options.err = &err_stream;
    options.cancelled = [] {
      py::gil_scoped_acquire acquire;
      return PyErr_CheckSignals() != 0;
    };
    return Released<nlohmann::json>([&] { return client::FollowRun(*http, id, options); }).dump();
  });
}

}  // namespace torus::core
